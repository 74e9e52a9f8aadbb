// Tool calls in the syntaxes that name the tool outside the JSON (engine/chat/tool_calls.h): Mistral's [TOOL_CALLS]
// in its array and [ARGS] forms, gpt-oss's harmony messages to functions.NAME, and Qwen3-Coder's XML blocks; the
// family told from real templates of the corpus, and hostile answers that stay text.
#include "engine/chat/tool_calls.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace test_tool_call_syntaxes {

using namespace quill::chat;

namespace {

std::string template_source(const std::string& name) {
    return quill::test::read_file(std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" /
                                  (name + ".jinja"));
}

std::string repeat(const std::string& s, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
}

// Every answer comes back whole, with no call.
void check_stays_text(const std::vector<std::string>& answers, ToolCallSyntax syntax) {
    for (const std::string& answer : answers) {
        CAPTURE(answer.substr(0, 120));
        const ParsedAnswer a = parse_tool_calls(answer, syntax);
        CHECK(a.calls.empty());
        CHECK(a.text == answer);
    }
}

}  // namespace

TEST_CASE("tool_call_syntax tells Mistral, harmony and Qwen3-Coder from real templates", "[chat][tools]") {
    CHECK(tool_call_syntax(template_source("mistralai-Mistral-Nemo-Instruct-2407")) == ToolCallSyntax::mistral_list);
    CHECK(tool_call_syntax(template_source("unsloth-mistral-Devstral-Small-2507")) == ToolCallSyntax::mistral);
    CHECK(tool_call_syntax(template_source("Mistral-Small-3.2-24B-Instruct-2506")) == ToolCallSyntax::mistral);
    CHECK(tool_call_syntax(template_source("mistralai-Ministral-3-14B-Reasoning-2512")) == ToolCallSyntax::mistral);
    CHECK(tool_call_syntax(template_source("openai-gpt-oss-120b")) == ToolCallSyntax::harmony);
    CHECK(tool_call_syntax(template_source("Qwen3-Coder")) == ToolCallSyntax::qwen3_xml);
    CHECK(tool_call_syntax(template_source("Qwen-Qwen3-0.6B")) == ToolCallSyntax::hermes);
}

TEST_CASE("Mistral calls: the JSON array and the NAME[ARGS] forms", "[chat][tools]") {
    const ParsedAnswer a = parse_tool_calls(
        "Checking.[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\", \"city\": \"Paris\"}}, "
        "{\"name\": \"now\"}]</s>",
        ToolCallSyntax::mistral);
    CHECK(a.text == "Checking.</s>");
    REQUIRE(a.calls.size() == 2);
    CHECK(a.calls[0].name == "get_weather");
    CHECK(a.calls[0].arguments == R"({"unit":"c","city":"Paris"})");
    CHECK(a.calls[1].name == "now");
    CHECK(a.calls[1].arguments == "{}");
    const ParsedAnswer b = parse_tool_calls(
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"a]}[\"}[TOOL_CALLS]search.web[CALL_ID]abc123XYZ[ARGS] {\"q\": [1]}",
        ToolCallSyntax::mistral);
    CHECK(b.text.empty());
    REQUIRE(b.calls.size() == 2);
    CHECK(b.calls[0].name == "get_weather");
    CHECK(b.calls[0].arguments == R"({"city":"a]}["})");
    CHECK(b.calls[1].name == "search.web");
    CHECK(b.calls[1].arguments == R"({"q":[1]})");
}

TEST_CASE("a malformed Mistral call stays text", "[chat][tools]") {
    check_stays_text({
                         "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}",            // unclosed array
                         "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {]]",            // invalid JSON
                         "[TOOL_CALLS][{\"name\": \"f\"}, 3]",                           // one item not a call
                         "[TOOL_CALLS][]",                                               // no call
                         "[TOOL_CALLS]f[ARGS]{\"a\": 1",                                 // unclosed arguments
                         "[TOOL_CALLS]f[ARGS][1, 2]",                                    // arguments not an object
                         "[TOOL_CALLS]f{\"a\": 1}",                                      // no [ARGS]
                         "[TOOL_CALLS][ARGS]{}",                                         // no name
                         "[TOOL_CALLS]f[ARGS]{\"a\": \"\\\"}",                           // an escape left open
                         "[TOOL_CALLS]f[ARGS]" + std::string(100000, '{'),              // nested past the limit
                         "[TOOL_CALLS]" + std::string(100000, '['),
                         "[TOOL_CALLS]",
                         "\xff[TOOL_CALLS]\xc3[ARGS]{}",
                         repeat("[TOOL_CALLS]f[ARGS]{\"", 50000),  // calls open to the end
                         repeat("[TOOL_CALLS][{\"", 50000),
                     },
                     ToolCallSyntax::mistral);
    const ParsedAnswer mixed =
        parse_tool_calls("A [TOOL_CALLS]f[ARGS]{bad} B [TOOL_CALLS]g[ARGS]{\"x\": true} C", ToolCallSyntax::mistral);
    REQUIRE(mixed.calls.size() == 1);
    CHECK(mixed.calls[0].name == "g");
    CHECK(mixed.text == "A [TOOL_CALLS]f[ARGS]{bad} B  C");
}

