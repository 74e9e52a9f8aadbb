// A reply as it streams, in the parts a terminal shows (chat, run): its reasoning, its text, and its tool calls,
// each call taken out of the text once it is whole and parsed, whatever the template's syntax. The parsing is
// tool_calls.h's: what is not a well-formed call stays text, as it was written.
#pragma once

#include "engine/chat/reasoning.h"
#include "engine/chat/tool_calls.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace quill::chat {

// Where the parts go; a null sink drops its part.
struct AnswerSinks {
    std::function<void(std::string_view)> reasoning;
    std::function<void(std::string_view)> text;
    std::function<void(const ToolCall&)> call;
};

// The content of a reply (reasoning already apart) streamed in pieces, its calls in `syntax` taken out:
//   hermes, qwen3_xml  text streams up to "<tool_call>"; the block is held to its "</tool_call>", then is a call
//                      when parse_tool_calls reads it as exactly one, else text; the text after it streams again
//   mistral(_list)     text streams up to "[TOOL_CALLS]"; the rest, held to the end, gives its calls and then
//                      whatever of it is not a call
//   llama3_json        an answer that starts (after white space) with "{" or "<|python_tag|>" is held to the end and
//                      is one call to one of `tool_names` or text; any other answer streams
//   harmony, none      the text streams; push_call takes harmony's call messages (ReasoningStream's AnswerPart::call)
// A text piece may be cut anywhere (a marker split across pieces is held until it is whole).
class ToolCallStream {
public:
    ToolCallStream(ToolCallSyntax syntax, std::vector<std::string> tool_names, AnswerSinks sinks);
    void push(std::string_view text);
    // A harmony message to a recipient, markers and all: a call when it is a well-formed one, else its text less
    // its markers (harmony_call_text).
    void push_call(std::string_view message);
    // The held rest: an unclosed block is text. Call once at the end.
    void finish();

private:
    enum class State { start, text, block, held_to_end };
    void emit_text(std::string_view text);
    // Gives out `held` as parse_tool_calls reads it: its calls, then its text (all of it when there is no call).
    void emit_parsed(std::string_view held);

    ToolCallSyntax syntax_;
    std::vector<std::string> tool_names_;
    AnswerSinks sinks_;
    State state_;
    std::string pending_;  // text not yet given out
};

// A whole reply streamed: ReasoningStream splits the reasoning off, ToolCallStream the calls of the content, for a
// request whose template variables are `vars` (calls are looked for as request_tool_calls looks for them).
class AnswerStream {
public:
    AnswerStream(ReasoningSyntax reasoning, bool opened_think, ToolCallSyntax syntax, const nlohmann::ordered_json& vars,
                 AnswerSinks sinks);
    void push(std::string_view text);
    // Call once at the end.
    void finish();
    // The reply's reasoning and content (harmony calls in it as they were written), as split_reasoning gives them.
    const SplitAnswer& answer() const { return answer_; }
    // The content's calls, as request_tool_calls reads them (after finish).
    ParsedAnswer calls() const;

private:
    ToolCallSyntax syntax_;  // request_call_syntax's
    std::vector<std::string> tool_names_;
    SplitAnswer answer_;
    std::function<void(std::string_view)> on_reasoning_;
    ToolCallStream calls_;
    ReasoningStream split_;
};

}  // namespace quill::chat
