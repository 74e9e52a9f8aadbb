// Output that cannot fail silently: every write and flush is checked, and a failure (a closed pipe, a full disk,
// a closed descriptor) is an OutputError naming the stream, so the command stops and exits non-zero instead of
// losing its output.
#pragma once

#include "engine/error.h"

#include <cstdio>
#include <string>
#include <string_view>

namespace quill {

class OutputError : public Error {
public:
    using Error::Error;
};

class Output {
public:
    // `name` is for messages ("stdout", a file path). The stream is not owned.
    Output(std::FILE* stream, std::string name) : f_(stream), name_(std::move(name)) {}

    // Writes all bytes; OutputError on failure.
    void write(std::string_view text);
    // Flushes the stream; OutputError on failure.
    void flush();
    // write + flush.
    void put(std::string_view text) {
        write(text);
        flush();
    }
    const std::string& name() const { return name_; }

private:
    std::FILE* f_;
    std::string name_;
};

// Writes a line to stderr without throwing (used by the error handler itself; a closed stderr is ignored).
void print_stderr_noexcept(std::string_view text) noexcept;

}  // namespace quill
