// quill batch with tools: a line's tools and template options reach real tool-calling templates as Jinja2 renders
// the same request (the corpus's golden files) and as `quill template --messages` reads it; malformed ones are
// error entries; the answer's tool calls become OpenAI tool_calls in the records.
#include "engine/batch/input.h"
#include "engine/batch/records.h"
#include "engine/chat/chat_format.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>

namespace test_batch_tools {

using namespace quill;
using namespace quill::batch;
using ojson = nlohmann::ordered_json;

namespace {

const std::filesystem::path kTemplates = std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates";

ojson corpus_case(const std::string& name) {
    return ojson::parse(test::read_file(kTemplates / "cases.json"))["cases"][name];
}

chat::ChatFormat corpus_format(const std::string& name) {
    return chat::ChatFormat::from_source(test::read_file(kTemplates / "src" / (name + ".jinja")), name, "<s>", "</s>");
}

// The text batch's encoder renders for an entry (batch_command.cpp's call, with the generation prompt).
std::string batch_rendering(const chat::ChatFormat& f, const BatchRequest& r) {
    REQUIRE(r.messages);
    return f.render(*r.messages, true, nullptr, r.template_vars).text;
}

}  // namespace

TEST_CASE("a batch line's tools reach real templates as Jinja2 and quill template render the request",
          "[batch][tools]") {
    for (const char* name : {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Qwen-Qwen3-0.6B"}) {
        CAPTURE(name);
        const auto f = corpus_format(name);
        ojson request = corpus_case("tools");
        REQUIRE(request["add_generation_prompt"] == true);
        const std::string golden = test::read_file(kTemplates / "golden" / name / "tools.txt");
        // JSONL: the request with an id and sampling fields beside it
        ojson line = {{"id", "w1"}, {"max_tokens", 5}};
        line.update(request);
        line["tool_choice"] = "auto";
        // OpenAI batch: the request as the body
        const ojson openai = {{"custom_id", "w2"}, {"method", "POST"}, {"url", "/v1/chat/completions"}, {"body", request}};
        const BatchInput jsonl = parse_batch_input(line.dump() + "\n", FormatHint::jsonl);
        const BatchInput batch = parse_batch_input(openai.dump() + "\n", FormatHint::openai);
        REQUIRE(!jsonl.entries[0].error);
        REQUIRE(!batch.entries[0].error);
        CHECK(batch_rendering(f, jsonl.entries[0].request) == golden);
        CHECK(batch_rendering(f, batch.entries[0].request) == golden);
        // `quill template --messages LINE` reads the same request
        const chat::ChatRequest as_template = chat::parse_chat_request(line.dump(), "line.json");
        CHECK(batch_rendering(f, jsonl.entries[0].request) ==
              f.render(as_template.messages, true, nullptr, as_template.vars).text);
        CHECK(jsonl.entries[0].request.overrides.max_tokens == 5);
        // Without its tools the prompt is another (the line's tools are what makes it equal).
        line.erase("tools");
        CHECK(batch_rendering(f, parse_batch_input(line.dump() + "\n", FormatHint::jsonl).entries[0].request) != golden);
    }
}

TEST_CASE("a batch line's chat_template_kwargs are template options, as enable_thinking beside messages",
          "[batch][tools]") {
    const auto f = corpus_format("Qwen-Qwen3-0.6B");
    ojson request = corpus_case("options");
    const std::string golden = test::read_file(kTemplates / "golden" / "Qwen-Qwen3-0.6B" / "options.txt");
    REQUIRE(request["enable_thinking"] == false);
    request.erase("enable_thinking");
    request["chat_template_kwargs"] = {{"enable_thinking", false}};
    const BatchInput in = parse_batch_input(request.dump() + "\n", FormatHint::jsonl);
    REQUIRE(!in.entries[0].error);
    CHECK(batch_rendering(f, in.entries[0].request) == golden);
    request["chat_template_kwargs"] = {{"enable_thinking", true}};
    CHECK(batch_rendering(f, parse_batch_input(request.dump() + "\n", FormatHint::jsonl).entries[0].request) != golden);
}

TEST_CASE("malformed tools make one error entry and the other lines go on", "[batch][tools]") {
    const std::string m = R"("messages": [{"role": "user", "content": "Hi"}])";
    const std::string text = "{\"id\": \"ok\", " + m + ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}\n" +
                             "{\"id\": \"a\", " + m + ", \"tools\": {\"name\": \"f\"}}\n" +
                             "{\"id\": \"b\", " + m + ", \"tools\": [{\"type\": \"function\", \"function\": {}}]}\n" +
                             "{\"id\": \"c\", " + m + ", \"tool_choice\": \"sometimes\"}\n" +
                             "{\"id\": \"d\", \"prompt\": \"Hi\", \"tools\": []}\n" +
                             "{\"id\": \"e\", " + m + ", \"chat_template_kwargs\": \"x\"}\n" +
                             "{\"id\": \"f\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}\n";
    const BatchInput in = parse_batch_input(text, FormatHint::jsonl);
    REQUIRE(in.entries.size() == 7);
    CHECK(!in.entries[0].error);
    const std::vector<std::pair<std::string, std::string>> errors = {
        {"a", "input line 2: \"tools\" must be a JSON array of tool definitions"},
        {"b", "input line 3: tool 1 is not {\"type\": \"function\", \"function\": {\"name\": ...}}"},
        {"c", "input line 4: \"tool_choice\" must be"},
        {"d", "input line 5: \"tools\" needs \"messages\", not a \"prompt\""},
        {"e", "input line 6: \"chat_template_kwargs\" must be a JSON object"},
        {"f", "input line 7: message 1: content parts must be"},
    };
    for (size_t i = 0; i < errors.size(); ++i) {
        const InputEntry& e = in.entries[1 + i];
        CAPTURE(e.request.id);
        CHECK(e.request.id == errors[i].first);
        REQUIRE(e.error);
        CHECK_THAT(*e.error, Catch::StartsWith(errors[i].second));
    }
}

TEST_CASE("the answer's tool calls become OpenAI tool_calls in both record shapes", "[batch][tools]") {
    const std::string line =
        R"({"id": "w", "messages": [{"role": "user", "content": "Weather?"}], "tools": [{"type": "function", "function": {"name": "get_weather"}}]})";
    const BatchRequest r = parse_batch_input(line + "\n", FormatHint::jsonl).entries[0].request;
    Completion c;
    c.text = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    c.finish_reason = FinishReason::stop;
    c.seed = 7;
    take_tool_calls(c, r, chat::ToolCallSyntax::hermes);
    CHECK(c.text == "Checking.");
    REQUIRE(c.tool_calls.size() == 1);
    const auto record = nlohmann::json::parse(result_record(RecordContext{InputFormat::jsonl, "m", 0}, r, 0, c));
    CHECK(record["text"] == "Checking.");
    CHECK(record["finish_reason"] == "tool_calls");
    CHECK(record["tool_calls"][0]["type"] == "function");
    CHECK(record["tool_calls"][0]["function"]["name"] == "get_weather");
    CHECK(record["tool_calls"][0]["function"]["arguments"] == R"({"city":"Paris"})");
    CHECK(std::string(record["tool_calls"][0]["id"]).starts_with("call_"));

    BatchRequest chat_request = r;
    chat_request.endpoint = Endpoint::chat_completions;
    c.text.clear();
    const auto openai =
        nlohmann::json::parse(result_record(RecordContext{InputFormat::openai, "m", 0}, chat_request, 3, c));
    const auto& choice = openai["response"]["body"]["choices"][0];
    CHECK(choice["finish_reason"] == "tool_calls");
    CHECK(choice["message"]["content"].is_null());
    CHECK(choice["message"]["tool_calls"] == record["tool_calls"]);

    // A request without tools, or with tool_choice "none", keeps the text; so does a malformed call.
    Completion plain;
    plain.text = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>";
    const BatchRequest no_tools =
        parse_batch_input(R"({"messages": [{"role": "user", "content": "Hi"}]})" "\n", FormatHint::jsonl).entries[0].request;
    take_tool_calls(plain, no_tools, chat::ToolCallSyntax::hermes);
    CHECK(plain.tool_calls.is_null());
    Completion broken;
    broken.text = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {</tool_call>";
    take_tool_calls(broken, r, chat::ToolCallSyntax::hermes);
    CHECK(broken.tool_calls.is_null());
    const auto kept = nlohmann::json::parse(result_record(RecordContext{InputFormat::jsonl, "m", 0}, r, 0, broken));
    CHECK(kept["text"] == broken.text);
    CHECK(!kept.contains("tool_calls"));
}

TEST_CASE("parallel_tool_calls false keeps the first of an answer's calls", "[batch][tools]") {
    const std::string tools = R"("tools": [{"type": "function", "function": {"name": "get_weather"}}])";
    const std::string two = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
    for (const char* parallel : {"", ", \"parallel_tool_calls\": true", ", \"parallel_tool_calls\": false"}) {
        CAPTURE(parallel);
        const std::string line =
            std::string(R"({"messages": [{"role": "user", "content": "Weather?"}], )") + tools + parallel + "}\n";
        const BatchRequest r = parse_batch_input(line, FormatHint::jsonl).entries[0].request;
        Completion c;
        c.text = two;
        take_tool_calls(c, r, chat::ToolCallSyntax::hermes);
        const bool one = std::string_view(parallel).ends_with("false");
        REQUIRE(c.tool_calls.size() == (one ? 1u : 2u));
        CHECK(c.tool_calls[0]["function"]["arguments"] == R"({"city":"Paris"})");
    }
}

}  // namespace test_batch_tools
