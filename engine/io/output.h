// Output that cannot fail silently: every write and flush is checked, and a failure (a closed pipe, a full disk,
// a closed descriptor) is an OutputError naming the stream, so the command stops and exits non-zero instead of
// losing its output. Diagnostics on stderr are the opposite: they never fail (print_stderr).
#pragma once

#include "engine/error.h"

#include <cstdio>
#include <string>
#include <string_view>

namespace quill {

class OutputError : public Error {
public:
    OutputError(const std::string& message, int err) : Error(message), errno_(err) {}
    // The errno of the failed write; EPIPE means the reader went away (`quill run | head`).
    int error_number() const { return errno_; }

private:
    int errno_;
};

// Bytes go straight to the stream's descriptor with write(2), kept in a buffer of up to 64 KiB between flushes: a
// signal arriving during a blocked write (SIGINT while a slow reader holds up a pipe) retries the write instead of
// losing the bytes stdio had buffered. Whatever the stream's stdio buffer holds is flushed first.
class Output {
public:
    // `name` is for messages ("stdout", a file path). The stream is not owned.
    Output(std::FILE* stream, std::string name) : f_(stream), name_(std::move(name)) {}
    // Writes what is still buffered, ignoring failures (call flush() to see them).
    ~Output();
    Output(const Output&) = delete;
    Output& operator=(const Output&) = delete;

    // Buffers the bytes (writing them out once 64 KiB are pending); OutputError on failure.
    void write(std::string_view text);
    // Writes out everything buffered; OutputError on failure.
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
    std::string pending_;
};

// Writes a line to stderr without throwing (used by the error handler itself; a closed stderr is ignored).
void print_stderr_noexcept(std::string_view text) noexcept;

// Formats and writes to stderr; never throws. Progress lines, warnings and error messages all go through this, so a
// closed or full stderr (`2>&-`, `2>/dev/full`) loses the diagnostics but never changes what quill does.
template <class... Args>
void print_stderr(fmt::format_string<Args...> format, Args&&... args) noexcept {
    try {
        print_stderr_noexcept(fmt::format(format, std::forward<Args>(args)...));
    } catch (...) {  // formatting ran out of memory: there is nothing better to do with a diagnostic
    }
}

// TERM is "dumb": a terminal that shows escape codes as text.
bool dumb_terminal() noexcept;

// Whether colour escape codes may go to descriptor `fd`: a terminal, NO_COLOR unset or empty (no-color.org), and
// TERM not "dumb" (a terminal that shows escape codes as text).
bool colors_allowed(int fd) noexcept;

// Makes sure descriptors 0, 1 and 2 are open, so that no file quill opens later lands on them: a closed one
// becomes /dev/null opened in the opposite direction, so reads of a closed stdin and writes to a closed stdout
// still fail (EBADF) as they would have, instead of touching a model file. Call first thing in main.
void reserve_standard_descriptors() noexcept;

}  // namespace quill
