// The vocabulary-independent half of the tokenizers: special ids, end-of-generation tokens, splitting special
// tokens out of the text, BOS/EOS. The model-specific halves are spm.cpp and bpe.cpp.
#include "tokenizer/tokenizer.h"

#include "engine/error.h"
#include "engine/format/gguf.h"
#include "engine/io/escape.h"
#include "engine/io/output.h"
#include "engine/io/utf8.h"
#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace quill {

namespace {

constexpr uint8_t kStripLeft = 1;   // whitespace before the token is dropped
constexpr uint8_t kStripRight = 2;  // whitespace after the token is dropped

// Texts of end-of-generation tokens, as llama.cpp's vocab loader recognizes them.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek <｜end▁of▁sentence｜>
    // fill-in-the-middle padding, repository and file separators also end generation
    "<|fim_pad|>", "<fim-pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<|file_sep|>",
};

// Fill-in-the-middle markers: not end-of-generation, but control tokens even where a converter typed them otherwise.
constexpr std::string_view kFimTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
    "<|fim_suffix|>", "<fim-suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>",
    "<|fim_middle|>", "<fim-middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

bool contains(std::span<const std::string_view> list, std::string_view s) {
    return std::find(list.begin(), list.end(), s) != list.end();
}

// An id from the metadata, checked against the vocabulary; `fallback` when absent or out of range.
int32_t resolve_id(const std::optional<int64_t>& id, int32_t fallback, const char* key, const Vocab& vocab) {
    const auto n_vocab = static_cast<int64_t>(vocab.pieces.size());
    if (fallback >= n_vocab) fallback = -1;
    if (!id) return fallback;
    if (*id >= 0 && *id < n_vocab) return static_cast<int32_t>(*id);
    print_stderr("quill: warning: {}\n",
                 escape_line(fmt::format("{}: tokenizer.ggml.{} = {} is not a token id (n_vocab {}); using {}",
                                         vocab.source, key, *id, n_vocab, fallback)));
    return fallback;
}

bool is_special_type(TokenType t) {
    return t == TokenType::control || t == TokenType::unknown || t == TokenType::user_defined;
}

}  // namespace

bool is_forced_control_text(std::string_view text) {
    return contains(kEogTexts, text) || contains(kFimTexts, text);
}

Tokenizer::Tokenizer(Vocab&& vocab, bool default_add_bos)
    : source_(vocab.source), model_(vocab.model) {
    const bool spm = model_ == "llama";
    if (!spm) pre_ = vocab.pre;
    if (vocab.pieces.empty()) throw FileError(fmt::format("{}: the vocabulary is empty", source_));
    QUILL_CHECK(vocab.types.size() == vocab.pieces.size(), "{} token types for {} tokens", vocab.types.size(),
                vocab.pieces.size());
    // llama.cpp's defaults for vocabularies that do not name their special tokens.
    bos_ = resolve_id(vocab.bos, spm ? 1 : -1, "bos_token_id", vocab);
    eos_ = resolve_id(vocab.eos, spm ? 2 : -1, "eos_token_id", vocab);
    unk_ = resolve_id(vocab.unk, spm ? 0 : -1, "unknown_token_id", vocab);
    add_bos_ = vocab.add_bos.value_or(default_add_bos);
    add_eos_ = vocab.add_eos.value_or(false);
    add_space_prefix_ = spm && vocab.add_space_prefix.value_or(true);
    if (add_bos_ && bos_ < 0)
        throw FileError(fmt::format("{}: the tokenizer adds a BOS token but has none (tokenizer.ggml.bos_token_id)",
                                    source_));
    if (add_eos_ && eos_ < 0)
        throw FileError(fmt::format("{}: the tokenizer adds an EOS token but has none (tokenizer.ggml.eos_token_id)",
                                    source_));

    const int32_t eot = resolve_id(vocab.eot, -1, "eot_token_id", vocab);
    const int32_t eom = resolve_id(vocab.eom, -1, "eom_token_id", vocab);
    pieces_ = std::move(vocab.pieces);
    types_ = std::move(vocab.types);
    collect_eog(eot, eom);
    build_special_index(vocab.general_name);
}

Tokenizer::~Tokenizer() = default;

