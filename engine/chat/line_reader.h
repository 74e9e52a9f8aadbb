// Where chat input comes from: a terminal with line editing and history (libedit), or any other stream read line
// by line (a pipe, a file), with no prompts and no escape codes.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

namespace quill::chat {

struct InputLine {
    enum class Status { line, eof, interrupted } status = Status::eof;
    std::string text;  // without the newline
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

// libedit on the terminal `in`/`out`; history loaded from and saved to `history_path` ("" for none).
std::unique_ptr<LineReader> make_terminal_reader(std::FILE* in, std::FILE* out, const std::string& history_path);
// Plain lines from `in`; lines longer than max_line_bytes are an error.
std::unique_ptr<LineReader> make_stream_reader(std::FILE* in, size_t max_line_bytes = size_t{16} << 20);

// $XDG_STATE_HOME/quill/history, else ~/.local/state/quill/history; "" when neither is known.
std::string default_history_path();

}  // namespace quill::chat
