// SentencePiece ("llama") vocabularies, tokenized by the sentencepiece library.
#pragma once

#include "tokenizer/tokenizer.h"

#include <memory>

namespace quill {

struct Vocab;
struct SpmModel;

// Builds the sentencepiece model from the GGUF vocabulary (see build_spm_model) and loads it. The tokenizer adds
// the dummy-prefix space itself and, where the vocabulary allows, tokenizes word by word (same ids, much faster).
std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab&& vocab);

// The ModelProto that makes the sentencepiece library tokenize as llama.cpp's SPM tokenizer: BPE over the pieces'
// scores, byte fallback when all 256 <0xNN> pieces exist, identity normalizer, '▁' for spaces, the dummy prefix per
// tokenizer.ggml.add_space_prefix (default true) and no whitespace cleanup. Token types map one to one, except
// that exactly one piece can be UNKNOWN (the unknown id; phi-3 types its <unk> as control and its pads as
// unknown): other unknown pieces load as control, as do the markers is_forced_control_text names.
SpmModel build_spm_model(const Vocab& vocab);

}  // namespace quill
