// Log-probabilities of a chat format's markers that the vocabulary makes control tokens ([TOOL_CALLS], <think>, ...):
// in the shapes of run --json and batch records they have the text the answer printed for them, while other control
// tokens keep their empty text.
#include "engine/runtime/logprobs_json.h"
#include "tests/support/tiny_vocab.h"

#include <catch2/catch.hpp>

namespace test_marker_logprobs {

using namespace quill;

TEST_CASE("logprobs of shown control tokens give their text in every shape", "[runtime][tools]") {
    test::TinyVocab vocab = test::tiny_bpe_vocab();
    vocab.pieces.push_back("[TOOL_CALLS]");
    vocab.types.push_back(3);  // control
    const auto tok = test::make_tokenizer(vocab);
    const int32_t marker = vocab.id("[TOOL_CALLS]"), end = vocab.id("<|im_end|>");
    const std::vector<int32_t> shown = {marker};
    const std::vector<TokenLogprobs> lps = {{marker, -0.5, {{marker, -0.5}, {end, -1.5}}}};

    const auto content = logprobs_content(*tok, lps, true, shown);
    CHECK(content[0]["token"] == "[TOOL_CALLS]");
    CHECK(content[0]["bytes"].size() == 12);
    CHECK(content[0]["top_logprobs"][0]["token"] == "[TOOL_CALLS]");
    CHECK(content[0]["top_logprobs"][1]["token"] == "");  // not a marker: a control token's empty text
    const auto legacy = completion_logprobs(*tok, lps, shown);
    CHECK(legacy["tokens"][0] == "[TOOL_CALLS]");
    CHECK(legacy["top_logprobs"][0].contains("[TOOL_CALLS]"));
    // Without the markers, as before: the control token prints nothing.
    CHECK(logprobs_content(*tok, lps, true)[0]["token"] == "");
}

}  // namespace test_marker_logprobs
