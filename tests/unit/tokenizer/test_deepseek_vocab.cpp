// DeepSeek-R1-Distill-Qwen-7B's vocabulary (models/deepseek-r1-qwen.vocab.gguf, written by models/fetch_vocab.sh from
// the header of the model's GGUF): its tokenizer against llama.cpp's llama-tokenize (tests/data/vocab/
// deepseek-r1-qwen.inp/.out, made by make_vectors.py there), and its chat template against Python's Jinja2
// (deepseek-r1-qwen.chat.txt, rendered by render_template.py there) with the ids llama-tokenize gives that text.
#include <catch2/catch.hpp>

#include "engine/format/gguf.h"
#include "tests/support/test_util.h"
#include "tests/unit/tokenizer/vocab_vectors.h"
#include "tokenizer/tokenizer.h"

#include <sstream>

namespace test_deepseek_vocab {

using quill::Tokenizer;

TEST_CASE("tokenizer vectors of DeepSeek-R1-Distill-Qwen-7B (deepseek-r1-qwen)", "[tokenizer]") {
    // llama.cpp's 46 test strings and 18 hard cases (déjà-vu, "\n\tcode", CJK, emoji, digits, whitespace runs,
    // <think>, a user-defined token and so split out of plain text too, and role markers typed as text).
    quill::test::check_fetched_vocab("deepseek-r1-qwen.vocab.gguf", "deepseek-r1-qwen");
}

TEST_CASE("DeepSeek-R1-Distill-Qwen-7B's vocabulary: special ids and end of generation", "[tokenizer]") {
    const auto path = quill::test::fetched_vocab("deepseek-r1-qwen.vocab.gguf");
    if (!path) return;
    const auto tok = Tokenizer::from_gguf(quill::GgufFile::open(path->string()));
    CHECK(tok->n_vocab() == 152064);
    CHECK(tok->pre_name() == "deepseek-r1-qwen");
    CHECK(tok->bos() == 151646);
    CHECK(tok->add_bos());
    CHECK(tok->is_eog(151643));
    CHECK(tok->encode("d\xC3\xA9j\xC3\xA0-vu", true, false) == std::vector<int32_t>{151646, 128505, 43324, 8273, 84});
}

TEST_CASE("quill template renders DeepSeek-R1-Distill-Qwen-7B's chat template as Jinja2 does", "[tokenizer]") {
    const auto path = quill::test::fetched_vocab("deepseek-r1-qwen.vocab.gguf");
    if (!path) return;
    const std::string messages = quill::test::read_file(quill::test::vocab_data("deepseek-r1-qwen.chat.json"));
    const std::string expected = quill::test::read_file(quill::test::vocab_data("deepseek-r1-qwen.chat.txt"));
    std::vector<int32_t> expected_ids;
    std::istringstream ids(quill::test::read_file(quill::test::vocab_data("deepseek-r1-qwen.chat.ids")));
    for (int32_t id; ids >> id;) expected_ids.push_back(id);

    const auto text = quill::test::run_quill({"template", "-m", path->string(), "--messages", "-"}, messages);
    REQUIRE(text.status == 0);
    CHECK(text.out == expected);  // the system message first, the earlier reply without its <think> part

    // With --tokens, a line of ids after the text: the template's special tokens parsed, BOS once.
    const auto tokens =
        quill::test::run_quill({"template", "-m", path->string(), "--messages", "-", "--tokens"}, messages);
    REQUIRE(tokens.status == 0);
    REQUIRE(tokens.out.starts_with(expected + "\n"));
    std::vector<int32_t> got;
    std::istringstream line(tokens.out.substr(expected.size() + 1));
    for (int32_t id; line >> id;) got.push_back(id);
    CHECK(got == expected_ids);
}

}  // namespace test_deepseek_vocab
