// Fuzz target: tool calls out of a model's answer (engine/chat/tool_calls.h) in every syntax, on arbitrary bytes.
// Nothing may throw, crash or hang; an answer with no call comes back as it is; every call has a name and arguments
// that are a JSON object's text, and OpenAI's tool_calls built from them carry the same strings.
#include "engine/chat/tool_calls.h"
#include "tests/fuzz/fuzz_util.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace quill::chat;
    const std::string_view answer(reinterpret_cast<const char*>(data), size);
    const std::vector<std::string> names = {"f", "get_weather", "a", "b"};
    for (ToolCallSyntax syntax :
         {ToolCallSyntax::none, ToolCallSyntax::hermes, ToolCallSyntax::llama3_json, ToolCallSyntax::mistral,
          ToolCallSyntax::mistral_list, ToolCallSyntax::harmony, ToolCallSyntax::qwen3_xml}) {
        const ParsedAnswer parsed = parse_tool_calls(answer, syntax, names);
        if (parsed.calls.empty()) {
            quill::fuzz::check(parsed.text == answer, "parse_tool_calls", "an answer without calls changed");
            continue;
        }
        quill::fuzz::check(syntax != ToolCallSyntax::none, "parse_tool_calls", "calls taken with no syntax");
        quill::fuzz::check(parsed.text.size() < answer.size(), "parse_tool_calls", "the text grew");
        for (const ToolCall& c : parsed.calls) {
            quill::fuzz::check(!c.name.empty(), "parse_tool_calls", "a call without a name");
            const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
            quill::fuzz::check(args.is_object(), "parse_tool_calls", "arguments that are not a JSON object");
        }
        const auto openai = openai_tool_calls(parsed.calls, size);
        quill::fuzz::check(openai.size() == parsed.calls.size(), "openai_tool_calls", "a call lost");
        for (size_t i = 0; i < openai.size(); ++i)
            quill::fuzz::check(openai[i]["function"]["arguments"] == parsed.calls[i].arguments, "openai_tool_calls",
                               "arguments changed");
    }
    return 0;
}
