// quill batch's engine parts: the input formats and their error entries, the output record shapes, and the scan
// --resume makes of a killed run's output (tests/cli/test_batch_cli.cpp runs the command end to end).
#include "engine/batch/fingerprint.h"
#include "engine/batch/input.h"
#include "engine/batch/records.h"
#include "engine/batch/runner.h"
#include "engine/error.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace test_batch {

using namespace quill;
using namespace quill::batch;
using nlohmann::json;

namespace {

BatchInput parse(const std::string& text) { return parse_batch_input(text); }

}  // namespace

// ---- input ----

TEST_CASE("plain text input: a prompt per line, escapes, blank lines skipped, ids line-<n>", "[batch]") {
    const BatchInput in = parse("Once upon a time\r\n\nA \\\\n is not\\na newline\\tTab\n  \nlast");
    CHECK(in.format == InputFormat::plain);
    REQUIRE(in.entries.size() == 3);
    CHECK(in.entries[0].request.id == "line-1");
    CHECK(*in.entries[0].request.prompt == "Once upon a time");
    CHECK(in.entries[1].request.id == "line-3");
    CHECK(*in.entries[1].request.prompt == "A \\n is not\na newline\tTab");
    CHECK(in.entries[2].request.id == "line-5");
    CHECK(unescape_plain_line("a\\xb\\") == "a\\xb\\");
    CHECK(parse("").entries.empty());
    // A first line that is no JSON object makes the whole input plain text, braces and all.
    CHECK(parse("[1, 2]\n{\"id\": 1}").format == InputFormat::plain);
}

TEST_CASE("JSONL input: fields, overrides and an error entry for every kind of bad line", "[batch]") {
    const std::string text =
        R"({"id": "a", "prompt": "Hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 3, "min_p": 0.1, "seed": 42, "stop": ["x", "y"]})"
        "\n"
        R"({"id": 17, "messages": [{"role": "user", "content": "Hey"}, {"role": "assistant", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]}], "stop": "z"})"
        "\n"
        R"({"prompt": "no id"})"
        "\n{not json\n"
        R"(["an", "array"])"
        "\n"
        R"({"id": "c"})"
        "\n"
        R"({"id": "d", "prompt": "p", "messages": []})"
        "\n"
        R"({"id": "e", "prompt": "p", "max_tokens": -2})"
        "\n"
        R"({"id": "f", "prompt": "p", "temperature": "hot"})"
        "\n"
        R"({"id": "g", "prompt": ""})"
        "\n"
        R"({"id": "h", "prompt": "p", "seed": -1})"
        "\n"
        R"({"id": "i", "prompt": ["p", "q"]})"
        "\n"
        R"({"id": "j", "prompt": "p", "stop": [1]})"
        "\n";
    const BatchInput in = parse(text);
    CHECK(in.format == InputFormat::jsonl);
    REQUIRE(in.entries.size() == 13);
    const BatchRequest& a = in.entries[0].request;
    CHECK_FALSE(in.entries[0].error);
    CHECK(a.id == "a");
    CHECK(*a.prompt == "Hi");
    CHECK(*a.overrides.max_tokens == 7);
    CHECK(*a.overrides.temperature == 0.5f);
    CHECK(*a.overrides.top_p == 0.9f);
    CHECK(*a.overrides.top_k == 3);
    CHECK(*a.overrides.min_p == 0.1f);
    CHECK(*a.overrides.seed == 42);
    CHECK(*a.overrides.stop == std::vector<std::string>{"x", "y"});
    const BatchRequest& b = in.entries[1].request;
    CHECK(b.id == "17");
    REQUIRE(b.messages);
    CHECK(b.messages->size() == 2);
    CHECK((*b.messages)[1]["content"] == "AB");
    CHECK(*b.overrides.stop == std::vector<std::string>{"z"});
    CHECK(in.entries[2].request.id == "line-3");  // no id: the line's
    CHECK_FALSE(in.entries[2].error);
    const std::vector<std::pair<std::string, std::string>> errors = {
        {"line-4", "input line 4: not valid JSON"},
        {"line-5", "not a JSON object"},
        {"c", "no \"prompt\" or \"messages\""},
        {"d", "not both"},
        {"e", "\"max_tokens\" -2 is out of range"},
        {"f", "\"temperature\" must be a number"},
        {"g", "\"prompt\" is empty"},
        {"h", "\"seed\" must be a non-negative integer"},
        {"i", "\"prompt\" must be a string"},
        {"j", "\"stop\" must be a string or an array of strings"},
    };
    for (size_t i = 0; i < errors.size(); ++i) {
        const InputEntry& e = in.entries[3 + i];
        INFO(e.request.id);
        CHECK(e.request.id == errors[i].first);
        REQUIRE(e.error);
        CHECK_THAT(*e.error, Catch::Contains(errors[i].second));
    }
}

