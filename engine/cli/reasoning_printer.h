// A reasoning model's thinking on the terminal, apart from its answer (`run`, `chat`): dim on a terminal; elsewhere
// framed by "Thinking..." and "...done thinking." lines (as `ollama run` frames it); or not shown (--reasoning hide).
// The answer's tool calls show the same way in every syntax: call_display's "[tool call NAME ARGS]" on a line of
// its own, dim where the reasoning is.
#pragma once

#include "engine/chat/tool_calls.h"
#include "engine/io/output.h"

#include <string_view>

namespace quill::chat {

enum class ReasoningDisplay { hide, plain, dim };

// --reasoning VALUE for output to descriptor `fd`: "show" is dim where colours may go to fd (colors_allowed),
// plain elsewhere; "hide". UsageError otherwise.
ReasoningDisplay reasoning_display(std::string_view value, int fd);

class ReasoningPrinter {
public:
    ReasoningPrinter(Output& out, ReasoningDisplay display) : out_(out), display_(display) {}
    void reasoning(std::string_view text);
    // The answer; after reasoning, the reasoning's block is closed and a blank line starts the answer.
    void content(std::string_view text);
    // A tool call of the answer, parsed (after reasoning, as content).
    void call(const ToolCall& call);
    // Closes a reasoning block the reply ended in (cut short). Then the printer starts afresh.
    void finish();
    // Whether the last thing printed (answer, call or reasoning) ended its line: chat then ends the reply without
    // the empty line a second newline would leave.
    bool line_ended() const { return line_ended_; }

private:
    void close();
    Output& out_;
    ReasoningDisplay display_;
    bool in_reasoning_ = false;
    bool line_open_ = false;  // the answer printed so far does not end a line
    bool line_ended_ = false;  // the last bytes printed were a newline (set by content only)
};

}  // namespace quill::chat
