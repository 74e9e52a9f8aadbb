#include "engine/io/output.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace quill {

namespace {

[[noreturn]] void fail(const std::string& name, const char* what, int err) {
    throw OutputError(fmt::format("cannot {} {}: {}", what, name, std::strerror(err)));
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

}  // namespace quill
