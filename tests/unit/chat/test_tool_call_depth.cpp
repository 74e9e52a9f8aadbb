// A model's tool call whose arguments nest as deep as quill reads JSON at all: the call's arguments stay within
// kMaxJsonDepth, so that chat's history (history_tool_calls, which reads them again) keeps the call instead of
// failing the turn with "tool call arguments: JSON nested deeper than 64 levels".
#include "engine/chat/tool_calls.h"
#include "engine/io/json_input.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

namespace test_tool_call_depth {

using namespace quill;
using namespace quill::chat;

namespace {

std::string nested(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

// A Qwen3-Coder call of f with one parameter `a` whose value is `value`.
std::string xml_call(const std::string& value) {
    return "<tool_call>\n<function=f>\n<parameter=a>\n" + value + "\n</parameter>\n</function>\n</tool_call>";
}

}  // namespace

TEST_CASE("a Qwen3-Coder parameter as deep as the JSON limit is kept as text, so the call reads back", "[chat][tools]") {
    for (const int levels : {kMaxJsonDepth - 1, kMaxJsonDepth}) {
        INFO(levels);
        const ParsedAnswer answer = parse_tool_calls(xml_call(nested(levels)), ToolCallSyntax::qwen3_xml, {"f"});
        REQUIRE(answer.calls.size() == 1);
        const auto args = try_parse_untrusted_json(answer.calls[0].arguments);
        REQUIRE(args);
        REQUIRE(args->is_object());
        // one level less than the limit is JSON (the arguments object is the last level); the limit itself is text
        CHECK(args->at("a").is_array() == (levels < kMaxJsonDepth));
        if (levels == kMaxJsonDepth) CHECK(args->at("a") == nested(levels));
        nlohmann::ordered_json history;
        REQUIRE_NOTHROW(history = history_tool_calls(answer.calls, ToolCallSyntax::qwen3_xml, 1));
        CHECK(nlohmann::json::parse(history.at(0).at("function").at("arguments").dump()) == *args);
    }
}

}  // namespace test_tool_call_depth
