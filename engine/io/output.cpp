#include "engine/io/output.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace quill {

namespace {

[[noreturn]] void fail(const std::string& name, const char* what, int err) {
    throw OutputError(fmt::format("cannot {} {}: {}", what, name, std::strerror(err)), err);
}

}  // namespace

void Output::write(std::string_view text) {
    if (text.empty()) return;
    errno = 0;
    if (std::fwrite(text.data(), 1, text.size(), f_) != text.size() || std::ferror(f_)) {
        const int err = errno ? errno : EIO;
        std::clearerr(f_);
        fail(name_, "write to", err);
    }
}

void Output::flush() {
    errno = 0;
    if (std::fflush(f_) != 0 || std::ferror(f_)) {
        const int err = errno ? errno : EIO;
        std::clearerr(f_);
        fail(name_, "write to", err);
    }
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

void reserve_standard_descriptors() noexcept {
    for (int fd = 0; fd <= 2; ++fd) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        const int got = ::open("/dev/null", (fd == STDIN_FILENO ? O_WRONLY : O_RDONLY));  // lowest free: fd itself
        if (got >= 0 && got != fd) ::close(got);
    }
}

}  // namespace quill
