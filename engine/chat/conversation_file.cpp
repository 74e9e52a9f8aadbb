#include "engine/chat/conversation_file.h"

#include "engine/error.h"
#include "engine/io/input.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace quill::chat {

namespace fs = std::filesystem;

std::string read_conversation_file(const std::string& path, size_t max_bytes) {
    FileDescriptor fd = open_regular_file(path, "the conversation file");
    return read_capped(fd.get(), path, max_bytes);
}

namespace {

[[noreturn]] void fail(const std::string& path, const char* doing) {
    throw FileError(fmt::format("{}: cannot {}: {}", path, doing, std::strerror(errno)));
}

void write_all(int fd, std::string_view text, const std::string& path) {
    while (!text.empty()) {
        const ssize_t n = ::write(fd, text.data(), text.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(path, "write the file");
        text.remove_prefix(static_cast<size_t>(n));
    }
}

}  // namespace

void write_conversation_file(const std::string& path, std::string_view text) {
    std::error_code ec;
    fs::path target = path;
    if (fs::is_symlink(target, ec)) {
        target = fs::weakly_canonical(target, ec);
        if (ec) throw FileError(fmt::format("{}: cannot follow the link: {}", path, ec.message()));
    }
    struct stat st {};
    const bool exists = ::stat(target.c_str(), &st) == 0;
    if (!exists && errno != ENOENT) fail(path, "write to it");
    if (exists && !S_ISREG(st.st_mode))
        throw FileError(fmt::format("{}: not a regular file: /save writes only files", path));

    // A new file in the same directory (a rename across file systems is not atomic), then rename.
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::string temp;
    int fd = -1;
    std::random_device rd;
    for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
        temp = (dir / fmt::format(".{}.{:08x}.tmp", target.filename().string(), rd())).string();
        fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno == ENOENT)
            throw FileError(fmt::format("{}: the folder {} does not exist", path, dir.string()));
        if (fd < 0 && errno != EEXIST) fail(path, "create a file next to it");
    }
    if (fd < 0) fail(path, "create a file next to it");
    try {
        FileDescriptor owned(fd);
        write_all(fd, text, path);
        if (exists && ::fchmod(fd, st.st_mode & 07777) != 0) fail(path, "keep the file's mode");
        if (::fsync(fd) != 0) fail(path, "write the file");
    } catch (...) {
        ::unlink(temp.c_str());
        throw;
    }
    if (::rename(temp.c_str(), target.c_str()) != 0) {
        const int err = errno;
        ::unlink(temp.c_str());
        errno = err;
        fail(path, "replace the file");
    }
}

}  // namespace quill::chat