// EOS, EOT, EOM and the tokens whose text marks an end of generation. Like llama.cpp, tokens that look like
// control tokens (end-of-generation and fill-in-the-middle markers) become control tokens whatever their type.
void Tokenizer::collect_eog(int32_t eot, int32_t eom) {
    std::vector<int32_t> eog;
    for (int32_t id = 0; id < n_vocab(); ++id) {
        const std::string& text = pieces_[static_cast<size_t>(id)];
        const bool eog_text = contains(kEogTexts, text);
        if (eog_text) eog.push_back(id);
        if (is_forced_control_text(text)) types_[static_cast<size_t>(id)] = TokenType::control;
    }
    for (int32_t id : {eos_, eot, eom}) {
        if (id >= 0) eog.push_back(id);
    }
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
    // gpt-oss's harmony format (as llama.cpp reads it): its message markers print, so that the channels of an answer
    // can be told apart, and <|end|> ends a message, not the answer, where <|return|> and <|call|> end it.
    const auto with_text = [&](std::string_view text) {
        return std::find_if(eog.begin(), eog.end(),
                            [&](int32_t id) { return pieces_[static_cast<size_t>(id)] == text; });
    };
    if (with_text("<|return|>") != eog.end() && with_text("<|call|>") != eog.end()) {
        if (const auto end = with_text("<|end|>"); end != eog.end()) {
            types_[static_cast<size_t>(*end)] = TokenType::user_defined;
            eog.erase(end);
        }
    }
    for (int32_t id = 0; id < n_vocab(); ++id) {
        const std::string& text = pieces_[static_cast<size_t>(id)];
        if (text == "<|channel|>" || text == "<|message|>" || text == "<|start|>" || text == "<|constrain|>")
            types_[static_cast<size_t>(id)] = TokenType::user_defined;
    }
    eog_ids_ = std::move(eog);
}

// Control, unknown and user-defined tokens, indexed by first byte for partition(). Phi-3 (as llama.cpp and its
// Hugging Face tokenizer do) drops the whitespace after its special tokens, except after <unk>, <s>, <|endoftext|>.
void Tokenizer::build_special_index(std::string_view general_name) {
    std::string name(general_name);
    std::transform(name.begin(), name.end(), name.begin(), [](char c) { return static_cast<char>(std::tolower(c)); });
    const bool phi3 = name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;

    specials_.assign(256, {});
    strip_.assign(pieces_.size(), 0);
    for (int32_t id = 0; id < n_vocab(); ++id) {
        const auto i = static_cast<size_t>(id);
        const bool special = is_special_type(types_[i]);
        if (special) specials_[static_cast<uint8_t>(pieces_[i][0])].push_back(id);
        if (phi3 && (special || pieces_[i] == "</s>") && pieces_[i] != "<unk>" && pieces_[i] != "<s>" &&
            pieces_[i] != "<|endoftext|>")
            strip_[i] = kStripRight;
    }
    for (auto& bucket : specials_) {
        std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
            return pieces_[static_cast<size_t>(a)].size() > pieces_[static_cast<size_t>(b)].size();
        });
    }
}

// Splits special tokens out of the text, leftmost-longest first (as Hugging Face's added-vocabulary matcher).
// User-defined tokens are always split out; control and unknown tokens only when parse_special, and never where
// they would overlap a literal span.
std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special,
                                                      std::span<const TextSpan> literal) const {
    std::vector<Fragment> fragments;
    size_t raw_begin = 0;
    size_t i = 0;
    size_t next_literal = 0;  // first span that ends after i
    // Whether [at, at + n) overlaps a literal span.
    auto overlaps_literal = [&](size_t at, size_t n) {
        while (next_literal < literal.size() && literal[next_literal].begin + literal[next_literal].size <= at)
            ++next_literal;
        for (size_t k = next_literal; k < literal.size() && literal[k].begin < at + n; ++k)
            if (literal[k].size > 0 && literal[k].begin + literal[k].size > at) return true;
        return false;
    };
    while (i < text.size()) {
        int32_t found = -1;
        for (int32_t id : specials_[static_cast<uint8_t>(text[i])]) {
            const bool user_defined = types_[static_cast<size_t>(id)] == TokenType::user_defined;
            if (!parse_special && !user_defined) continue;
            const std::string& p = pieces_[static_cast<size_t>(id)];
            if (!user_defined && !literal.empty() && overlaps_literal(i, p.size())) continue;
            if (text.compare(i, p.size(), p) == 0) {
                found = id;
                break;
            }
        }
        if (found < 0) {
            ++i;
            continue;
        }
        const uint8_t strip = strip_[static_cast<size_t>(found)];
        size_t raw_end = i;
        if (strip & kStripLeft) {
            while (raw_end > raw_begin && is_space(text[raw_end - 1])) --raw_end;
        }
        if (raw_end > raw_begin) fragments.push_back({-1, raw_begin, raw_end - raw_begin});
        fragments.push_back({found, i, pieces_[static_cast<size_t>(found)].size()});
        i += pieces_[static_cast<size_t>(found)].size();
        if (strip & kStripRight) {
            while (i < text.size() && is_space(text[i])) ++i;
        }
        raw_begin = i;
    }
    if (raw_begin < text.size()) fragments.push_back({-1, raw_begin, text.size() - raw_begin});
    return fragments;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                       CancelFlag cancel) const {
    return encode_impl(text, add_special, parse_special, {}, cancel);
}