TEST_CASE("OpenAI batch input: both endpoints, and error entries for what cannot run", "[batch]") {
    const std::string text =
        R"({"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 9}})"
        "\n"
        R"({"custom_id": "r2", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Once", "max_tokens": 3, "seed": 5}})"
        "\n"
        R"({"custom_id": "r3", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}})"
        "\n"
        R"({"custom_id": "r4", "method": "GET", "url": "/v1/completions", "body": {"prompt": "x"}})"
        "\n"
        R"({"method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}})"
        "\n"
        R"({"custom_id": "r6", "method": "POST", "url": "/v1/completions"})"
        "\n"
        R"({"custom_id": "r7", "method": "POST", "url": "/v1/chat/completions", "body": {"prompt": "x"}})"
        "\n"
        R"({"custom_id": "r8", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "n": 2}})"
        "\n";
    const BatchInput in = parse(text);
    CHECK(in.format == InputFormat::openai);
    REQUIRE(in.entries.size() == 8);
    const BatchRequest& r1 = in.entries[0].request;
    CHECK(r1.endpoint == Endpoint::chat_completions);
    CHECK(r1.model == "m");
    CHECK(*r1.overrides.max_tokens == 9);
    CHECK((*r1.messages)[0]["role"] == "user");
    const BatchRequest& r2 = in.entries[1].request;
    CHECK(r2.endpoint == Endpoint::completions);
    CHECK(*r2.prompt == "Once");
    CHECK(*r2.overrides.seed == 5);
    const std::vector<std::pair<std::string, std::string>> errors = {
        {"r3", "/v1/embeddings\" is not supported"}, {"r4", "\"method\" must be \"POST\""},
        {"line-5", "no \"custom_id\""},             {"r6", "no \"body\" object"},
        {"r7", "needs \"messages\""},               {"r8", "only one choice"},
    };
    for (size_t i = 0; i < errors.size(); ++i) {
        const InputEntry& e = in.entries[2 + i];
        INFO(e.request.id);
        CHECK(e.request.id == errors[i].first);
        REQUIRE(e.error);
        CHECK_THAT(*e.error, Catch::Contains(errors[i].second));
    }
}

TEST_CASE("the requests a run would take through the model: its shard, less the done ids and the error entries",
          "[batch]") {
    const BatchInput in = parse("{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"b\", \"prompt\": \"x\"}\n"
                                "not json\n{\"id\": \"d\", \"prompt\": \"x\"}\n{\"id\": \"e\", \"prompt\": \"x\"}\n");
    REQUIRE(in.entries.size() == 5);
    CHECK(runnable_requests(in, Shard{}, {}) == 4);
    CHECK(runnable_requests(in, Shard{}, {"a", "e", "zzz"}) == 2);
    CHECK(runnable_requests(in, Shard{1, 2}, {}) == 2);  // a and e (line 3, index 2, is the error)
    CHECK(runnable_requests(in, Shard{2, 2}, {}) == 2);  // b, d
    CHECK(runnable_requests(in, Shard{2, 2}, {"b", "d"}) == 0);
    CHECK(runnable_requests(parse(""), Shard{}, {}) == 0);
}

TEST_CASE("the context a batch needs: the most prompt tokens plus max_tokens of a request it runs", "[batch]") {
    // A prompt of n characters encodes to n tokens here; "bad" cannot be encoded (an error record later).
    int encoded = 0;
    const PromptEncoder encode = [&](const BatchRequest& r) {
        ++encoded;
        if (*r.prompt == "bad") throw UsageError("no chat template");
        return std::vector<int32_t>(r.prompt->size(), 1);
    };
    RunnerOptions o;
    o.defaults.max_tokens = 10;
    const BatchInput in = parse(R"({"id": "a", "prompt": "12345"})"
                                "\n"
                                R"({"id": "b", "prompt": "123", "max_tokens": 40})"
                                "\n"
                                R"({"id": "c", "prompt": "1234567890123456789012345"})"
                                "\n"
                                R"({"id": "d", "prompt": "bad", "max_tokens": 100})"
                                "\n"
                                R"({"id": "e", "prompt": "1", "temperature": -1, "max_tokens": 500})"
                                "\nnot json\n");
    CHECK(context_needed(in, Shard{}, {}, encode, o) == 43);       // b: 3 + 40 (c: 25 + 10; d, e and line 6 fail)
    CHECK(context_needed(in, Shard{}, {"b"}, encode, o) == 35);    // c
    CHECK(context_needed(in, Shard{1, 2}, {}, encode, o) == 35);   // a, c (and e)
    CHECK(context_needed(in, Shard{1, 2}, {"c"}, encode, o) == 15);
    CHECK(context_needed(in, Shard{}, {"a", "b", "c", "d", "e"}, encode, o) == 0);  // nothing runs
    // One request that may run until the context is full: the model's context, and nothing encoded.
    encoded = 0;
    o.defaults.max_tokens = -1;
    CHECK(context_needed(in, Shard{}, {}, encode, o) == 0);
    CHECK(encoded == 0);
    CHECK(context_needed(in, Shard{}, {"a", "c"}, encode, o) == 43);  // b; not d (3 + 100: it cannot be encoded)
}

