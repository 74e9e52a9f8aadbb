// Byte-level BPE pre-tokenizers: the regex splits chosen by tokenizer.ggml.pre, run with PCRE2 (UTF, UCP, JIT).
#pragma once

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
};

// The spec for a tokenizer.ggml.pre name (as llama.cpp's llama-vocab.cpp names them); nullopt when unknown.
// "" (absent) and "default" give llama.cpp's default rules.
std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name);

class PreTokenizer {
public:
    explicit PreTokenizer(const std::vector<std::string>& regexes);
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    // Splits text into words, as Hugging Face's Split(pattern, behavior=isolated) sequence does: each regex splits
    // every piece into its matches and the text between them. Invalid UTF-8 never matches and stays in the gaps.
    void split(std::string_view text, std::vector<std::string_view>& words) const;

private:
    struct Regex;
    std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace quill
