// gpt-oss's harmony markers in a vocabulary (as llama.cpp reads o200k_harmony): <|channel|>, <|message|>, <|start|>
// and <|constrain|> print their text, and <|end|> ends a message, not generation, where <|return|> and <|call|> end
// it; elsewhere (Phi-3's <|end|>) nothing changes.
#include "tests/support/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace test_harmony_vocab {

namespace {

quill::test::TinyVocab with_controls(const std::vector<std::string>& texts) {
    quill::test::TinyVocab v = quill::test::tiny_bpe_vocab();
    for (const std::string& t : texts) {
        v.pieces.push_back(t);
        v.types.push_back(3);  // control
    }
    return v;
}

}  // namespace

TEST_CASE("a harmony vocabulary prints its message markers and does not stop at <|end|>", "[tokenizer]") {
    const auto v = with_controls({"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
                                  "<|constrain|>"});
    const auto tok = quill::test::make_tokenizer(v);
    for (const char* marker : {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"}) {
        INFO(marker);
        CHECK(tok->token_bytes(v.id(marker)) == marker);
    }
    CHECK_FALSE(tok->is_eog(v.id("<|end|>")));
    CHECK(tok->is_eog(v.id("<|return|>")));
    CHECK(tok->is_eog(v.id("<|call|>")));
    CHECK(tok->token_bytes(v.id("<|return|>")).empty());
    // An answer's channels come out as text, as the reasoning splitter reads them.
    std::vector<int32_t> ids{v.id("<|channel|>")};
    for (int32_t id : tok->encode("analysis", false, false)) ids.push_back(id);
    ids.push_back(v.id("<|message|>"));
    CHECK(quill::decode(*tok, ids) == "<|channel|>analysis<|message|>");
    // The rendered prompt's markers are still one token each.
    CHECK(tok->encode("<|start|>assistant<|channel|>final<|message|>", false, true).front() == v.id("<|start|>"));
}

TEST_CASE("<|end|> stays an end of generation without <|return|> and <|call|> (Phi-3)", "[tokenizer]") {
    const auto v = with_controls({"<|end|>", "<|user|>"});
    const auto tok = quill::test::make_tokenizer(v);
    CHECK(tok->is_eog(v.id("<|end|>")));
    CHECK(tok->token_bytes(v.id("<|end|>")).empty());
}

}  // namespace test_harmony_vocab