TEST_CASE("duplicate ids stop the batch before anything runs, naming the id and its lines", "[batch]") {
    CHECK_THROWS_WITH(parse("{\"id\": \"x\", \"prompt\": \"a\"}\n{\"id\": \"y\", \"prompt\": \"b\"}\n"
                            "{\"id\": \"x\", \"prompt\": \"c\"}"),
                      Catch::Contains("id \"x\" twice (lines 1 and 3)"));
    CHECK_THROWS_AS(parse("{\"id\": \"line-2\", \"prompt\": \"a\"}\n{oops"), UsageError);
}

TEST_CASE("the shard option K/N is parsed strictly", "[batch]") {
    CHECK(parse_shard("2/3").k == 2);
    CHECK(parse_shard("2/3").n == 3);
    for (const char* bad : {"4/3", "0/3", "-1/3", "1", "1/0", "a/b", "1/3x", "/3", ""})
        CHECK_THROWS_WITH(parse_shard(bad), Catch::Contains("expected K/N"));
}

// ---- records and resume ----

TEST_CASE("records have the plain and the OpenAI batch output shapes", "[batch]") {
    BatchRequest r;
    r.id = "q1";
    const Completion c{"Hello", FinishReason::length, 5, 2, 3, 42};
    RecordContext ctx{InputFormat::jsonl, "llama", 1700000000, "quill1-fp"};
    json plain = json::parse(R"({"id":"q1","text":"Hello","finish_reason":"length","usage":{"prompt_tokens":5,"completion_tokens":2},"seed":42,"model":"llama","system_fingerprint":"quill1-fp"})");
    plain["request_hash"] = request_hash(r);
    CHECK(json::parse(result_record(ctx, r, 3, c)) == plain);
    CHECK(json::parse(error_record(ctx, r, 3, "bad")) == json::parse(R"({"id":"q1","error":{"message":"bad"}})"));
    ctx.format = InputFormat::openai;
    r.endpoint = Endpoint::chat_completions;
    const json chat = json::parse(result_record(ctx, r, 3, c));
    CHECK(chat["custom_id"] == "q1");
    CHECK(chat["error"].is_null());
    CHECK(chat["response"]["status_code"] == 200);
    const json& body = chat["response"]["body"];
    CHECK(body["object"] == "chat.completion");
    CHECK(body["model"] == "llama");
    CHECK(body["created"] == 1700000000);
    CHECK(body["system_fingerprint"] == "quill1-fp");
    CHECK(body["request_hash"] == request_hash(r));
    CHECK(body["choices"][0]["message"] == json::parse(R"({"role":"assistant","content":"Hello"})"));
    CHECK(body["choices"][0]["finish_reason"] == "length");
    CHECK(body["usage"] ==
          json::parse(R"({"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":3}})"));
    r.endpoint = Endpoint::completions;
    r.model = "asked";
    const json text = json::parse(result_record(ctx, r, 4, c));
    CHECK(text["response"]["body"]["object"] == "text_completion");
    CHECK(text["response"]["body"]["model"] == "asked");
    CHECK(text["response"]["body"]["system_fingerprint"] == "quill1-fp");
    CHECK(text["response"]["body"]["choices"][0]["text"] == "Hello");
    const json err = json::parse(error_record(ctx, r, 4, "too long"));
    CHECK(err["response"]["status_code"] == 400);
    CHECK(err["response"]["body"]["error"]["message"] == "too long");
}

TEST_CASE("the resume scan collects ids and drops only a torn last line", "[batch]") {
    const std::string good = "{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"b\",\"error\":{\"message\":\"m\"}}\n";
    ResumeScan s = scan_output(good, "out");
    CHECK(s.done == std::unordered_set<std::string>{"a", "b"});
    CHECK(s.intact_bytes == good.size());
    CHECK_FALSE(s.torn);
    s = scan_output(good + "{\"id\":\"c\",\"te", "out");
    CHECK(s.torn);
    CHECK(s.intact_bytes == good.size());
    CHECK(s.done.size() == 2);
    s = scan_output(good + "{\"id\":\"c\"}", "out");  // complete JSON without its newline: still torn
    CHECK(s.torn);
    CHECK(s.done.size() == 2);
    s = scan_output("{\"id\":\"x\",\"custom_id\":\"r1\",\"response\":null}\n", "out");
    CHECK(s.done == std::unordered_set<std::string>{"r1"});
    CHECK_THROWS_WITH(scan_output("{\"id\":\"a\"}\ngarbage\n{\"id\":\"b\"}\n", "out.jsonl"),
                      Catch::Contains("out.jsonl: line 2 is not a batch record"));

    auto dir = test::temp_dir("batch-resume-scan");
    const auto path = (dir / "out.jsonl").string();
    std::ofstream(path, std::ios::binary) << good << "{\"id\":\"c\",";
    s = prepare_resume(path);
    CHECK(s.torn);
    CHECK(test::read_file(path) == good);  // the torn line is cut off the file
    CHECK(prepare_resume((dir / "absent.jsonl").string()).done.empty());
}

}  // namespace test_batch
