// The vocabulary as stored in a GGUF file (tokenizer.ggml.*) or a sentencepiece model, before a tokenizer is built.
#pragma once

#include "tokenizer/tokenizer.h"

#include <optional>
#include <string>
#include <vector>

namespace quill {

class GgufFile;

struct Vocab {
    std::string source;  // file path, for messages
    std::string model;   // tokenizer.ggml.model: "llama", "gpt2" or "gemma4"
    std::string pre;     // tokenizer.ggml.pre; "" when absent
    std::string general_name;
    std::vector<std::string> pieces;  // [n_vocab]; an empty text is renamed "[EMPTY_<id>]" as llama.cpp does
    std::vector<float> scores;        // [n_vocab]; 0 when the metadata has none
    std::vector<TokenType> types;     // [n_vocab]
    std::vector<std::string> merges;  // gpt2 and gemma4: "left right", rank = index
    // Special ids as stored; out-of-range values are dropped with a warning when the tokenizer is built.
    std::optional<int64_t> bos, eos, unk, eot, eom;
    std::optional<bool> add_bos, add_eos, add_space_prefix;
};

// Reads tokenizer.ggml.* metadata. FileError on missing or inconsistent metadata.
Vocab read_gguf_vocab(const GgufFile& file);
// Overrides special ids, add_bos/add_eos and the general name with the file's metadata where present.
void read_gguf_specials(const GgufFile& file, Vocab& vocab);

}  // namespace quill
