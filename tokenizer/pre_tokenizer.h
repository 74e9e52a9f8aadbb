// Byte-level BPE pre-tokenizers: the regex splits chosen by tokenizer.ggml.pre, run with PCRE2 (UTF, UCP, JIT).
#pragma once

#include "engine/io/cancel.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

struct PreTokenizerSpec {
    std::vector<std::string> regexes;  // applied in order; each splits every piece the previous ones produced
    bool ignore_merges = false;        // a word that is itself a token is emitted whole (Llama 3, tekken)
    bool add_bos = false;              // default for tokenizer.ggml.add_bos_token
    // Raw UTF-8 tokens (gemma4): spaces become '▁' before the split, merges start from characters rather than
    // GPT-2-mapped bytes, a character with no token falls back to <0xXX> byte tokens, and BOS is always added.
    bool raw_utf8 = false;
};

// The spec for a tokenizer.ggml.pre name (as llama.cpp's llama-vocab.cpp names them); nullopt when unknown or
// raw UTF-8 (below). "" (absent) and "default" give llama.cpp's default rules. The regexes are the models'
// tokenizer.json ones, so the words are Hugging Face's (llama.cpp rewrites some for std::regex, not all exactly).
std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name);

// Whether llama.cpp knows the name as a vocabulary of raw UTF-8 tokens with '▁' for spaces (granite-embed-multi-311m,
// sarvam-moe, whitespace) that quill does not run; gemma4, the one it runs, has a spec with raw_utf8 set.
bool is_raw_utf8_pre_tokenizer(std::string_view name);

// Every name pre_tokenizer_spec knows, for tests and messages.
std::vector<std::string_view> known_pre_tokenizers();

class PreTokenizer {
public:
    explicit PreTokenizer(const std::vector<std::string>& regexes);
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    // Splits text into words, as Hugging Face's Split(pattern, behavior=isolated) sequence does: each regex splits
    // every piece into its matches and the text between them; an empty match (a regex of lookaheads only) splits
    // the piece where it matches. Invalid UTF-8 never matches and stays in the gaps. cancel: polled every few
    // thousand matches (check_cancel).
    void split(std::string_view text, std::vector<std::string_view>& words, CancelFlag cancel = nullptr) const;

private:
    struct Regex;
    std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace quill
