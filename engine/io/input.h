// Input that cannot hang or exhaust memory: files are opened without blocking (a FIFO with no writer, a device)
// and checked for what they are before anything is read, and text input (prompts) is read with a byte limit.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace quill {

// The default limit on prompt text read from a file or stdin (--max-input-bytes raises it).
inline constexpr size_t kDefaultMaxInputBytes = size_t{64} << 20;

// An open file descriptor, closed on destruction.
class FileDescriptor {
public:
    explicit FileDescriptor(int fd) : fd_(fd) {}
    ~FileDescriptor();
    FileDescriptor(FileDescriptor&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    FileDescriptor& operator=(FileDescriptor&&) = delete;
    int get() const { return fd_; }

private:
    int fd_;
};

// Opens a regular file for reading (model, tokenizer): O_NONBLOCK so a FIFO cannot block the open, then fstat.
// FileError "<path>: cannot open <what>: <reason>" or "<path>: <what> is not a regular file (it is a FIFO)".
FileDescriptor open_regular_file(const std::string& path, const char* what);

// Reads a whole descriptor, at most max_bytes. `name` names it in messages ("stdin", a path). A read error is a
// FileError, never empty input; more than max_bytes is a UsageError naming the limit, then `hint`.
// Interrupted reads (EINTR) are retried, unless a SIGINT/SIGTERM asked quill to stop: then Interrupted is thrown.
std::string read_capped(int fd, const std::string& name, size_t max_bytes,
                        std::string_view hint = "--max-input-bytes raises it");

// A text file given on the command line (a prompt, a batch input, --tools): a regular file, a pipe (a shell's
// <(...)), or a character device; never a directory; "-" is stdin. Opening does not block on a FIFO with no writer
// (that reads as empty). At most max_bytes, as read_capped. `what` names the file in errors ("the batch input").
std::string read_prompt_file(const std::string& path, size_t max_bytes, const char* what = "the prompt file");

// "64 MiB", "1.5 KiB", "12 bytes".
std::string format_bytes(size_t bytes);

}  // namespace quill
