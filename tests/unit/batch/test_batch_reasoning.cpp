// A reasoning model's thinking in batch records: "reasoning_content" beside "text" in quill's records and beside
// "content" in a chat.completion body's message, out of the answer; none where there is none, nor for
// /v1/completions; harmony's analysis taken out with its call still found.
#include "engine/batch/input.h"
#include "engine/batch/records.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace test_batch_reasoning {

using namespace quill;
using namespace quill::batch;

namespace {

BatchRequest request(const std::string& line) { return parse_batch_input(line + "\n", FormatHint::jsonl).entries[0].request; }

Completion answer(std::string text) {
    Completion c;
    c.text = std::move(text);
    c.finish_reason = FinishReason::stop;
    c.seed = 5;
    return c;
}

}  // namespace

TEST_CASE("batch records give a <think> block as reasoning_content and the answer without it", "[batch]") {
    const BatchRequest r = request(R"({"id": "q", "messages": [{"role": "user", "content": "2+2?"}]})");
    Completion c = answer("<think>\nAdd them.\n</think>\n\nFour.");
    take_reasoning(c, r, chat::ReasoningSyntax::think, false);
    const auto record = nlohmann::json::parse(result_record(RecordContext{InputFormat::jsonl, "m", 0}, r, 0, c));
    CHECK(record["text"] == "Four.");
    CHECK(record["reasoning_content"] == "Add them.");

    BatchRequest chat = r;
    chat.endpoint = Endpoint::chat_completions;
    const auto openai = nlohmann::json::parse(result_record(RecordContext{InputFormat::openai, "m", 0}, chat, 1, c));
    const auto& message = openai["response"]["body"]["choices"][0]["message"];
    CHECK(message["content"] == "Four.");
    CHECK(message["reasoning_content"] == "Add them.");

    // The prompt opened the block (DeepSeek-R1): the answer starts inside it.
    Completion opened = answer("Add them.\n</think>\n\nFour.");
    take_reasoning(opened, r, chat::ReasoningSyntax::think, true);
    CHECK(opened.text == "Four.");
    CHECK(opened.reasoning == "Add them.");
}

TEST_CASE("batch records have no reasoning_content without reasoning, nor for /v1/completions", "[batch]") {
    const BatchRequest r = request(R"({"id": "q", "prompt": "Hi"})");
    Completion plain = answer("Hello <think> there");
    take_reasoning(plain, r, chat::ReasoningSyntax::think, false);
    const auto record = nlohmann::json::parse(result_record(RecordContext{InputFormat::jsonl, "m", 0}, r, 0, plain));
    CHECK(record["text"] == "Hello <think> there");
    CHECK_FALSE(record.contains("reasoning_content"));

    BatchRequest completion = r;
    completion.endpoint = Endpoint::completions;
    Completion raw = answer("<think>a</think>b");
    take_reasoning(raw, completion, chat::ReasoningSyntax::think, false);
    const auto body = nlohmann::json::parse(result_record(RecordContext{InputFormat::openai, "m", 0}, completion, 0,
                                                          raw))["response"]["body"];
    CHECK(body["choices"][0]["text"] == "<think>a</think>b");
    CHECK_FALSE(body["choices"][0].contains("reasoning_content"));
}

TEST_CASE("a harmony answer's analysis is reasoning_content and its call still a tool call", "[batch][tools]") {
    BatchRequest r = request(
        R"({"id": "w", "messages": [{"role": "user", "content": "Weather?"}], "tools": [{"type": "function", "function": {"name": "get_weather"}}]})");
    r.endpoint = Endpoint::chat_completions;
    Completion c = answer(
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>");
    take_reasoning(c, r, chat::ReasoningSyntax::harmony, false);
    take_tool_calls(c, r, chat::ToolCallSyntax::harmony);
    const auto openai = nlohmann::json::parse(result_record(RecordContext{InputFormat::openai, "m", 0}, r, 2, c));
    const auto& choice = openai["response"]["body"]["choices"][0];
    CHECK(choice["finish_reason"] == "tool_calls");
    CHECK(choice["message"]["content"].is_null());
    CHECK(choice["message"]["reasoning_content"] == "Need the weather.");
    REQUIRE(choice["message"]["tool_calls"].size() == 1);
    CHECK(choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather");
}

}  // namespace test_batch_reasoning
