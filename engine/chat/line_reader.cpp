#include "engine/chat/line_reader.h"

#include "engine/error.h"

#include <histedit.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

namespace quill::chat {

namespace {

class TerminalReader final : public LineReader {
public:
    TerminalReader(std::FILE* in, std::FILE* out, std::string history_path) : history_path_(std::move(history_path)) {
        el_ = el_init("quill", in, out, stderr);
        hist_ = history_init();
        if (!el_ || !hist_) throw Error("cannot start line editing (libedit)");
        HistEvent ev;
        history(hist_, &ev, H_SETSIZE, 1000);
        history(hist_, &ev, H_SETUNIQUE, 1);
        el_set(el_, EL_CLIENTDATA, this);
        el_set(el_, EL_PROMPT, &TerminalReader::prompt_of);
        el_set(el_, EL_EDITOR, "emacs");
        el_set(el_, EL_HIST, history, hist_);
        if (!history_path_.empty()) history(hist_, &ev, H_LOAD, history_path_.c_str());
    }
    ~TerminalReader() override {
        history_end(hist_);
        el_end(el_);
    }

    InputLine read(const std::string& prompt) override {
        prompt_ = prompt;
        int count = 0;
        errno = 0;
        const char* line = el_gets(el_, &count);
        InputLine r;
        if (!line) {
            r.status = (count < 0 && errno == EINTR) ? InputLine::Status::interrupted : InputLine::Status::eof;
            if (r.status == InputLine::Status::interrupted) el_reset(el_);
            return r;
        }
        r.status = InputLine::Status::line;
        r.text.assign(line, static_cast<size_t>(count));
        while (!r.text.empty() && (r.text.back() == '\n' || r.text.back() == '\r')) r.text.pop_back();
        return r;
    }

    void remember(const std::string& entry) override {
        if (entry.empty()) return;
        HistEvent ev;
        history(hist_, &ev, H_ENTER, entry.c_str());
        if (history_path_.empty()) return;
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(history_path_).parent_path(), ec);
        history(hist_, &ev, H_SAVE, history_path_.c_str());
    }

    bool interactive() const override { return true; }

private:
    static char* prompt_of(EditLine* el) {
        void* self = nullptr;
        el_get(el, EL_CLIENTDATA, &self);
        return static_cast<TerminalReader*>(self)->prompt_.data();
    }

    EditLine* el_ = nullptr;
    History* hist_ = nullptr;
    std::string history_path_;
    std::string prompt_;
};

class StreamReader final : public LineReader {
public:
    StreamReader(std::FILE* in, size_t max_line) : in_(in), max_line_(max_line) {}

    InputLine read(const std::string& /*prompt*/) override {
        InputLine r;
        std::string line;
        for (;;) {
            errno = 0;
            const int c = std::getc(in_);
            if (c == EOF) {
                if (std::ferror(in_)) {
                    std::clearerr(in_);
                    if (errno == EINTR) {
                        r.status = InputLine::Status::interrupted;
                        return r;
                    }
                    throw Error("cannot read the chat input: read error");
                }
                if (line.empty()) return r;  // eof
                break;
            }
            if (c == '\n') break;
            line.push_back(static_cast<char>(c));
            if (line.size() > max_line_)
                throw UsageError(fmt::format("a chat input line is longer than {} bytes", max_line_));
        }
        if (!line.empty() && line.back() == '\r') line.pop_back();
        r.status = InputLine::Status::line;
        r.text = std::move(line);
        return r;
    }

    bool interactive() const override { return false; }

private:
    std::FILE* in_;
    size_t max_line_;
};

}  // namespace

std::unique_ptr<LineReader> make_terminal_reader(std::FILE* in, std::FILE* out, const std::string& history_path) {
    return std::make_unique<TerminalReader>(in, out, history_path);
}

std::unique_ptr<LineReader> make_stream_reader(std::FILE* in, size_t max_line_bytes) {
    return std::make_unique<StreamReader>(in, max_line_bytes);
}

std::string default_history_path() {
    namespace fs = std::filesystem;
    if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state)
        return (fs::path(state) / "quill" / "history").string();
    if (const char* home = std::getenv("HOME"); home && *home)
        return (fs::path(home) / ".local" / "state" / "quill" / "history").string();
    return {};
}

}  // namespace quill::chat
