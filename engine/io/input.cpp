#include "engine/io/input.h"

#include "engine/error.h"
#include "engine/io/signals.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace quill {

namespace {

const char* kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a special file";
}

// Opens without blocking and stats; FileError when either fails.
FileDescriptor open_nonblocking(const std::string& path, const char* what, struct stat& st) {
    FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    if (fd.get() < 0) throw FileError(fmt::format("{}: cannot open {}: {}", path, what, std::strerror(errno)));
    if (fstat(fd.get(), &st) != 0)
        throw FileError(fmt::format("{}: cannot stat {}: {}", path, what, std::strerror(errno)));
    return fd;
}

}  // namespace

FileDescriptor::~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
}

FileDescriptor open_regular_file(const std::string& path, const char* what) {
    struct stat st {};
    FileDescriptor fd = open_nonblocking(path, what, st);
    if (!S_ISREG(st.st_mode))
        throw FileError(fmt::format("{}: {} is not a regular file (it is {})", path, what, kind_of(st.st_mode)));
    return fd;
}

std::string read_capped(int fd, const std::string& name, size_t max_bytes, std::string_view hint) {
    std::string out;
    char buf[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n == 0) return out;
        if (n < 0) {
            if (errno == EINTR && !signals::stop_flag().load(std::memory_order_relaxed)) continue;
            if (errno == EINTR) throw Interrupted(fmt::format("interrupted while reading {}", name));
            throw FileError(fmt::format("{}: cannot read: {}", name, std::strerror(errno)));
        }
        if (out.size() + static_cast<size_t>(n) > max_bytes)
            throw UsageError(
                fmt::format("{}: the input is longer than the limit of {} ({})", name, format_bytes(max_bytes), hint));
        out.append(buf, static_cast<size_t>(n));
    }
}

std::string read_prompt_file(const std::string& path, size_t max_bytes, const char* what) {
    if (path == "-") return read_capped(STDIN_FILENO, "stdin", max_bytes);
    struct stat st {};
    FileDescriptor fd = open_nonblocking(path, what, st);
    if (S_ISDIR(st.st_mode)) throw FileError(fmt::format("{}: {} is a directory", path, what));
    // Blocking reads from here: a pipe with a writer delivers all it writes (one without reads as empty).
    const int flags = fcntl(fd.get(), F_GETFL);
    if (flags < 0 || fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
        throw FileError(fmt::format("{}: cannot read {}: {}", path, what, std::strerror(errno)));
    return read_capped(fd.get(), path, max_bytes);
}

std::string format_bytes(size_t bytes) {
    if (bytes < 1024) return fmt::format("{} bytes", bytes);
    const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = -1;
    while (v >= 1024 && u < 3) {
        v /= 1024;
        ++u;
    }
    return v == static_cast<double>(static_cast<uint64_t>(v)) ? fmt::format("{:.0f} {}", v, units[u])
                                                              : fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace quill
