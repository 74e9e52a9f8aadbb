#include "engine/cli/line_reader.h"

#include "engine/error.h"
#include "engine/io/output.h"
#include "engine/io/signals.h"
#include "engine/io/utf8.h"

#include <histedit.h>

#include <cerrno>
#include <clocale>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <langinfo.h>
#include <termios.h>
#include <unistd.h>

namespace quill::chat {

namespace {

// libedit decodes keys with the LC_CTYPE locale, and in "C" (a program's locale until it calls setlocale) it drops
// every non-ASCII byte. A terminal sends UTF-8, so: the environment's locale when it is UTF-8, else C.UTF-8.
bool use_utf8_ctype() {
    for (const char* name : {"", "C.UTF-8", "C.utf8", "en_US.UTF-8"})
        if (std::setlocale(LC_CTYPE, name) && std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0) return true;
    return false;
}

size_t utf8_length(wchar_t c) {
    const auto u = static_cast<uint32_t>(c);
    return u < 0x80 ? 1 : u < 0x800 ? 2 : u < 0x10000 ? 3 : 4;
}

// Bracketed paste: a terminal told ESC[?2004h wraps pasted text in these, so that its newlines do not send it.
constexpr const char* kPasteOn = "\033[?2004h";
constexpr const char* kPasteOff = "\033[?2004l";
constexpr const char* kPasteStart = "\033[200~";
constexpr std::wstring_view kPasteEnd = L"\033[201~";

class TerminalReader final : public LineReader {
public:
    TerminalReader(std::FILE* in, std::FILE* out, std::string history_path, size_t max_line)
        : in_fd_(fileno(in)), out_(out), history_path_(std::move(history_path)), max_line_(max_line) {
        if (!use_utf8_ctype())
            print_stderr("quill: warning: no UTF-8 locale (C.UTF-8) here: non-ASCII keys will be lost\n");
        paste_ = isatty(fileno(out)) && !dumb_terminal();
        el_ = el_init("quill", in, out, stderr);
        hist_ = history_init();
        if (!el_ || !hist_) throw Error("cannot start line editing (libedit)");
        HistEvent ev;
        history(hist_, &ev, H_SETSIZE, 1000);
        history(hist_, &ev, H_SETUNIQUE, 1);
        el_set(el_, EL_CLIENTDATA, this);
        el_set(el_, EL_PROMPT, &TerminalReader::prompt_of);
        el_set(el_, EL_EDITOR, "emacs");
        el_set(el_, EL_GETCFN, &TerminalReader::read_key);
        el_set(el_, EL_HIST, history, hist_);
        // el_wset keeps these static wide strings; el_set would store wide copies that el_end never frees.
        el_wset(el_, EL_ADDFN, L"quill-paste", L"Insert a bracketed paste as it is", &TerminalReader::paste);
        el_set(el_, EL_BIND, kPasteStart, "quill-paste", nullptr);
        if (!history_path_.empty()) history(hist_, &ev, H_LOAD, history_path_.c_str());
        // On from here to the end, also while replies stream: a block pasted before the prompt is back stays
        // bracketed, and is one message, not a message a line.
        if (paste_) terminal_mode(kPasteOn);
    }
    ~TerminalReader() override {
        echo_typeahead(true);
        if (paste_) terminal_mode(kPasteOff);
        history_end(hist_);
        el_end(el_);
    }

