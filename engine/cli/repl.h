// `quill chat`: the read-eval-print loop over a Conversation. Input lines are messages or /commands; replies
// stream to `out` as they are sampled; status and stats lines go to `status` (stderr). Multi-line messages: a line
// ending in '\' continues on the next line; a line holding only """ opens a block that the next such line closes;
// a bracketed paste on a terminal is one message.
//
// On a terminal: prompts, history, one dim stats line after each reply; Ctrl-C stops the reply being generated
// (the partial reply stays) or clears the input line, and never exits; Ctrl-D or /exit quits. Not a terminal: one
// message per line (or """ block), each reply followed by a blank line, no prompts, colours or escape codes.
// A reply's tool calls show as "[tool call NAME ARGS]" (ReasoningPrinter::call); /tool RESULT answers them one by
// one, and the reply to the results is a reply as any other (none while a call still waits).
//
// A message or command that fails (the template refuses the conversation, it outgrows the context, a line longer
// than the limit, a file that cannot be read) gets one error line and leaves the conversation as it was; the chat
// goes on. Not on a terminal, a failed message still prints its (empty) reply and blank line, so that replies
// stay paired with messages, and run() returns 1 at the end.
#pragma once

#include "engine/chat/conversation.h"
#include "engine/cli/line_reader.h"
#include "engine/cli/reasoning_printer.h"
#include "engine/io/input.h"
#include "engine/io/output.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <optional>
#include <string>

namespace quill::chat {

struct ReplOptions {
    bool color = false;                        // dim stats lines (terminals only)
    bool quiet = false;                        // no banner and no stats line after each reply
    ReasoningDisplay reasoning = ReasoningDisplay::plain;  // how a reply's reasoning shows before its answer
    std::string model_name;                    // for /save and /show
    size_t max_input_bytes = kDefaultMaxInputBytes;  // the longest message and /load file
    const std::atomic<bool>* cancel = nullptr;  // stops a reply (Ctrl-C); lowered by clear_cancel after each
    std::function<void()> clear_cancel;
    std::function<bool()> should_exit;          // e.g. after SIGTERM
};

class ChatRepl {
public:
    ChatRepl(Conversation& conv, LineReader& in, Output& out, Output& status, ReplOptions options);
    ~ChatRepl();
    ChatRepl(const ChatRepl&) = delete;
    ChatRepl& operator=(const ChatRepl&) = delete;

    // Runs until EOF, /exit or should_exit. Returns the process exit status: 1 when the input is not a terminal
    // and a message or command failed, else 0.
    int run();

    enum class Action { go_on, exit };
    // One complete input: a /command or a message. Public for tests.
    Action handle(const std::string& input);

private:
    struct Entry {
        std::string text;
        bool too_long = false;  // longer than max_input_bytes: read to its end and dropped
    };
    // A whole message or command (continuation lines and """ blocks joined); nullopt at EOF.
    std::optional<Entry> read_input();
    enum class Turn { message, regenerate, tool_result };
    // Generates and prints the reply to `text` (a message, or a tool's result for /tool); for a tool result that
    // leaves other calls waiting, says so and generates nothing.
    void reply(Turn turn, const std::string& text);
    void tool(const std::string& result);
    void command(const std::string& name, const std::string& arg, Action& action);
    void fail(const std::string& message);
    void say(const std::string& text);   // a status line on stderr
    void note(const std::string& text);  // status text; a failure to write it is ignored
    void show();
    void set(const std::string& arg);
    void save(const std::string& path);
    void load(const std::string& path);

    Conversation& conv_;
    LineReader& in_;
    Output& out_;
    Output& status_;
    ReplOptions opt_;
    TurnResult last_;
    bool has_last_ = false;
    bool failed_ = false;  // some message or command failed
};

}  // namespace quill::chat
