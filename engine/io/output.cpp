#include "engine/io/output.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace quill {

namespace {

[[noreturn]] void fail(const std::string& name, const char* what, int err) {
    throw OutputError(fmt::format("cannot {} {}: {}", what, name, std::strerror(err)), err);
}

}  // namespace

Output::~Output() {
    try {
        flush();
    } catch (...) {  // the command failed already, or did not care; nothing more can be done here
    }
}

void Output::write(std::string_view text) {
    pending_.append(text);
    if (pending_.size() >= (size_t{1} << 16)) flush();
}

void Output::flush() {
    errno = 0;
    if (std::fflush(f_) != 0) {
        const int err = errno ? errno : EIO;
        std::clearerr(f_);
        pending_.clear();
        fail(name_, "write to", err);
    }
    std::string_view rest = pending_;
    while (!rest.empty()) {
        const ssize_t n = ::write(fileno(f_), rest.data(), rest.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EIO;
            pending_.clear();
            fail(name_, "write to", err);
        }
        rest.remove_prefix(static_cast<size_t>(n));
    }
    pending_.clear();
}

void print_stderr_noexcept(std::string_view text) noexcept {
    while (!text.empty()) {
        const ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            return;
        }
        text.remove_prefix(static_cast<size_t>(n));
    }
}

bool dumb_terminal() noexcept {
    const char* term = std::getenv("TERM");
    return term && std::strcmp(term, "dumb") == 0;
}

bool colors_allowed(int fd) noexcept {
    const char* no_color = std::getenv("NO_COLOR");
    return isatty(fd) && !(no_color && *no_color) && !dumb_terminal();
}

void reserve_standard_descriptors() noexcept {
    for (int fd = 0; fd <= 2; ++fd) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        const int got = ::open("/dev/null", (fd == STDIN_FILENO ? O_WRONLY : O_RDONLY));  // lowest free: fd itself
        if (got >= 0 && got != fd) ::close(got);
    }
}

}  // namespace quill
