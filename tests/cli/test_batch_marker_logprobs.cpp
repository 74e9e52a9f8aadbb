// `quill batch --logprobs` end to end: a chat format's marker that the vocabulary makes a control token
// ([TOOL_CALLS] with Mistral's template) has its text in a record's logprobs entries, as the answer prints it. The
// tiny model is made to say that marker at every step: every token embeds alike, the layers add nothing, and only
// the marker's output row is not zero.
#include "engine/format/gguf.h"
#include "tests/support/fault_util.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace test_batch_marker_logprobs {

using namespace quill;

namespace {

void fill_floats(std::vector<uint8_t>& bytes, size_t first, size_t count, float value) {
    for (size_t i = first; i < first + count; ++i) std::memcpy(bytes.data() + i * sizeof(float), &value, sizeof value);
}

// A tiny model with Mistral's markers as control tokens whose greedy answer is [TOOL_CALLS] at every step.
std::string marker_model(const std::filesystem::path& dir) {
    test::TinySpec spec;
    spec.vocab = "bpe-chatml";
    spec.control_tokens = {"[TOOL_CALLS]", "[ARGS]"};
    const std::vector<uint8_t> image = test::make_tiny_gguf(spec);
    const std::string random = (dir / "random.gguf").string(), out = (dir / "marker.gguf").string();
    std::ofstream(random, std::ios::binary).write(reinterpret_cast<const char*>(image.data()),
                                                  static_cast<std::streamsize>(image.size()));
    const GgufFile file = GgufFile::open(random);
    const auto tok = Tokenizer::from_gguf(file);
    int32_t marker = -1;
    for (int32_t id = 0; id < tok->n_vocab(); ++id)
        if (tok->piece(id) == "[TOOL_CALLS]") marker = id;
    REQUIRE(marker >= 0);
    const auto n_embd = static_cast<size_t>(spec.n_embd);
    test::rewrite_gguf(random, out, {}, [&](const std::string& name, std::vector<uint8_t>& bytes) {
        const size_t n = bytes.size() / sizeof(float);
        if (name == "token_embd.weight") {
            fill_floats(bytes, 0, n, 1.0f);  // the final state is the embedding: all ones, whatever the token
        } else if (name.ends_with("attn_output.weight") || name.ends_with("ffn_down.weight")) {
            fill_floats(bytes, 0, n, 0.0f);
        } else if (name == "output.weight") {
            fill_floats(bytes, 0, n, 0.0f);
            fill_floats(bytes, static_cast<size_t>(marker) * n_embd, n_embd, 1.0f);  // logit > 0; every other 0
        }
    });
    return out;
}

}  // namespace

TEST_CASE("batch --logprobs: a record's entries for a marker control token carry the marker's text", "[batch][cli]") {
    const auto dir = test::temp_dir("batch_marker_logprobs");
    const std::string model = marker_model(dir);
    const std::string mistral = (std::filesystem::path(QUILL_SOURCE_DIR) / "tests/data/templates/src" /
                                 "Mistral-Small-3.2-24B-Instruct-2506.jinja")
                                    .string();
    // A system message of its own, in place of the template's long default one.
    const std::string line =
        R"({"id": "a", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})";
    auto r = test::run_quill({"batch", "-m", model, "--chat-template", mistral, "--logprobs", "2", "-n", "3",
                              "--temp", "0", "-q"},
                             line + "\n");
    INFO(r.err);
    INFO(r.out);
    REQUIRE(r.status == 0);
    const auto record = nlohmann::json::parse(r.out);
    const auto& content = record["logprobs"];
    REQUIRE(content.size() == 3);
    for (const auto& e : content) {
        CHECK(e["token"] == "[TOOL_CALLS]");
        CHECK(e["bytes"].size() == 12);
        REQUIRE(!e["top_logprobs"].empty());
        CHECK(e["top_logprobs"][0]["token"] == "[TOOL_CALLS]");
    }
    // Without Mistral's template the marker is no chat format's: its entries have a control token's empty text.
    r = test::run_quill({"batch", "-m", model, "--logprobs", "0", "-n", "2", "--temp", "0", "-q"}, line + "\n");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto plain = nlohmann::json::parse(r.out);
    REQUIRE(plain["logprobs"].size() == 2);
    CHECK(plain["logprobs"][0]["token"] == "");
    std::filesystem::remove_all(dir);
}

}  // namespace test_batch_marker_logprobs
