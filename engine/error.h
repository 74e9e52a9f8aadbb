// quill::Error and QUILL_CHECK: every failure the user can cause is an exception with a message that names the
// thing and says what was expected; main() catches once and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace quill {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A file (model, tokenizer, prompt) is malformed or unreadable.
class FileError : public Error {
public:
    using Error::Error;
};

// A user-supplied value (flag, prompt, request) is out of range.
class UsageError : public Error {
public:
    using Error::Error;
};

// The user asked quill to stop (SIGINT, SIGTERM) before the work could finish; main exits 128 + the signal.
class Interrupted : public Error {
public:
    using Error::Error;
};

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace quill

// Invariant check, always on. The message is a fmt format string with arguments.
#define QUILL_CHECK(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) ::quill::check_failed(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    } while (0)
