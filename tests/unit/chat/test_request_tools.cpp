// chat_request_from_json, the one reader of OpenAI chat requests (`quill template --messages`, `quill batch` lines,
// --tools files): tools and tool_choice checked, chat_template_kwargs passed as template variables, content parts
// joined.
#include "engine/chat/chat_format.h"
#include "engine/error.h"

#include <catch2/catch.hpp>

namespace test_request_tools {

using quill::chat::chat_request_from_json;
using quill::chat::ChatFormat;
using quill::chat::parse_chat_request;
using quill::chat::parse_tools;
using ojson = nlohmann::ordered_json;

TEST_CASE("chat_template_kwargs reach the template as variables, over the request's own", "[chat][tools]") {
    const auto request = parse_chat_request(
        R"({"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": true, "reasoning_effort": "low",
            "chat_template_kwargs": {"enable_thinking": false, "custom": [1, 2]}})",
        "r.json");
    CHECK(!request.vars.contains("chat_template_kwargs"));
    CHECK(request.vars["enable_thinking"] == false);
    CHECK(request.vars["custom"] == ojson::array({1, 2}));
    const auto f = ChatFormat::from_source("{{ enable_thinking }}|{{ reasoning_effort }}|{{ custom | tojson }}", "t",
                                           "<s>", "</s>");
    CHECK(f.render(request.messages, false, nullptr, request.vars).text == "False|low|[1, 2]");
    CHECK_THROWS_WITH(parse_chat_request(R"({"messages": [], "chat_template_kwargs": [1]})", "r.json"),
                      Catch::Contains("r.json: \"chat_template_kwargs\" must be a JSON object"));
}

TEST_CASE("tools and tool_choice are checked with a message naming what is wrong", "[chat][tools]") {
    const std::string ok = R"({"messages": [{"role": "user", "content": "Hi"}], "tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}, {"name": "bare"}]})";
    CHECK(parse_chat_request(ok, "r").vars["tools"].size() == 2);
    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"("tools": {"name": "f"})", "r: \"tools\" must be a JSON array of tool definitions"},
        {R"("tools": [{"type": "function", "function": {"name": "f"}}, 3])", "r: tool 2 is not"},
        {R"("tools": [{"type": "function", "function": {"description": "no name"}}])", "r: tool 1 is not"},
        {R"("tools": [{"type": "function", "function": {"name": ""}}])", "r: tool 1 is not"},
        {R"("tools": [{"type": "code_interpreter"}])", "r: tool 1 has \"type\" \"code_interpreter\""},
        {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}])",
         "r: tool 1: \"parameters\" must be a JSON schema object"},
        {R"("tool_choice": "always")", "r: \"tool_choice\" must be"},
        {R"("tool_choice": {"type": "function"})", "r: \"tool_choice\" must be"},
    };
    for (const auto& [field, message] : bad) {
        CAPTURE(field);
        CHECK_THROWS_AS(parse_chat_request(R"({"messages": [], )" + field + "}", "r"), quill::UsageError);
        CHECK_THROWS_WITH(parse_chat_request(R"({"messages": [], )" + field + "}", "r"), Catch::Contains(message));
    }
    // null is as absent (OpenAI clients send "tools": null)
    CHECK_NOTHROW(parse_chat_request(R"({"messages": [], "tools": null, "tool_choice": null})", "r"));
}

TEST_CASE("content parts are joined into a string, and other content is refused", "[chat][tools]") {
    const auto request = chat_request_from_json(
        ojson::parse(R"([{"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
                         {"role": "assistant", "content": null, "tool_calls": []}])"),
        "input line 3");
    CHECK(request.messages[0]["content"] == "AB");
    CHECK(request.messages[1]["content"].is_null());
    CHECK_THROWS_WITH(
        chat_request_from_json(ojson::parse(R"([{"role": "user", "content": [{"type": "image_url"}]}])"), "input line 3"),
        Catch::Contains("input line 3: message 1: content parts must be"));
    CHECK_THROWS_WITH(chat_request_from_json(ojson::parse(R"([{"role": "user", "content": 5}])"), "x"),
                      Catch::Contains("x: message 1 has no string \"content\""));
}

TEST_CASE("parse_tools reads a --tools file: an array of definitions", "[chat][tools]") {
    CHECK(parse_tools(R"([{"type": "function", "function": {"name": "f"}}])", "--tools t.json").size() == 1);
    CHECK_THROWS_WITH(parse_tools(R"({"tools": []})", "--tools t.json"),
                      Catch::Contains("--tools t.json: \"tools\" must be a JSON array"));
    CHECK_THROWS_WITH(parse_tools("[{", "--tools t.json"), Catch::Contains("--tools t.json: not valid JSON"));
}

}  // namespace test_request_tools
