// The pre-tokenizer of each tokenizer.ggml.pre name: which regexes split the text, whether whole-word tokens skip
// the merges, whether BOS is added by default. The names are llama.cpp's (src/llama-vocab.cpp); the regexes are
// the Split patterns of the models' tokenizer.json files, which PCRE2 runs as written.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

namespace quill {

namespace {

// GPT-2: contractions, letters, digits, other symbols, each with one optional leading space; whitespace runs
// leave their last space to the next word.
constexpr const char* kGpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

// Llama 3 (cl100k): case-insensitive contractions, a letter run with one leading non-letter, digits in groups of
// up to three, symbols with the newlines after them, newlines apart from other whitespace.
constexpr const char* kLlama3 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})re"
    R"re(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Qwen2: as Llama 3 with single digits.
constexpr const char* kQwen2 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})re"
    R"re(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Qwen3.5: as Qwen2 with combining marks kept in their word.
constexpr const char* kQwen35 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N})re"
    R"re(| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// MiniCPM 5: as Qwen2 with digit runs whole (a first regex cuts them into threes).
constexpr const char* kMiniCpm5 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+)re"
    R"re(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Jais 2: as Llama 3 with whitespace runs cut into powers of two.
constexpr const char* kJais2 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)re"
    R"re(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S))re"
    R"re(|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})re";

// Qwen2 without the contractions, so that Turkish suffixes after an apostrophe stay in their word.
constexpr const char* kUfakzeka =
    R"re([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Seed-Coder: as Qwen2, newlines never inside a symbol run.
constexpr const char* kSeedCoder =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+)re"
    R"re(|\s+(?!\S)|\s+)re";

// Ling (bailingmoe): possessive, one newline a word.
constexpr const char* kBailing =
    R"re('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re";

// EXAONE MoE: words of letters with their marks, joined by single spaces into one word.
constexpr const char* kExaoneMoe =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N})re"
    R"re(| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)re";

// Mistral tekken: words split at lower-to-upper case changes.
constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)re"
    R"re(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)re"
    R"re(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// GPT-4o (o200k, also gpt-oss and Llama 4): as tekken with contractions on the word and digits in threes.
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)re"
    R"re(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)re"
    R"re(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Youtu: the GPT-4o words with single digits, after Hangul, CJK punctuation, bopomofo and CJK/kana runs.
constexpr const char* kYoutuCjk =
    R"re([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+)re"
    R"re(|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F})re"
    R"re(\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re";
constexpr const char* kYoutu =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)re"
    R"re(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)re"
    R"re(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Kimi K2: Han runs first, then the GPT-4o words of every other letter.
constexpr const char* kKimiK2 =
    R"re(\p{Han}+)re"
    R"re(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+)re"
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)?)re"
    R"re(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*)re"
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)?)re"
    R"re(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

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

// DeepSeek V3: CJK ideographs and kana apart, then words that keep one leading ASCII symbol.
constexpr const char* kCjkKana = R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re";
constexpr const char* kDeepseekV3 =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)re"
    R"re(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Spark 2.5: as DeepSeek V3 with one newline a word.
constexpr const char* kSpark25 =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)re"
    R"re(| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)re";

// AFMoE: CJK and South-East Asian scripts, with the code points llama.cpp gives them.
constexpr const char* kAfmoeAsian =
    R"re([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{8C48}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F})re"
    R"re(\x{2F00}-\x{2FDF}\x{0E40}-\x{0E7F}\x{0E80}-\x{0EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F})re"
    R"re(\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)re";

// Digit runs in threes from the right: 1234567 -> 1 234 567.
constexpr const char* kDigitsInThrees = R"re(\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))re";

// BLOOM / Poro: everything up to whitespace or a sentence mark.
constexpr const char* kBloom = R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)re";

struct Rule {
    std::vector<std::string_view> names;
    std::vector<const char*> regexes;
    bool ignore_merges = false;
    bool add_bos = false;
    bool raw_utf8 = false;
};

const std::vector<Rule>& rules() {
    static const std::vector<Rule> table = {
        {{"", "default"}, {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"}},
        {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
         {kLlama3}, true, true},
        {{"dbrx", "smaug-bpe", "chatglm-bpe"}, {kLlama3}},
        {{"glm4", "glm5"}, {kLlama3}, true},
        {{"jais-2"}, {kJais2}},
        {{"minicpm5"}, {R"re(\p{N}{1,3})re", kMiniCpm5}, true},
        {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan", "solar-open", "grok-2"},
         {kQwen2}},
        {{"qwen35"}, {kQwen35}},
        {{"laguna"}, {R"re([^\n]+|[\n]+)re", kQwen2}},
        {{"ufakzeka"}, {kUfakzeka}},
        {{"seed-coder"}, {kSeedCoder}},
        {{"bailingmoe", "bailingmoe2", "llada-moe"}, {kBailing}},
        {{"exaone-moe"}, {kExaoneMoe}},
        {{"tekken"}, {kTekken}, true, true},
        {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4o}},
        {{"granite-embed-multi-97m"}, {kGpt4o}, true},
        {{"tiny_aya", "cohere2moe"}, {R"re(\d{1,3}(?=(?:\d{3})*\b))re", kGpt4o}},
        {{"youtu"}, {kYoutuCjk, kYoutu}, true},
        {{"kimi-k2"}, {kKimiK2}},
        {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de",
          "jina-v2-code", "roberta-bpe", "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "jais", "exaone4",
          "trillion", "granite-docling"},
         {kGpt2}},
        {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
         {R"re(\p{N})re", kGpt2}},
        {{"falcon"}, {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"}},
        {{"chameleon"},
         {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", R"re(\p{N})re",
          R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2},
         false, true},
        {{"superbpe"}, {R"re(\p{N}+)re", R"re((?=(\d{3})+(?!\d)))re"}},
        {{"deepseek-coder"},
         {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kDeepseekCjk, R"re(\p{N})re"}},
        {{"deepseek-llm"},
         {R"re([\r\n])re", kDeepseekLetters, kDeepseekPunct, R"re(\s+$)re", kDeepseekCjk, R"re(\p{N}+)re"}},
        {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"}, {R"re(\p{N}{1,3})re", kCjkKana, kDeepseekV3}},
        {{"spark2_5"}, {R"re(\p{N}{1,3})re", kCjkKana, kSpark25, R"re(\p{N})re"}},
        {{"afmoe"}, {kDigitsInThrees, kAfmoeAsian, kDeepseekV3}},
        {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloom}},
        {{"viking"}, {kBloom, R"re(\p{N})re"}},
        // Gemma 4: raw UTF-8 tokens, spaces already '\xE2\x96\x81'; merges run over whole lines, newline runs apart.
        {{"gemma4"}, {R"re([^\n]+|\n+)re"}, false, true, true},
    };
    return table;
}

}  // namespace

std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name) {
    for (const Rule& rule : rules()) {
        if (std::find(rule.names.begin(), rule.names.end(), name) == rule.names.end()) continue;
        return PreTokenizerSpec{{rule.regexes.begin(), rule.regexes.end()}, rule.ignore_merges, rule.add_bos,
                                rule.raw_utf8};
    }
    return std::nullopt;
}

bool is_raw_utf8_pre_tokenizer(std::string_view name) {
    return name == "granite-embed-multi-311m" || name == "sarvam-moe" || name == "whitespace";
}

std::vector<std::string_view> known_pre_tokenizers() {
    std::vector<std::string_view> names;
    for (const Rule& rule : rules()) names.insert(names.end(), rule.names.begin(), rule.names.end());
    return names;
}

}  // namespace quill
