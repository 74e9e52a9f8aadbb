// Tool calls out of a model's answer (engine/chat/tool_calls.h): Hermes/Qwen <tool_call> blocks and Llama 3 JSON,
// the syntax told from real templates of the corpus, OpenAI's tool_calls shape, and hostile answers that must stay
// text without a crash.
#include "engine/chat/tool_calls.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace test_tool_calls {

using namespace quill::chat;

namespace {

std::string template_source(const std::string& name) {
    return quill::test::read_file(std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" /
                                  (name + ".jinja"));
}

}  // namespace

TEST_CASE("tool_call_syntax tells the family from real templates", "[chat][tools]") {
    CHECK(tool_call_syntax(template_source("Qwen-Qwen3-0.6B")) == ToolCallSyntax::hermes);
    CHECK(tool_call_syntax(template_source("Qwen-Qwen2.5-7B-Instruct")) == ToolCallSyntax::hermes);
    CHECK(tool_call_syntax(template_source("NousResearch-Hermes-3-Llama-3.1-8B-tool_use")) == ToolCallSyntax::hermes);
    CHECK(tool_call_syntax(template_source("meta-llama-Llama-3.1-8B-Instruct")) == ToolCallSyntax::llama3_json);
    CHECK(tool_call_syntax(template_source("meta-llama-Llama-3.3-70B-Instruct")) == ToolCallSyntax::llama3_json);
    CHECK(tool_call_syntax(template_source("google-gemma-2-2b-it")) == ToolCallSyntax::none);
    CHECK(tool_call_syntax("{% for m in messages %}{{ m.content }}{% endfor %}") == ToolCallSyntax::none);
}

TEST_CASE("Hermes tool calls leave the text and keep the arguments' key order", "[chat][tools]") {
    const ParsedAnswer a = parse_tool_calls(
        "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\", \"city\": "
        "\"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"a</b>\"}}"
        "</tool_call>",
        ToolCallSyntax::hermes);
    CHECK(a.text == "Let me look.");
    REQUIRE(a.calls.size() == 2);
    CHECK(a.calls[0].name == "get_weather");
    CHECK(a.calls[0].arguments == R"({"unit":"celsius","city":"Paris"})");
    CHECK(a.calls[1].name == "search");
    CHECK(a.calls[1].arguments == R"({"query":"a</b>"})");
    // "parameters" as some fine-tunes write it, and no arguments at all
    const ParsedAnswer b = parse_tool_calls(
        "<tool_call>{\"name\": \"now\"}</tool_call><tool_call>{\"parameters\": {\"x\": 1}, \"name\": \"f\"}</tool_call>",
        ToolCallSyntax::hermes);
    CHECK(b.text.empty());
    REQUIRE(b.calls.size() == 2);
    CHECK(b.calls[0].arguments == "{}");
    CHECK(b.calls[1].arguments == R"({"x":1})");
}

TEST_CASE("a malformed tool call stays text, whatever the answer holds", "[chat][tools]") {
    const std::string deep = "<tool_call>" + std::string(100000, '[') + "</tool_call>";
    const char with_nul[] = "<tool_call>{\"name\": \"f\0\"}</tool_call>";
    const std::vector<std::string> answers = {
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}",            // cut short: no closing tag
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": </tool_call>",  // invalid JSON
        "<tool_call>[\"f\"]</tool_call>",                                  // not an object
        "<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>",          // name not a string
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",       // empty name
        "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",  // arguments not an object
        "<tool_call>{\"name\": \"f\"} trailing</tool_call>",               // more than one value
        "<tool_call></tool_call>",
        "</tool_call><tool_call>",
        "<tool_call><tool_call></tool_call>",
        "<tool_call>{\"name\": \"f\\ud800\"}</tool_call>",  // a lone surrogate
        deep,                                               // nested past the depth limit
        std::string(with_nul, sizeof with_nul - 1),  // a raw NUL in a JSON string
        "\xff\xfe<tool_call>\xc3</tool_call>",
        "",
    };
    for (const std::string& answer : answers) {
        CAPTURE(answer.substr(0, 80));
        const ParsedAnswer a = parse_tool_calls(answer, ToolCallSyntax::hermes);
        CHECK(a.calls.empty());
        CHECK(a.text == answer);
    }
    // One bad block among good ones stays where it was; the good one is taken.
    const ParsedAnswer mixed = parse_tool_calls(
        "A <tool_call>{bad}</tool_call> B <tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call> C",
        ToolCallSyntax::hermes);
    REQUIRE(mixed.calls.size() == 1);
    CHECK(mixed.calls[0].name == "g");
    CHECK(mixed.text == "A <tool_call>{bad}</tool_call> B  C");
    // No syntax: nothing is taken.
    const std::string good = "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>";
    CHECK(parse_tool_calls(good, ToolCallSyntax::none).text == good);
}