    InputLine read(const std::string& prompt) override {
        prompt_ = prompt;
        paste_too_long_ = false;
        int count = 0;
        errno = 0;
        echo_typeahead(true);
        signals::watch_resize(true);
        const char* line = el_gets(el_, &count);
        const int read_errno = errno;
        signals::watch_resize(false);
        echo_typeahead(false);
        InputLine r;
        if (!line) {
            r.status = (count < 0 && read_errno == EINTR) ? InputLine::Status::interrupted : InputLine::Status::eof;
            if (r.status == InputLine::Status::interrupted) el_reset(el_);
            return r;
        }
        if (paste_too_long_ || static_cast<size_t>(count) > max_line_ + 1) {
            r.status = InputLine::Status::too_long;
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
    static TerminalReader& self_of(EditLine* el) {
        void* self = nullptr;
        el_get(el, EL_CLIENTDATA, &self);
        return *static_cast<TerminalReader*>(self);
    }
    static char* prompt_of(EditLine* el) { return self_of(el).prompt_.data(); }

    // libedit's key reader: the next UTF-8 character from the terminal, an ill-formed sequence as U+FFFD. A resize
    // (SIGWINCH) while the line is edited is taken in place: libedit learns the new width and redraws the line.
    // 1, or 0 at EOF, or -1 with errno (EINTR for Ctrl-C).
    static int read_key(EditLine* el, wchar_t* key) {
        TerminalReader& self = self_of(el);
        std::string& bytes = self.key_bytes_;
        for (;;) {
            if (!bytes.empty()) {
                const utf8::Scan scan = utf8::scan(bytes);
                if (scan.kind != utf8::Scan::incomplete) {
                    size_t at = 0;
                    *key = static_cast<wchar_t>(utf8::next(bytes, at));
                    bytes.erase(0, scan.length);
                    return 1;
                }
            }
            // A Ctrl-C that came while no read was blocked (the line being drawn, a busy machine) is taken here,
            // before the keys typed after it: else they would join the line it was meant to clear.
            if (signals::stop_flag().load()) {
                bytes.clear();
                *key = L'\0';
                errno = EINTR;
                return -1;
            }
            char byte = 0;
            const ssize_t n = ::read(self.in_fd_, &byte, 1);
            if (n == 1) {
                bytes.push_back(byte);
                continue;
            }
            if (n < 0 && errno == EINTR && signals::take_resize()) {
                el_resize(el);
                el_set(el, EL_REFRESH);
                continue;
            }
            bytes.clear();
            *key = L'\0';
            return n == 0 ? 0 : -1;
        }
    }

    // Bound to ESC[200~: reads up to ESC[201~ and inserts the text at the cursor, its line ends as '\n' (terminals
    // send '\r'). Longer than the cap: the rest is read and dropped, and the line ends as too long.
    static unsigned char paste(EditLine* el, int /*key*/) {
        TerminalReader& self = self_of(el);
        std::wstring text;
        size_t bytes = 0;
        for (wchar_t c; el_wgetc(el, &c) == 1;) {
            if (!self.paste_too_long_) bytes += utf8_length(c);
            if (bytes > self.max_line_ && !self.paste_too_long_) {
                self.paste_too_long_ = true;
                text.clear();
            }
            text.push_back(c);
            if (text.ends_with(kPasteEnd)) {
                text.resize(text.size() - kPasteEnd.size());
                break;
            }
            if (self.paste_too_long_ && text.size() >= kPasteEnd.size())  // keep only what may begin the end mark
                text.erase(0, text.size() - kPasteEnd.size() + 1);
        }
        if (self.paste_too_long_) return CC_NEWLINE;
        std::wstring lines;
        for (size_t i = 0; i < text.size(); ++i) {
            if (text[i] != L'\r') {
                if (text[i] != L'\0') lines.push_back(text[i]);
            } else if (i + 1 >= text.size() || text[i + 1] != L'\n') {
                lines.push_back(L'\n');
            }
        }
        if (!lines.empty() && el_winsertstr(el, lines.c_str()) != 0) return CC_ERROR;
        return CC_REFRESH;
    }

    // Keys typed while a reply streams: with the terminal's echo off they wait, unseen, for the next prompt, which
    // shows them, instead of being echoed into the middle of the reply. Off from the end of one read to the start
    // of the next, and back as it was at the end.
    void echo_typeahead(bool on) {
        termios mode{};
        if (tcgetattr(in_fd_, &mode) != 0) return;
        const tcflag_t before = mode.c_lflag;
        if (on) {
            mode.c_lflag |= echo_flags_;
            echo_flags_ = 0;
        } else {
            echo_flags_ |= mode.c_lflag & (ECHO | ECHONL);
            mode.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHONL);
        }
        if (mode.c_lflag != before) tcsetattr(in_fd_, TCSANOW, &mode);
    }

    void terminal_mode(const char* sequence) {
        std::fputs(sequence, out_);
        std::fflush(out_);
    }

    int in_fd_;
    std::string key_bytes_;  // bytes read of a character not yet complete, or after an ill-formed one
    EditLine* el_ = nullptr;
    History* hist_ = nullptr;
    std::FILE* out_;
    std::string history_path_;
    size_t max_line_;
    std::string prompt_;
    tcflag_t echo_flags_ = 0;       // the echo flags echo_typeahead(false) turned off
    bool paste_ = true;             // the terminal is told to bracket pastes
    bool paste_too_long_ = false;   // the paste of the line being read passed max_line_
};

class StreamReader final : public LineReader {
public:
    StreamReader(std::FILE* in, size_t max_line) : in_(in), max_line_(max_line) {}

    InputLine read(const std::string& /*prompt*/) override {
        InputLine r;
        std::string line;
        bool too_long = false;
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
                if (line.empty() && !too_long) return r;  // eof
                break;
            }
            if (c == '\n') break;
            if (too_long) continue;  // read to the end of the line, keeping nothing
            line.push_back(static_cast<char>(c));
            if (line.size() > max_line_) {
                too_long = true;
                std::string().swap(line);
            }
        }
        if (too_long) {
            r.status = InputLine::Status::too_long;
            return r;
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

std::unique_ptr<LineReader> make_terminal_reader(std::FILE* in, std::FILE* out, const std::string& history_path,
                                                 size_t max_line_bytes) {
    return std::make_unique<TerminalReader>(in, out, history_path, max_line_bytes);
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
