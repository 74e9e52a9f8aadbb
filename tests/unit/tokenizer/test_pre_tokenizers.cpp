// Pre-tokenizers: every tokenizer.ggml.pre name llama.cpp knows has its rules; the rules split as the models'
// tokenizer.json regexes do (expected words from Python's regex module on the same patterns); and llama.cpp's test
// vocabularies (models/ggml-vocab-*.gguf, written by models/fetch_vocab.sh) tokenize as their vectors in
// tests/data/vocab/ say (made with Hugging Face tokenizers).
#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/format/gguf.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"
#include "tests/unit/tokenizer/vocab_vectors.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>

namespace test_pre_tokenizers {

using quill::Tokenizer;
using V = std::vector<std::string>;

namespace {

// Every tokenizer.ggml.pre name in llama-vocab.cpp of llama-cpp-python 0.3.36's llama.cpp.
const std::vector<std::string_view> kLlamaCppNames = {
    "a.x-4.0", "afmoe", "bailingmoe", "bailingmoe2", "bloom", "chameleon", "chatglm-bpe", "codeshell", "cohere2moe",
    "command-r", "dbrx", "deepseek-coder", "deepseek-llm", "deepseek-r1-qwen", "deepseek-v3", "default", "exaone",
    "exaone-moe", "exaone4", "f2llmv2", "falcon", "falcon-h1", "falcon3", "gemma4", "gigachat", "glm4", "glm5",
    "gpt-2", "gpt-4o", "gpt3-finnish", "granite-docling", "granite-embed-multi-311m", "granite-embed-multi-97m",
    "grok-2", "hunyuan", "hunyuan-dense", "hy_v4", "jais", "jais-2", "jina-de", "jina-es", "jina-v1-en",
    "jina-v2-code", "jina-v2-de", "jina-v2-es", "jina-v5-nano", "joyai-llm", "kanana2", "kimi-k2", "kormo", "laguna",
    "lfm2", "llada-moe", "llama-bpe", "llama-v3", "llama3", "llama4", "megrez", "mellum", "mellum2", "midm-2.0",
    "minerva-7b", "minicpm5", "minimax-m2", "modern-bert", "mpt", "olmo", "phi-2", "pixtral", "poro-chat", "qwen2",
    "qwen35", "refact", "roberta-bpe", "sarvam-moe", "seed-coder", "smaug-bpe", "smollm", "solar-open", "spark2_5",
    "stablelm2", "starcoder", "superbpe", "talkie", "tekken", "tiny_aya", "trillion", "ufakzeka", "viking",
    "whitespace", "youtu"};

V split(std::string_view name, std::string_view text) {
    const auto spec = quill::pre_tokenizer_spec(name);
    REQUIRE(spec);
    const quill::PreTokenizer pre(spec->regexes);
    std::vector<std::string_view> words;
    pre.split(text, words);
    return V(words.begin(), words.end());
}

}  // namespace

TEST_CASE("every pre-tokenizer name llama.cpp knows has quill's rules, and they split text whole", "[tokenizer]") {
    const std::string text = "Hello WORLDwide's d\xC3\xA9j\xC3\xA0-vu\n\tcode 1234567 \xE4\xB8\xAD\xE6\x96\x87"
                             "abc \xC3\x89" "COLE  x\r\n\n<sentinel:12> IMGIMGABZ "
                             "\xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD \xFF!";
    for (std::string_view name : kLlamaCppNames) {
        INFO("pre-tokenizer '" << name << "'");
        if (quill::is_raw_utf8_pre_tokenizer(name)) {
            CHECK_FALSE(quill::pre_tokenizer_spec(name));
            continue;
        }
        std::string joined;
        for (const std::string& w : split(name, text)) joined += w;
        CHECK(joined == text);  // the words cover the text exactly, invalid UTF-8 (0xFF) included
    }
    // And quill knows no name llama.cpp does not.
    for (std::string_view name : quill::known_pre_tokenizers()) {
        INFO("pre-tokenizer '" << name << "'");
        CHECK((name.empty() || std::find(kLlamaCppNames.begin(), kLlamaCppNames.end(), name) != kLlamaCppNames.end()));
    }
}

TEST_CASE("pre-tokenizers of the newer families split as their tokenizer.json regexes", "[tokenizer]") {
    const std::string text = "Hello WORLDwide's d\xC3\xA9j\xC3\xA0-vu\n\tcode 1234567 \xE4\xB8\xAD\xE6\x96\x87"
                             "abc \xC3\x89" "COLE na\xC3\xAFve  x\n\n";
    const std::string deja = " d\xC3\xA9j\xC3\xA0", han = "\xE4\xB8\xAD\xE6\x96\x87", ecole = " \xC3\x89" "COLE",
                      naive = " na\xC3\xAFve";
    // Qwen2 (DeepSeek-R1-Distill-Qwen): single digits, a newline alone, a tab leading its word.
    const V qwen2 = {"Hello", " WORLDwide", "'s", deja, "-vu", "\n", "\tcode", " ", "1", "2", "3", "4", "5", "6",
                     "7", " " + han + "abc", ecole, naive, " ", " x", "\n\n"};
    CHECK(split("deepseek-r1-qwen", text) == qwen2);
    CHECK(split("qwen35", text) == qwen2);
    CHECK(split("qwen35", "e\xCC\x81x") == V{"e\xCC\x81x"});  // a combining mark stays in its word
    CHECK(split("qwen2", "e\xCC\x81x") == V{"e", "\xCC\x81x"});
    // GPT-4o / o200k (gpt-oss, Llama 4): contractions on the word, digits in threes.
    const V gpt4o = {"Hello", " WORLDwide's", deja, "-vu", "\n", "\tcode", " ", "123", "456", "7",
                     " " + han + "abc", ecole, naive, " ", " x", "\n\n"};
    CHECK(split("gpt-4o", text) == gpt4o);
    CHECK(split("llama4", text) == gpt4o);
    // Kimi K2: Han runs apart from other letters.
    CHECK(split("kimi-k2", text) == V{"Hello", " WORLDwide's", deja, "-vu", "\n", "\tcode", " ", "123", "456", "7",
                                      " ", han, "abc", ecole, naive, " ", " x", "\n\n"});
    // Tiny Aya: digit groups of three from the right, only before a word boundary (else in threes from the left).
    CHECK(split("tiny_aya", "x 1234567 8912abc") == V{"x", " ", "1", "234", "567", " ", "891", "2", "abc"});
    // SuperBPE: no word splits at all, digit runs in threes from the right (a lookahead-only regex).
    CHECK(split("superbpe", "a b 1234567") == V{"a b ", "1", "234", "567"});
    // AFMoE: the same digit groups, whatever follows.
    CHECK(split("afmoe", "x1234567y") == V{"x", "1", "234", "567", "y"});
    // Jais 2: whitespace runs in powers of two.
    CHECK(split("jais-2", "a" + std::string(13, ' ') + "b") == V{"a", std::string(8, ' '), "    ", " b"});
    // EXAONE MoE: letter words joined by single spaces are one word.
    CHECK(split("exaone-moe", "Hello big world, 42") == V{"Hello big world", ",", " ", "4", "2"});
    // Chameleon: image tokens whole (its sentinels are special tokens, split out before the pre-tokenizer).
    CHECK(split("chameleon", "<sentinel:12>IMGIMGABZ") == V{"<", "sentinel", ":", "1", "2", ">", "IMGIMGABZ"});
}

TEST_CASE("a vocabulary of raw UTF-8 tokens is refused, an unknown pre-tokenizer stays a warning", "[tokenizer]") {
    const quill::GgufFile gpt2 = quill::test::vocab_gguf(quill::test::tiny_bpe_vocab());
    quill::GgufWriter w;
    for (const auto& [key, value] : gpt2.metadata()) {
        if (key.starts_with("tokenizer.")) w.set(key, value);
    }
    w.set("tokenizer.ggml.pre", "sarvam-moe");
    try {
        Tokenizer::from_gguf(quill::GgufFile::parse("raw-utf8", w.to_bytes()));
        FAIL("a sarvam-moe vocabulary loaded");
    } catch (const quill::FileError& e) {
        CHECK_THAT(e.what(), Catch::Contains("sarvam-moe") && Catch::Contains("raw UTF-8"));
    }
    w.set("tokenizer.ggml.pre", "qwen35");
    CHECK(Tokenizer::from_gguf(quill::GgufFile::parse("qwen35", w.to_bytes()))->pre_name() == "qwen35");
    w.set("tokenizer.ggml.pre", "no-such-pre-tokenizer");
    CHECK(Tokenizer::from_gguf(quill::GgufFile::parse("unknown", w.to_bytes()))->pre_name() == "gpt-2");
}

TEST_CASE("tokenizer vectors of llama.cpp's BPE and SPM vocabularies", "[tokenizer]") {
    const std::vector<std::string> names = {"command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4",
                                            "gpt-2", "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35",
                                            "refact", "starcoder"};
    for (const std::string& name : names) {
        if (!quill::test::fetched_vocab("ggml-vocab-" + name + ".gguf")) return;  // skips before any check
    }
    for (const std::string& name : names) {
        INFO("vocabulary " << name);
        quill::test::check_fetched_vocab("ggml-vocab-" + name + ".gguf", "ggml-vocab-" + name + ".gguf");
    }
}

}  // namespace test_pre_tokenizers
