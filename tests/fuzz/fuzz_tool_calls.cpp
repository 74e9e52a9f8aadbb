// Fuzz target: tool calls out of a model's answer (engine/chat/tool_calls.h) in every syntax, and its reasoning
// (engine/chat/reasoning.h), on arbitrary bytes. Nothing may throw, crash or hang; an answer with no call comes back
// as it is; every call has a name and arguments that are a JSON object's text (no deeper than kMaxJsonDepth, as
// chat's history reads them again), and OpenAI's tool_calls built from them carry the same strings. The reasoning
// splitter gives the same parts streamed byte by byte as whole, never more bytes than the answer, and with no
// syntax the answer as it is. The call stream (answer_stream.h) gives the same text and calls streamed byte by byte
// as whole.
#include "engine/chat/answer_stream.h"
#include "engine/chat/reasoning.h"
#include "engine/chat/tool_calls.h"
#include "engine/io/json_input.h"
#include "tests/fuzz/fuzz_util.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace {

void check_reasoning(std::string_view answer) {
    using namespace quill::chat;
    for (ReasoningSyntax syntax : {ReasoningSyntax::none, ReasoningSyntax::think, ReasoningSyntax::harmony}) {
        for (bool opened : {false, true}) {
            const SplitAnswer whole = split_reasoning(answer, syntax, opened);
            SplitAnswer streamed;
            ReasoningStream stream(syntax, opened, [&](AnswerPart part, std::string_view text) {
                if (part == AnswerPart::call) (void)harmony_call_text(text);
                (part == AnswerPart::reasoning ? streamed.reasoning : streamed.content).append(text);
            });
            for (size_t i = 0; i < answer.size(); ++i) stream.push(answer.substr(i, 1));
            stream.finish();
            quill::fuzz::check(streamed.reasoning == whole.reasoning && streamed.content == whole.content,
                               "ReasoningStream", "streamed byte by byte, the parts differ from the whole answer's");
            quill::fuzz::check(whole.reasoning.size() + whole.content.size() <= answer.size(), "split_reasoning",
                               "the parts are longer than the answer");
            if (syntax == ReasoningSyntax::none)
                quill::fuzz::check(whole.content == answer, "split_reasoning", "no syntax changed the answer");
            if (syntax == ReasoningSyntax::harmony) (void)parse_tool_calls(whole.content, ToolCallSyntax::harmony);
        }
    }
}

// What a ToolCallStream gives out for `answer` pushed in pieces of `step` bytes: text, and each call as call_display.
std::string stream_calls(std::string_view answer, quill::chat::ToolCallSyntax syntax,
                         const std::vector<std::string>& names, size_t step) {
    using namespace quill::chat;
    std::string out;
    ToolCallStream stream(syntax, names,
                          {nullptr, [&](std::string_view t) { out += t; },
                           [&](const ToolCall& c) { out += "\x01" + call_display(c) + "\x01"; }});
    for (size_t i = 0; i < answer.size(); i += step) stream.push(answer.substr(i, step));
    stream.finish();
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace quill::chat;
    const std::string_view answer(reinterpret_cast<const char*>(data), size);
    check_reasoning(answer);
    const std::vector<std::string> names = {"f", "get_weather", "a", "b"};
    for (ToolCallSyntax syntax :
         {ToolCallSyntax::none, ToolCallSyntax::hermes, ToolCallSyntax::llama3_json, ToolCallSyntax::mistral,
          ToolCallSyntax::mistral_list, ToolCallSyntax::harmony, ToolCallSyntax::qwen3_xml}) {
        const ParsedAnswer parsed = parse_tool_calls(answer, syntax, names);
        quill::fuzz::check(stream_calls(answer, syntax, names, 1) == stream_calls(answer, syntax, names, answer.size() + 1),
                           "ToolCallStream", "streamed byte by byte, the text and calls differ from the whole answer's");
        if (parsed.calls.empty()) {
            quill::fuzz::check(parsed.text == answer, "parse_tool_calls", "an answer without calls changed");
            continue;
        }
        quill::fuzz::check(syntax != ToolCallSyntax::none, "parse_tool_calls", "calls taken with no syntax");
        quill::fuzz::check(parsed.text.size() < answer.size(), "parse_tool_calls", "the text grew");
        for (const ToolCall& c : parsed.calls) {
            quill::fuzz::check(!c.name.empty(), "parse_tool_calls", "a call without a name");
            const auto args = quill::try_parse_untrusted_json(c.arguments);
            quill::fuzz::check(args && args->is_object(), "parse_tool_calls",
                               "arguments that are not a JSON object within the depth limit");
        }
        (void)history_tool_calls(parsed.calls, syntax, size);  // what chat keeps of them: reads them again
        const auto openai = openai_tool_calls(parsed.calls, syntax, size);
        quill::fuzz::check(openai.size() == parsed.calls.size(), "openai_tool_calls", "a call lost");
        for (size_t i = 0; i < openai.size(); ++i)
            quill::fuzz::check(openai[i]["function"]["arguments"] == parsed.calls[i].arguments, "openai_tool_calls",
                               "arguments changed");
    }
    return 0;
}
