#include "tokenizer/pre_tokenizer.h"

#include "engine/error.h"
#include "engine/io/utf8.h"

#include <fmt/format.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <initializer_list>

namespace quill {

namespace {

// The regexes of Hugging Face's tokenizer.json files, by family (llama.cpp's llama-vocab.cpp lists which
// pre-tokenizer name uses which; its hand-adapted forms exist only because std::regex lacks \p{..}).

// GPT-2: contractions, letters, digits, other symbols, each with one optional leading space; whitespace runs
// leave their last space to the next word.
constexpr const char* kGpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

// Llama 3: case-insensitive contractions, digits in groups of up to three, newlines apart.
constexpr const char* kLlama3 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})re"
    R"re(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Qwen2: as Llama 3 with single digits.
constexpr const char* kQwen2 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})re"
    R"re(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Mistral tekken: words split at lower-to-upper case changes.
constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)re"
    R"re(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)re"
    R"re(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// CJK ideographs and Hangul as DeepSeek writes them: U+4E00..9FA5, U+0800..4E00, U+AC00..D7FF.
constexpr const char* kDeepseekCjk = R"re([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";

// DeepSeek LLM: cased letters (Unicode Lu, Ll, Lt and a few more), written as code points.
constexpr const char* kDeepseekLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})re"
    R"re(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})re"
    R"re(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})re"
    R"re(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})re"
    R"re(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})re"
    R"re(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})re"
    R"re(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})re"
    R"re(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})re"
    R"re(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})re"
    R"re(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})re"
    R"re(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})re"
    R"re(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})re"
    R"re(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";

// DeepSeek LLM punctuation: ASCII and full-width symbols, quotes, ideographic space and stops.
constexpr const char* kDeepseekPunct =
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re";

constexpr const char* kDeepseekV3 =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)re"
    R"re(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// BLOOM / Poro: everything up to whitespace or a sentence mark.
constexpr const char* kBloom = R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)re";

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), name) != names.end();
}

PreTokenizerSpec spec(std::vector<std::string> regexes, bool ignore_merges = false, bool add_bos = false) {
    return {std::move(regexes), ignore_merges, add_bos};
}

}  // namespace

std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name) {
    if (one_of(name, {"", "default"}))
        return spec({R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"});
    if (one_of(name, {"llama3", "llama-v3", "llama-bpe", "falcon3"})) return spec({kLlama3}, true, true);
    if (one_of(name, {"dbrx", "smaug-bpe", "chatglm-bpe"})) return spec({kLlama3});
    if (one_of(name, {"qwen2", "stablelm2", "megrez"})) return spec({kQwen2});
    if (name == "tekken") return spec({kTekken}, true, true);
    if (one_of(name, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de",
                      "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais"}))
        return spec({kGpt2});
    if (one_of(name, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}))
        return spec({R"re(\p{N})re", kGpt2});
    if (name == "falcon") return spec({R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"});
    if (name == "deepseek-coder")
        return spec({R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kDeepseekCjk, R"re(\p{N})re"});
    if (name == "deepseek-llm")
        return spec({R"re([\r\n])re", kDeepseekLetters, kDeepseekPunct, R"re(\s+$)re", kDeepseekCjk,
                     R"re(\p{N}+)re"});
    if (name == "deepseek-v3")
        return spec({R"re(\p{N}{1,3})re", R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
                     kDeepseekV3});
    if (one_of(name, {"poro-chat", "bloom", "gpt3-finnish"})) return spec({kBloom});
    if (name == "viking") return spec({kBloom, R"re(\p{N})re"});
    return std::nullopt;
}

// ---- PCRE2 ----

struct PreTokenizer::Regex {
    pcre2_code* code = nullptr;
    bool jit = false;

    explicit Regex(const std::string& pattern) {
        int error = 0;
        PCRE2_SIZE offset = 0;
        code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
        if (!code) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error, message, sizeof message);
            throw Error(fmt::format("pre-tokenizer regex '{}' does not compile at offset {}: {}", pattern, offset,
                                    reinterpret_cast<const char*>(message)));
        }
        jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    }
    ~Regex() { pcre2_code_free(code); }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;
};

namespace {

struct MatchData {
    pcre2_match_data* md;
    explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
        if (!md) throw std::bad_alloc();
    }
    ~MatchData() { pcre2_match_data_free(md); }
    MatchData(const MatchData&) = delete;
    MatchData& operator=(const MatchData&) = delete;
};

// The next match in `s` at or after `from`: [begin, end), or begin == npos when there is none.
std::pair<size_t, size_t> find_match(const pcre2_code* code, bool jit, MatchData& m, std::string_view s,
                                     size_t from) {
    const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    int rc = jit ? pcre2_jit_match(code, subject, s.size(), from, 0, m.md, nullptr)
                 : pcre2_match(code, subject, s.size(), from, 0, m.md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(code, subject, s.size(), from, PCRE2_NO_JIT, m.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return {std::string_view::npos, 0};
    if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof message);
        throw Error(fmt::format("pre-tokenizer regex match failed: {}", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
    return {ov[0], ov[1]};
}

}  // namespace

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
    for (const std::string& r : regexes) regexes_.push_back(std::make_unique<Regex>(r));
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words) const {
    words.clear();
    if (text.empty()) return;
    words.push_back(text);
    std::vector<std::string_view> next;
    for (const auto& re : regexes_) {
        MatchData m(re->code);
        next.clear();
        next.reserve(words.size() * 2);
        for (std::string_view piece : words) {
            size_t pos = 0;   // start of the text not yet emitted
            size_t from = 0;  // where the next search starts
            while (from < piece.size()) {
                auto [begin, end] = find_match(re->code, re->jit, m, piece, from);
                if (begin == std::string_view::npos) break;
                if (end == begin) {  // an empty match splits nothing; search on from the next character
                    if (begin >= piece.size()) break;
                    from = begin + utf8::scan(piece.substr(begin)).length;
                    continue;
                }
                if (begin > pos) next.push_back(piece.substr(pos, begin - pos));
                next.push_back(piece.substr(begin, end - begin));
                pos = from = end;
            }
            if (pos < piece.size()) next.push_back(piece.substr(pos));
        }
        words.swap(next);
    }
}

}  // namespace quill
