// Gemma 4's vocabulary (models/ggml-vocab-gemma-4.gguf, written by models/fetch_vocab.sh): raw UTF-8 tokens with '▁'
// for spaces and <0xNN> byte fallback, tokenized by BPE merges over whole lines (tokenizer.ggml.model "gemma4").
// Checked against llama.cpp's vectors (tests/data/vocab/ggml-vocab-gemma-4.gguf.inp/.out) and the hard cases of
// make_vectors.py there (gemma-4.inp/.out, from llama.cpp's llama-tokenize), each of them encoded and decoded back.
#include <catch2/catch.hpp>

#include "engine/format/gguf.h"
#include "tests/support/test_util.h"
#include "tests/unit/tokenizer/vocab_vectors.h"
#include "tokenizer/tokenizer.h"

namespace test_gemma4_vocab {

using quill::Tokenizer;

TEST_CASE("tokenizer vectors of Gemma 4 (gemma4): llama.cpp's and the hard cases", "[tokenizer]") {
    // llama.cpp's 46 strings (newline and whitespace runs, emoji, Khmer, CJK, digits), then the same 46 and
    // make_vectors.py's 18 hard cases (déjà-vu, "\n\tcode", CJK, kana, Hangul, ZWJ emoji, "\r\n", role markers).
    quill::test::check_fetched_vocab("ggml-vocab-gemma-4.gguf", "ggml-vocab-gemma-4.gguf");
    quill::test::check_fetched_vocab("ggml-vocab-gemma-4.gguf", "gemma-4");
}

TEST_CASE("Gemma 4's vocabulary: BOS always, its end-of-generation tokens, byte fallback", "[tokenizer]") {
    const auto path = quill::test::fetched_vocab("ggml-vocab-gemma-4.gguf");
    if (!path) return;
    const auto tok = Tokenizer::from_gguf(quill::GgufFile::open(path->string()));
    CHECK(tok->model_name() == "gemma4");
    CHECK(tok->pre_name() == "gemma4");
    CHECK(tok->n_vocab() == 262144);
    CHECK(tok->bos() == 2);
    CHECK(tok->add_bos());
    // llama.cpp's EOG list for this file: <eos>, <|tool_response> (made a control token) and <turn|>.
    CHECK(tok->eog_ids() == std::vector<int32_t>{1, 50, 106});
    CHECK(tok->is_control(50));
    // A character with no token becomes the <0xNN> tokens of its bytes, which decode back to it.
    // (ids from llama-tokenize --no-bos)
    const std::string rare = "\xF4\x8F\xBF\xBD";  // U+10FFFD, a private-use character
    const std::vector<int32_t> ids = tok->encode(rare, false, false);
    CHECK(ids == std::vector<int32_t>{482, 381, 429, 427});  // <0xF4> <0x8F> <0xBF> <0xBD>
    for (int32_t id : ids) CHECK(tok->type(id) == quill::TokenType::byte);
    CHECK(quill::decode(*tok, ids) == rare);
    CHECK(tok->describe_loss(rare, ids).empty());
}

TEST_CASE("quill tokenize on Gemma 4's vocabulary prints llama-tokenize's ids", "[tokenizer][cli]") {
    const auto path = quill::test::fetched_vocab("ggml-vocab-gemma-4.gguf");
    if (!path) return;
    // Expected: llama.cpp's `llama-tokenize -m models/ggml-vocab-gemma-4.gguf -p TEXT --ids` (BOS 2 added).
    struct Case {
        std::string text;
        std::string ids;
    };
    const std::vector<Case> cases = {
        {"Hello world\n\n\nfoo\n", "2 9259 1902 109 26537 107"},
        {"\xE4\xB8\xAD\xE6\x96\x87\xE5\x88\x86\xE8\xAF\x8D\xE6\xB5\x8B\xE8\xAF\x95\xEF\xBC\x8C\xE4\xBD\xA0\xE5\xA5\xBD"
         "\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82",  // 中文分词测试，你好世界。
         "2 55041 237237 239275 30203 236900 144626 12811 236924"},
        {"\xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD Hello \xF0\x9F\x8C\x8D! "  // 👋🏽 Hello 🌍! 😶‍🌫️
         "\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F",
         "2 242687 242713 26352 236743 244906 236888 236743 247717 237243 248989 238178"},
        {"  two  spaces\tand \xE2\x96\x81 a tab\n", "2 138 13498 138 35220 255968 624 139 236746 6937 107"},
    };
    for (const Case& c : cases) {
        INFO("text: \"" << quill::test::escaped(c.text) << "\"");
        const auto r = quill::test::run_quill({"tokenize", "-m", path->string()}, c.text);
        CHECK(r.status == 0);
        CHECK(r.out == c.ids + "\n");
    }
}

}  // namespace test_gemma4_vocab
