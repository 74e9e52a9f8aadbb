// parse_chat_request and ChatFormat::render with the variables of an OpenAI chat request: key order kept from the
// text to the template, further variables passed, the format's own variables not replaceable.
#include "engine/chat/chat_format.h"
#include "engine/error.h"

#include <catch2/catch.hpp>

namespace test_chat_request {

using quill::chat::ChatFormat;
using quill::chat::parse_chat_request;

namespace {

ChatFormat format_of(const char* source) {
    return ChatFormat::from_source(source, "test", "<s>", "</s>");
}

}  // namespace

TEST_CASE("parse_chat_request keeps the file's key order into tojson", "[chat]") {
    const auto request = parse_chat_request(
        R"({"tools": [{"name": "f", "description": "d"}], "messages": [{"role": "assistant", "content": null,
            "tool_calls": [{"function": {"name": "f", "arguments": {"zeta": 1, "alpha": 2, "mid": [3, {"q": 1, "c": 2}]}}}]}],
            "enable_thinking": false})",
        "request.json");
    REQUIRE(request.messages.size() == 1);
    REQUIRE(request.vars.size() == 2);
    CHECK(request.vars.begin().key() == "tools");
    CHECK(!request.vars.contains("messages"));
    const auto f = format_of("{{ messages[0].tool_calls[0].function.arguments | tojson }}|{{ messages[0] | tojson }}|"
                             "{{ tools | tojson }}|{{ enable_thinking }}");
    CHECK(f.render(request.messages, false, nullptr, request.vars).text ==
          R"({"zeta": 1, "alpha": 2, "mid": [3, {"q": 1, "c": 2}]}|)"
          R"({"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": )"
          R"({"zeta": 1, "alpha": 2, "mid": [3, {"q": 1, "c": 2}]}}}]}|)"
          R"([{"name": "f", "description": "d"}]|False)");
}

TEST_CASE("parse_chat_request reads a plain array of messages with no variables", "[chat]") {
    const auto request = parse_chat_request(R"([{"role": "user", "content": "Hi", "b": 1, "a": 2}])", "m.json");
    CHECK(request.vars.empty());
    CHECK(format_of("{{ messages | tojson }}").render(request.messages, false).text ==
          R"([{"role": "user", "content": "Hi", "b": 1, "a": 2}])");
    CHECK_THROWS_WITH(parse_chat_request(R"({"tools": []})", "m.json"),
                      Catch::Contains("m.json: expected a JSON array of messages"));
    CHECK_THROWS_WITH(parse_chat_request(R"({"messages": [{"content": "x"}]})", "m.json"),
                      Catch::Contains("message 1 has no string \"role\""));
}

TEST_CASE("a request's variables cannot replace the format's own", "[chat]") {
    const auto request = parse_chat_request(
        R"({"messages": [{"role": "user", "content": "Hi"}], "bos_token": "<|x|>", "add_generation_prompt": false,
            "eos_token": "<|y|>"})",
        "r.json");
    const auto f = format_of("{{ bos_token }}{{ messages[0].content }}{% if add_generation_prompt %}>{% endif %}{{ eos_token }}");
    const auto r = f.render(request.messages, true, nullptr, request.vars);
    CHECK(r.text == "<s>Hi></s>");
    // Only the message's bytes are literal text; the format's BOS and EOS stay special.
    REQUIRE(r.literal.size() == 1);
    CHECK(r.literal[0].begin == 3);
    CHECK(r.literal[0].size == 2);
}

TEST_CASE("a request's strings are literal text, never special tokens", "[chat]") {
    const auto request = parse_chat_request(
        R"({"messages": [{"role": "user", "content": "Hi"}], "tools": [{"name": "<s>"}]})", "r.json");
    const auto r = format_of("{{ tools[0].name }}{{ messages[0].content }}").render(request.messages, false, nullptr,
                                                                                    request.vars);
    CHECK(r.text == "<s>Hi");
    REQUIRE(r.literal.size() >= 1);
    CHECK(r.literal[0].begin == 0);
}

}  // namespace test_chat_request