TEST_CASE("Llama 3 JSON calls: the whole answer, to an offered tool", "[chat][tools]") {
    const std::vector<std::string> tools = {"get_weather"};
    const ParsedAnswer a = parse_tool_calls(
        " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n",
        ToolCallSyntax::llama3_json, tools);
    CHECK(a.text.empty());
    REQUIRE(a.calls.size() == 1);
    CHECK(a.calls[0].name == "get_weather");
    CHECK(a.calls[0].arguments == R"({"city":"Paris","unit":"celsius"})");
    CHECK(parse_tool_calls("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {}}", ToolCallSyntax::llama3_json,
                           tools)
              .calls.size() == 1);
    // Not a call: a tool not offered, text around the object, invalid JSON, a JSON answer that names nothing.
    for (const std::string answer : {"{\"name\": \"rm_rf\", \"parameters\": {}}",
                                     "Sure: {\"name\": \"get_weather\", \"parameters\": {}}",
                                     "{\"name\": \"get_weather\", \"parameters\": {",
                                     "{\"name\": \"get_weather\", \"parameters\": [1]}", "{\"city\": \"Paris\"}"}) {
        CAPTURE(answer);
        const ParsedAnswer p = parse_tool_calls(answer, ToolCallSyntax::llama3_json, tools);
        CHECK(p.calls.empty());
        CHECK(p.text == answer);
    }
}

TEST_CASE("request_tool_calls looks for calls only when the request offers tools", "[chat][tools]") {
    const std::string answer = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
    CHECK(request_tool_calls(answer, ToolCallSyntax::hermes, {{"tools", tools}}).calls.size() == 1);
    CHECK(request_tool_calls(answer, ToolCallSyntax::hermes, {{"tools", tools}, {"tool_choice", "auto"}}).calls.size() ==
          1);
    CHECK(request_tool_calls(answer, ToolCallSyntax::hermes, {{"tools", tools}, {"tool_choice", "none"}}).calls.empty());
    CHECK(request_tool_calls(answer, ToolCallSyntax::hermes, nlohmann::ordered_json::object()).calls.empty());
    CHECK(request_tool_calls(answer, ToolCallSyntax::hermes, {{"tools", nlohmann::ordered_json::array()}}).calls.empty());
}

TEST_CASE("openai_tool_calls: OpenAI's shape, arguments as a string, ids from the seed", "[chat][tools]") {
    const std::vector<ToolCall> calls = {{"get_weather", R"({"city":"Paris"})"}, {"now", "{}"}};
    const auto j = openai_tool_calls(calls, ToolCallSyntax::hermes, 42);
    REQUIRE(j.size() == 2);
    CHECK(j[0]["type"] == "function");
    CHECK(j[0]["function"]["name"] == "get_weather");
    CHECK(j[0]["function"]["arguments"] == R"({"city":"Paris"})");
    const std::string id = j[0]["id"];
    CHECK(id.size() == 29);
    CHECK(id.starts_with("call_"));
    CHECK(j[1]["id"] != j[0]["id"]);
    CHECK(openai_tool_calls(calls, ToolCallSyntax::hermes, 42) == j);
    CHECK(openai_tool_calls(calls, ToolCallSyntax::hermes, 43)[0]["id"] != j[0]["id"]);
}

}  // namespace test_tool_calls
