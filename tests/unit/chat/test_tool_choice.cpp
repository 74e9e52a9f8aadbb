// tool_choice "required" or a named function (chat::tool_choice_constraint): the grammar takes exactly a call in the
// template's syntax to an offered tool (the named one), with arguments valid against its parameters schema, and
// what the grammar takes parse_tool_calls reads back as that call.
#include "engine/chat/tool_calls.h"
#include "engine/error.h"
#include "engine/grammar/automaton.h"
#include "engine/grammar/constraint.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

namespace test_tool_choice {

using namespace quill;
using namespace quill::chat;
using ojson = nlohmann::ordered_json;

namespace {

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
    "additionalProperties": false}}},
  {"type": "function", "function": {"name": "now"}}])");

struct Accepts {
    explicit Accepts(const grammar::ConstraintSpec& spec) : a(grammar::compile_constraint(spec)) {}
    bool operator()(std::string_view text) { return a.accepting(a.advance(a.start(), text)); }
    grammar::Automaton a;
};

ojson vars(const ojson& choice) { return {{"tools", kTools}, {"tool_choice", choice}}; }

}  // namespace

TEST_CASE("tool_choice required: one Hermes call with arguments valid against the schema", "[chat][tools]") {
    const auto spec = tool_choice_constraint(vars("required"), ToolCallSyntax::hermes, "request");
    REQUIRE(spec);
    Accepts accepts(*spec);
    const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
                             "\"c\"}}\n</tool_call>";
    CHECK(accepts(call));
    CHECK(accepts("<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>"));
    const ParsedAnswer parsed = parse_tool_calls(call, ToolCallSyntax::hermes);
    REQUIRE(parsed.calls.size() == 1);
    CHECK(parsed.calls[0].arguments == R"({"city":"Paris","unit":"c"})");
    // Not a call, a tool not offered, arguments the schema refuses, text around the call.
    CHECK_FALSE(accepts("It is sunny."));
    CHECK_FALSE(accepts("<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>"));
    CHECK_FALSE(
        accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
    CHECK_FALSE(accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3, \"unit\": \"c\"}}\n"
                        "</tool_call>"));
    CHECK_FALSE(accepts("Sure. " + call));
}

TEST_CASE("tool_choice naming a function allows that function only", "[chat][tools]") {
    const ojson named = {{"type", "function"}, {"function", {{"name", "now"}}}};
    const auto spec = tool_choice_constraint(vars(named), ToolCallSyntax::hermes, "request");
    REQUIRE(spec);
    Accepts accepts(*spec);
    CHECK(accepts("<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    CHECK_FALSE(accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"c\"}}"
                        "\n</tool_call>"));
    const ojson missing = {{"type", "function"}, {"function", {{"name", "nope"}}}};
    CHECK_THROWS_WITH(tool_choice_constraint(vars(missing), ToolCallSyntax::hermes, "input line 3"),
                      Catch::Contains("input line 3") && Catch::Contains("nope"));
}

TEST_CASE("tool_choice: Llama 3 JSON enforced, auto and none and other syntaxes not", "[chat][tools]") {
    const auto spec = tool_choice_constraint(vars("required"), ToolCallSyntax::llama3_json, "request");
    REQUIRE(spec);
    Accepts accepts(*spec);
    CHECK(accepts("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"f\"}}"));
    CHECK_FALSE(accepts("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"f\"}}"));
    CHECK_FALSE(tool_choice_constraint(vars("auto"), ToolCallSyntax::hermes, "request"));
    CHECK_FALSE(tool_choice_constraint(vars("none"), ToolCallSyntax::hermes, "request"));
    CHECK_FALSE(tool_choice_constraint({{"tools", kTools}}, ToolCallSyntax::hermes, "request"));
    CHECK_THROWS_AS(tool_choice_constraint({{"tool_choice", "required"}}, ToolCallSyntax::hermes, "request"),
                    UsageError);  // required with no tools
    CHECK_FALSE(tool_choice_constraint(vars("required"), ToolCallSyntax::none, "request"));
    // A schema the converter does not support is a usage error naming the request.
    ojson bad = vars("required");
    bad["tools"][1]["function"]["parameters"] = {{"type", "object"}, {"patternProperties", ojson::object()}};
    CHECK_THROWS_AS(tool_choice_constraint(bad, ToolCallSyntax::hermes, "request"), UsageError);
}

}  // namespace test_tool_choice
