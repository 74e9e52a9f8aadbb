// The fields of an OpenAI request body in batch lines: the penalties (OpenAI's and llama.cpp server's names) and
// logit_bias override the flags per request and give the record the flags give; fields that cannot change a record
// are ignored without a warning; fields that would change it and cannot be honoured give an error record naming them
// (engine/batch/input.h).
#include "tests/support/batch_texts.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <vector>

namespace test_batch_request_fields {

using namespace quill;
using nlohmann::json;

namespace {

const char* const kPrompt = "The little dog";

// The records of one greedy batch over `lines` with extra flags, by id.
std::map<std::string, json> run_lines(const std::string& name, const std::string& lines,
                                      const std::vector<std::string>& flags = {}, int want_status = 0) {
    const auto dir = test::temp_dir(name);
    const std::string in = (dir / "in.jsonl").string();
    std::ofstream(in) << lines;
    std::vector<std::string> args = {"batch", "--raw", "-m", test::tiny_model_file(test::TinyModel::spm).string(),
                                     "-i", in, "--temp", "0", "-n", "24", "-t", "1", "-q"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto run = test::run_quill(args);
    INFO(run.err);
    REQUIRE(run.status == want_status);
    std::map<std::string, json> by_id;
    for (const json& r : test::record_lines(run.out))
        by_id[r.contains("custom_id") ? r["custom_id"] : r["id"]] = r;
    return by_id;
}

std::string line(const json& fields) {
    json j = {{"id", "p"}, {"prompt", kPrompt}};
    j.update(fields);
    return j.dump() + "\n";
}

// The token ids of a record's logprobs.
std::vector<int> token_ids(const json& record) {
    std::vector<int> ids;
    for (const json& t : record.at("logprobs")) ids.push_back(t.at("id").get<int>());
    return ids;
}

}  // namespace

TEST_CASE("per-request penalties give the text the flags give, in JSONL lines and OpenAI bodies", "[batch]") {
    const std::string plain = run_lines("batch-fields-plain", line(json::object()))["p"]["text"];
    const std::string flag = run_lines("batch-fields-rp-flag", line(json::object()),
                                       {"--repeat-penalty", "1.5", "--repeat-last-n", "16"})["p"]["text"];
    const std::string field =
        run_lines("batch-fields-rp", line({{"repeat_penalty", 1.5}, {"repeat_last_n", 16}}))["p"]["text"];
    CHECK(flag != plain);
    CHECK(field == flag);

    const std::string fp_flag = run_lines("batch-fields-fp-flag", line(json::object()),
                                          {"--frequency-penalty", "1", "--presence-penalty", "0.5"})["p"]["text"];
    const json body = {{"prompt", kPrompt}, {"frequency_penalty", 1}, {"presence_penalty", 0.5}, {"max_tokens", 24}};
    const json openai = {{"custom_id", "p"}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", body}};
    const json record = run_lines("batch-fields-fp", openai.dump() + "\n")["p"];
    CHECK(fp_flag != plain);
    CHECK(record["response"]["body"]["choices"][0]["text"] == fp_flag);

    // Out of range: an error record naming the field, as the flag's message names the flag.
    const auto bad = run_lines("batch-fields-rp-bad", line({{"repeat_penalty", 0}}), {}, 3);
    CHECK_THAT(bad.at("p")["error"]["message"].get<std::string>(), Catch::Contains("repeat_penalty 0 is out of range"));
}

TEST_CASE("logit_bias bans a token at -100 and forces one at +100, in OpenAI's and llama.cpp's shapes", "[batch]") {
    const json greedy = run_lines("batch-bias-plain", line({{"logprobs", true}}))["p"];
    const std::vector<int> ids = token_ids(greedy);
    REQUIRE(ids.size() >= 2);
    const int first = ids[0];

    const json banned =
        run_lines("batch-bias-ban", line({{"logprobs", true}, {"logit_bias", {{std::to_string(first), -100}}}}))["p"];
    for (int id : token_ids(banned)) CHECK(id != first);
    CHECK(banned["text"] != greedy["text"]);

    const int other = ids[1] == first ? first + 1 : ids[1];
    const json forced =
        run_lines("batch-bias-force", line({{"logprobs", true}, {"logit_bias", json::array({{other, 100}})}}))["p"];
    for (int id : token_ids(forced)) CHECK(id == other);
    CHECK(token_ids(forced).size() == 24);

    const auto bad = run_lines("batch-bias-bad",
                               line({{"logit_bias", {{"999999", -100}}}}) +
                                   json{{"id", "q"}, {"prompt", kPrompt}, {"logit_bias", {{"x", 1}}}}.dump() + "\n" +
                                   json{{"id", "r"}, {"prompt", kPrompt}, {"logit_bias", {{"5", 101}}}}.dump() + "\n",
                               {}, 3);
    CHECK_THAT(bad.at("p")["error"]["message"].get<std::string>(),
               Catch::Contains("logit_bias: token 999999 is not in the vocabulary"));
    CHECK_THAT(bad.at("q")["error"]["message"].get<std::string>(), Catch::Contains("key \"x\" is not a token id"));
    CHECK_THAT(bad.at("r")["error"]["message"].get<std::string>(), Catch::Contains("bias 101 is out of range"));
}

TEST_CASE("OpenAI fields that cannot change a record are ignored, and those quill cannot honour are error records",
          "[batch]") {
    const std::string plain = run_lines("batch-ignored-plain", line(json::object()))["p"]["text"];
    const std::string lines =
        line({{"stream", true}, {"stream_options", {{"include_usage", true}}}, {"user", "u1"}, {"n", 1},
              {"metadata", {{"k", "v"}}}, {"store", false}, {"service_tier", "auto"}, {"best_of", 1}, {"echo", false},
              {"model", "gpt-x"}}) +
        R"({"id": "n", "prompt": "x", "n": 2})" "\n"
        R"({"id": "best_of", "prompt": "x", "best_of": 3})" "\n"
        R"({"id": "echo", "prompt": "x", "echo": true})" "\n"
        R"({"id": "suffix", "prompt": "x", "suffix": "end"})" "\n"
        R"({"id": "modalities", "prompt": "x", "modalities": ["text", "audio"]})" "\n"
        R"({"id": "audio", "prompt": "x", "audio": {"voice": "alloy"}})" "\n"
        R"({"id": "functions", "prompt": "x", "functions": [{"name": "f"}]})" "\n"
        R"({"id": "web_search_options", "prompt": "x", "web_search_options": {}})" "\n"
        R"({"id": "reasoning_effort", "prompt": "x", "reasoning_effort": "low"})" "\n"
        R"({"id": "parallel_tool_calls", "messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": 0})" "\n";
    const auto dir = test::temp_dir("batch-ignored");
    const std::string in = (dir / "in.jsonl").string();
    std::ofstream(in) << lines;
    const auto run = test::run_quill({"batch", "--raw", "-m", test::tiny_model_file(test::TinyModel::spm).string(),
                                      "-i", in, "--temp", "0", "-n", "24", "-t", "1", "-q"});
    CHECK(run.status == 3);
    CHECK_THAT(run.err, !Catch::Contains("not a request field"));
    std::map<std::string, json> by_id;
    for (const json& r : test::record_lines(run.out)) by_id[r["id"]] = r;
    CHECK(by_id.at("p")["text"] == plain);
    for (const char* field : {"n", "best_of", "echo", "suffix", "modalities", "audio", "functions",
                              "web_search_options", "reasoning_effort", "parallel_tool_calls"}) {
        CAPTURE(field);
        REQUIRE(by_id.at(field).contains("error"));
        CHECK_THAT(by_id.at(field)["error"]["message"].get<std::string>(),
                   Catch::Contains(fmt::format("\"{}\"", field)));
    }
}

TEST_CASE("an OpenAI /v1/completions body's unknown key gets the warning a JSONL line's does", "[batch]") {
    const auto dir = test::temp_dir("batch-body-unknown");
    const std::string in = (dir / "in.jsonl").string();
    std::ofstream(in) << R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "temprature": 0.5, "max_tokens": 2}})"
                         "\n";
    const auto run = test::run_quill({"batch", "-m", test::tiny_model_file(test::TinyModel::spm).string(), "-i", in,
                                      "-t", "1", "-q"});
    CHECK(run.status == 0);
    CHECK_THAT(run.err, Catch::Contains("ignored, not a request field: \"temprature\" (line 1)"));
}

}  // namespace test_batch_request_fields