std::vector<int32_t> Tokenizer::encode_with_literals(std::string_view text, bool add_special,
                                                     std::span<const TextSpan> literal, CancelFlag cancel) const {
    return encode_impl(text, add_special, true, literal, cancel);
}

std::vector<int32_t> Tokenizer::encode_impl(std::string_view text, bool add_special, bool parse_special,
                                            std::span<const TextSpan> literal, CancelFlag cancel) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_special && add_bos_) out.push_back(bos_);
    const std::vector<Fragment> fragments = partition(text, parse_special, literal);
    for (size_t i = 0; i < fragments.size(); ++i) {
        const Fragment& f = fragments[i];
        if ((i + 1) % kCancelStride == 0) check_cancel(cancel, "tokenizing");
        if (f.token >= 0) out.push_back(f.token);
        else encode_text(text.substr(f.begin, f.size), out, cancel);
    }
    if (add_special && add_eos_) out.push_back(eos_);
    return out;
}

std::string Tokenizer::describe_loss(std::string_view text, std::span<const int32_t> ids) const {
    std::vector<std::string> parts;
    if (model_ != "llama") {
        // Byte-level BPE keeps every byte the vocabulary has a token for and drops the others (a vocabulary may lack
        // some: the default model's lacks 21), so what was kept is the text less the dropped bytes.
        std::span<const int32_t> body = ids;
        if (add_bos_ && !body.empty() && body.front() == bos_) body = body.subspan(1);  // added by encode
        if (add_eos_ && !body.empty() && body.back() == eos_) body = body.first(body.size() - 1);
        std::string kept;
        for (int32_t id : body) kept += token_bytes(id);
        if (kept.size() < text.size()) {
            const auto at = std::mismatch(text.begin(), text.end(), kept.begin(), kept.end()).first;
            const auto first = static_cast<size_t>(at - text.begin());
            const size_t n = text.size() - kept.size();
            parts.push_back(fmt::format("{} byte{} with no token in the vocabulary (the first, 0x{:02x}, at offset {}) "
                                        "{} dropped",
                                        n, n == 1 ? "" : "s", static_cast<uint8_t>(text[first]), first,
                                        n == 1 ? "was" : "were"));
        }
    } else {
        size_t n_bad = 0, first = 0;
        for (size_t i = 0; i < text.size();) {
            const utf8::Scan r = utf8::scan(text.substr(i));
            const size_t n = std::max<size_t>(r.length, 1);
            if (r.kind != utf8::Scan::valid) {
                if (n_bad == 0) first = i;
                n_bad += n;
            }
            i += n;
        }
        if (n_bad > 0)
            parts.push_back(fmt::format("{} byte{} of invalid UTF-8 (the first, 0x{:02x}, at offset {}) became "
                                        "U+FFFD",
                                        n_bad, n_bad == 1 ? "" : "s", static_cast<uint8_t>(text[first]), first));
    }
    if (unk_ >= 0) {
        const auto n_unk = static_cast<size_t>(std::count(ids.begin(), ids.end(), unk_));
        if (n_unk > 0)
            parts.push_back(fmt::format("{} piece{} of text not in the vocabulary became the unknown token {}", n_unk,
                                        n_unk == 1 ? "" : "s", pieces_[static_cast<size_t>(unk_)]));
    }
    if (parts.empty()) return {};
    return fmt::format("{}{}{} (the tokenizer cannot represent them)", parts[0], parts.size() > 1 ? "; " : "",
                       parts.size() > 1 ? parts[1] : "");
}

void Tokenizer::check_id(int32_t id) const {
    if (id < 0 || id >= n_vocab())
        throw UsageError(fmt::format("token id {} is out of range (the vocabulary has {} tokens)", id, n_vocab()));
}

std::string_view Tokenizer::piece(int32_t id) const {
    check_id(id);
    return pieces_[static_cast<size_t>(id)];
}

TokenType Tokenizer::type(int32_t id) const {
    check_id(id);
    return types_[static_cast<size_t>(id)];
}

bool Tokenizer::is_eog(int32_t id) const { return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id); }

bool Tokenizer::is_control(int32_t id) const {
    return id >= 0 && id < n_vocab() && types_[static_cast<size_t>(id)] == TokenType::control;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    check_id(id);
    return bytes_[static_cast<size_t>(id)];
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
    Vocab vocab = read_gguf_vocab(file);
    if (vocab.model == "llama") return make_spm_tokenizer(std::move(vocab));
    if (vocab.model == "gpt2" || vocab.model == "gemma4") return make_bpe_tokenizer(std::move(vocab));
    throw FileError(fmt::format("{}: tokenizer.ggml.model '{}' is not supported (expected 'llama', 'gpt2' or "
                                "'gemma4')",
                                file.path(), vocab.model));
}

}  // namespace quill