TEST_CASE("harmony calls: the recipient in the channel or the role header", "[chat][tools]") {
    const ParsedAnswer a = parse_tool_calls(
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"unit\": \"c\"}<|call|>",
        ToolCallSyntax::harmony);
    CHECK(a.text == "<|channel|>analysis<|message|>Need weather.<|end|>");
    REQUIRE(a.calls.size() == 1);
    CHECK(a.calls[0].name == "get_weather");
    CHECK(a.calls[0].arguments == R"({"city":"Paris","unit":"c"})");
    // The form the template writes for past calls, and one cut at the end (<|call|> is a stop token).
    const ParsedAnswer b = parse_tool_calls(
        " to=functions.lookup<|channel|>commentary json<|message|>{\"q\": \"x\"}<|call|>"
        "<|start|>assistant<|channel|>commentary to=functions.now<|message|>{}",
        ToolCallSyntax::harmony);
    CHECK(b.text.empty());
    REQUIRE(b.calls.size() == 2);
    CHECK(b.calls[0].name == "lookup");
    CHECK(b.calls[0].arguments == R"({"q":"x"})");
    CHECK(b.calls[1].name == "now");
    // A final answer with no call is left alone.
    const std::string final_answer = "<|channel|>final<|message|>It is sunny.";
    CHECK(parse_tool_calls(final_answer, ToolCallSyntax::harmony).text == final_answer);
}

TEST_CASE("a malformed harmony call stays text", "[chat][tools]") {
    check_stays_text({
                         "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1",  // unclosed
                         "<|channel|>commentary to=functions.f<|message|>{\"a\": }<|call|>",  // invalid JSON
                         "<|channel|>commentary to=functions.f<|message|>[1]<|call|>",        // not an object
                         "<|channel|>commentary to=functions.<|message|>{}<|call|>",          // no name
                         "<|channel|>commentary to=functions.f<|message|>{} and more",        // text after the call
                         "<|channel|>commentary to=functions.f<|end|><|message|>{}<|call|>",  // header spans messages
                         "<|channel|>commentary to=functions.f<|message|>" + std::string(100000, '['),
                         "to=functions.f",
                         "to=functions.f\xff<|message|>{}",
                         repeat("to=functions.f=", 50000) + "<|message|>{}",  // headers past the window
                         repeat("to=functions.f<|message|>{\"", 30000),
                     },
                     ToolCallSyntax::harmony);
}

TEST_CASE("Qwen3-Coder XML calls, with Hermes JSON blocks beside them", "[chat][tools]") {
    const ParsedAnswer a = parse_tool_calls(
        "I will look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"unit\": \"c\"}\n</parameter>\n</function>\n"
        "</tool_call>\n<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>",
        ToolCallSyntax::qwen3_xml);
    CHECK(a.text == "I will look.");
    REQUIRE(a.calls.size() == 2);
    CHECK(a.calls[0].name == "get_weather");
    CHECK(a.calls[0].arguments == R"({"city":"San Francisco","days":3,"opts":{"unit":"c"}})");
    CHECK(a.calls[1].name == "now");
    CHECK(parse_tool_calls("<tool_call><function=f></function></tool_call>", ToolCallSyntax::qwen3_xml)
              .calls.at(0)
              .arguments == "{}");
    check_stays_text({
                         "<tool_call><function=f><parameter=a>1</parameter></function>",  // unclosed block
                         "<tool_call><function=f><parameter=a>1</function></tool_call>",  // unclosed parameter
                         "<tool_call><function=f><parameter=a>1</parameter><parameter=a>2</parameter></function>"
                         "</tool_call>",                                                  // a parameter twice
                         "<tool_call><function=><parameter=a>1</parameter></function></tool_call>",  // no name
                         "<tool_call><function=f>stray<parameter=a>1</parameter></function></tool_call>",
                         "<tool_call><function=f x><parameter=a>1</parameter></function></tool_call>",
                         "<tool_call><function=f>" + std::string(100000, '<') + "</function></tool_call>",
                     },
                     ToolCallSyntax::qwen3_xml);
    // Hermes's reader does not take the XML form.
    const std::string xml = "<tool_call><function=f></function></tool_call>";
    CHECK(parse_tool_calls(xml, ToolCallSyntax::hermes).text == xml);
}

}  // namespace test_tool_call_syntaxes
