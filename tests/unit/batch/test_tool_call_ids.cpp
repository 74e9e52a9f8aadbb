// A batch record's tool calls carry ids that the model's own chat template takes back: a client that sends the
// record's calls and their results through the same template (as the next turn of the conversation) is not refused.
// Mistral's templates refuse any id but 9 letters and digits; batch draws its ids by chat's rule (one function).
#include "engine/batch/input.h"
#include "engine/batch/records.h"
#include "engine/chat/chat_format.h"
#include "engine/chat/tool_calls.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace test_tool_call_ids {

using namespace quill;
using namespace quill::batch;

namespace {

constexpr const char* kLine =
    R"({"id": "w", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [{"type": "function", )"
    R"("function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": )"
    R"("string"}}, "required": ["city"]}}}]})";

chat::ChatFormat mistral_small() {
    return chat::ChatFormat::from_source(test::read_file(std::filesystem::path(QUILL_SOURCE_DIR) /
                                                         "tests/data/templates/src" /
                                                         "Mistral-Small-3.2-24B-Instruct-2506.jinja"),
                                         "mistral", "<s>", "</s>");
}

// The record of a request whose answer is `answer`, with its calls taken out in `syntax`.
nlohmann::ordered_json record_of(const BatchRequest& r, const std::string& answer, chat::ToolCallSyntax syntax) {
    Completion c;
    c.text = answer;
    c.finish_reason = FinishReason::stop;
    c.seed = 1234;
    take_tool_calls(c, r, syntax);
    return nlohmann::ordered_json::parse(result_record(RecordContext{InputFormat::jsonl, "m", 0}, r, 0, c));
}

}  // namespace

TEST_CASE("a batch record's Mistral tool call goes back through the Mistral Small 3.2 template", "[batch][tools]") {
    const BatchInput input = parse_batch_input(std::string(kLine) + "\n", FormatHint::jsonl);
    REQUIRE(!input.entries[0].error);
    const BatchRequest& r = input.entries[0].request;
    const auto record =
        record_of(r, R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})", chat::ToolCallSyntax::mistral);
    REQUIRE(record["tool_calls"].size() == 1);
    const std::string id = record["tool_calls"][0]["id"];
    CHECK(id.size() == 9);
    CHECK(std::all_of(id.begin(), id.end(), [](unsigned char ch) { return std::isalnum(ch) != 0; }));
    // The same id chat keeps in its history for the same seed: one rule.
    CHECK(chat::history_tool_calls({{"get_weather", R"({"city":"Paris"})"}}, chat::ToolCallSyntax::mistral,
                                   1234)[0]["id"] == id);

    // The client's next request: the record's calls as the assistant's message, then the call's result.
    nlohmann::ordered_json messages = *r.messages;
    messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", record["tool_calls"]}});
    messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", "sunny, 21 C"}});
    const std::string text = mistral_small().render(messages, true, nullptr, r.template_vars).text;
    CHECK(text.find("[TOOL_CALLS]get_weather[CALL_ID]" + id + "[ARGS]") != std::string::npos);
    CHECK(text.find("[TOOL_RESULTS]" + id + "[TOOL_CONTENT]sunny, 21 C[/TOOL_RESULTS]") != std::string::npos);

    // Other syntaxes keep OpenAI's form of id.
    const auto hermes = record_of(r, R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>)",
                                  chat::ToolCallSyntax::hermes);
    REQUIRE(hermes["tool_calls"].size() == 1);
    CHECK(hermes["tool_calls"][0]["id"].get<std::string>().starts_with("call_"));
}

}  // namespace test_tool_call_ids
