// Byte-level BPE ("gpt2") vocabularies: GPT-2's byte-to-unicode mapping, merges applied by rank after a regex
// pre-tokenizer (pre_tokenizer.h). Also "gemma4" ones: the same merges over raw UTF-8 tokens (raw_utf8 spec).
#pragma once

#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <memory>

namespace quill {

struct Vocab;

// tokenizer.ggml.merges is required. An unknown tokenizer.ggml.pre gets a warning on stderr and the GPT-2 rules;
// tokenizer.ggml.model "gemma4" means the gemma4 pre-tokenizer, whatever tokenizer.ggml.pre says.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab&& vocab);

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100..U+0143.
uint32_t byte_to_codepoint(uint8_t byte);

}  // namespace quill
