// Where chat input comes from: a terminal with line editing, history and bracketed paste (libedit), or any other
// stream read line by line (a pipe, a file), with no prompts and no escape codes. Both refuse a line longer than a
// cap without holding more than the cap in memory.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

namespace quill::chat {

struct InputLine {
    // too_long: a line longer than the reader's cap, read to its end and dropped (text is empty).
    enum class Status { line, eof, interrupted, too_long } status = Status::eof;
    std::string text;  // without the newline; a paste on a terminal keeps its inner newlines
};

class LineReader {
public:
    virtual ~LineReader() = default;
    // Reads one line, showing `prompt` where there is a terminal. `interrupted` when a signal (Ctrl-C) cut it.
    virtual InputLine read(const std::string& prompt) = 0;
    // Remembers an entered message or command for the history (terminals only).
    virtual void remember(const std::string& /*entry*/) {}
    virtual bool interactive() const = 0;
};

// libedit on the terminal `in`/`out`; history loaded from and saved to `history_path` ("" for none). Sets LC_CTYPE
// to a UTF-8 locale (the environment's when it is one, else C.UTF-8), which libedit needs to accept non-ASCII
// keys. A bracketed paste (ESC[200~ ... ESC[201~) is inserted into the line as one piece, newlines kept; the
// terminal is asked for bracketed pastes only when `out` is one and TERM is not dumb. Between reads (while a reply
// streams) the terminal does not echo keys: they show at the next prompt. A resize while a line is edited redraws it.
std::unique_ptr<LineReader> make_terminal_reader(std::FILE* in, std::FILE* out, const std::string& history_path,
                                                 size_t max_line_bytes);
// Plain lines from `in`.
std::unique_ptr<LineReader> make_stream_reader(std::FILE* in, size_t max_line_bytes);

// $XDG_STATE_HOME/quill/history, else ~/.local/state/quill/history; "" when neither is known.
std::string default_history_path();

}  // namespace quill::chat
