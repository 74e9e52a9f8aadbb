// A reply's tool calls taken out as it streams (engine/chat/answer_stream.h), in every syntax: the text before a
// call streams at once, the call comes out once it is whole and parsed, and what is not a call stays text as it
// was written. Pieces are pushed a few bytes at a time, as a detokenizer gives them.
#include "engine/chat/answer_stream.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace test_tool_call_stream {

using namespace quill::chat;

namespace {

// What a stream gave out, in order: text as it is, each call as "{NAME ARGS}".
struct Events {
    std::string all;
    std::vector<std::string> texts;  // each text piece, as pushed out
};

Events stream(ToolCallSyntax syntax, const std::string& answer, size_t step = 3,
              const std::vector<std::string>& names = {"get_weather"}) {
    Events e;
    ToolCallStream s(syntax, names,
                     {nullptr,
                      [&](std::string_view t) {
                          e.all += t;
                          e.texts.emplace_back(t);
                      },
                      [&](const ToolCall& c) { e.all += "{" + c.name + " " + c.arguments + "}"; }});
    for (size_t i = 0; i < answer.size(); i += step) s.push(std::string_view(answer).substr(i, step));
    s.finish();
    return e;
}

}  // namespace

TEST_CASE("ToolCallStream: Hermes blocks are calls once closed, the text around them streams", "[chat][tools]") {
    const std::string answer =
        "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
        "Done.";
    const Events e = stream(ToolCallSyntax::hermes, answer);
    CHECK(e.all == "Let me look.\n{get_weather {\"city\":\"Paris\"}}\nDone.");
    // The text before the marker came out before the call was whole (not held to the end).
    REQUIRE(!e.texts.empty());
    CHECK(e.texts.front() == "Let");
    // A block that is not a call, and one left open, stay as they were written.
    const std::string bad = "<tool_call>{\"name\": 3}</tool_call> then <tool_call>{\"name\": \"get_weather\"";
    CHECK(stream(ToolCallSyntax::hermes, bad).all == bad);
    // Two blocks in one: text.
    const std::string two = "<tool_call>{\"name\": \"a\"}{\"name\": \"b\"}</tool_call>";
    CHECK(stream(ToolCallSyntax::hermes, two).all == two);
}

TEST_CASE("ToolCallStream: Qwen3-Coder XML, Mistral, Llama 3 and harmony calls", "[chat][tools]") {
    CHECK(stream(ToolCallSyntax::qwen3_xml,
                 "Sure.<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                 "</tool_call>")
              .all == "Sure.{get_weather {\"city\":\"Paris\"}}");
    CHECK(stream(ToolCallSyntax::mistral, "Sure. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]now[ARGS]{}")
              .all == "Sure. {get_weather {\"city\":\"Paris\"}}{now {}}");
    CHECK(stream(ToolCallSyntax::mistral_list, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}]").all ==
          "{get_weather {}}");
    CHECK(stream(ToolCallSyntax::mistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\"").all ==
          "[TOOL_CALLS]get_weather[ARGS]{\"city\"");
    CHECK(stream(ToolCallSyntax::llama3_json, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}").all ==
          "{get_weather {\"city\":\"Oslo\"}}");
    // Llama 3: a call only to an offered tool; JSON or text otherwise, streamed when it does not start as JSON.
    const std::string other = "{\"name\": \"other\", \"parameters\": {}}";
    CHECK(stream(ToolCallSyntax::llama3_json, other).all == other);
    const Events plain = stream(ToolCallSyntax::llama3_json, "It is {warm}.");
    CHECK(plain.all == "It is {warm}.");
    CHECK(plain.texts.size() > 1);

    Events e;
    ToolCallStream s(ToolCallSyntax::harmony, {},
                     {nullptr, [&](std::string_view t) { e.all += t; },
                      [&](const ToolCall& c) { e.all += "{" + c.name + " " + c.arguments + "}"; }});
    s.push("Checking.");
    s.push_call("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Rome\"}<|call|>");
    s.push_call("<|channel|>commentary to=functions.get_weather<|message|>{\"city\"");
    s.finish();
    CHECK(e.all == "Checking.{get_weather {\"city\":\"Rome\"}} commentary to=functions.get_weather {\"city\"");
}

TEST_CASE("AnswerStream: reasoning apart, calls out of the content, looked for only when tools are offered",
          "[chat][tools]") {
    const nlohmann::ordered_json tools = {
        {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}};
    const std::string answer =
        "<think>Need weather.</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
    std::string reasoning, shown;
    AnswerStream s(ReasoningSyntax::think, false, ToolCallSyntax::hermes, tools,
                   {[&](std::string_view t) { reasoning += t; }, [&](std::string_view t) { shown += t; },
                    [&](const ToolCall& c) { shown += call_display(c); }});
    for (size_t i = 0; i < answer.size(); i += 2) s.push(std::string_view(answer).substr(i, 2));
    s.finish();
    CHECK(reasoning == "Need weather.");
    CHECK(shown == "[tool call get_weather {}]");
    const ParsedAnswer parsed = s.calls();
    REQUIRE(parsed.calls.size() == 1);
    CHECK(parsed.text.empty());

    // No tools offered, or tool_choice none: the block is text.
    for (const nlohmann::ordered_json& vars :
         {nlohmann::ordered_json::object(), nlohmann::ordered_json{{"tools", tools["tools"]}, {"tool_choice", "none"}}}) {
        std::string text;
        AnswerStream plain(ReasoningSyntax::none, false, ToolCallSyntax::hermes, vars,
                           {nullptr, [&](std::string_view t) { text += t; }, nullptr});
        plain.push(answer);
        plain.finish();
        CHECK(text == answer);
        CHECK(plain.calls().calls.empty());
    }
}

TEST_CASE("openai_finish_reason: tool_calls only for an answer that stopped with calls", "[chat][tools]") {
    CHECK(openai_finish_reason(quill::FinishReason::stop, true) == "tool_calls");
    CHECK(openai_finish_reason(quill::FinishReason::stop, false) == "stop");
    CHECK(openai_finish_reason(quill::FinishReason::length, true) == "length");
}

}  // namespace test_tool_call_stream
