// Helpers for the fault and bad-input tests: running the quill binary with chosen standard descriptors (closed,
// /dev/full, a pipe), with a deadline so that a hang fails the test instead of stalling it; and rewriting a GGUF
// file with changed metadata or tensor bytes.
#pragma once

#include "engine/format/gguf.h"

#include <functional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace quill::test {

// Descriptors a child gets as 0, 1 and 2; -1: closed.
struct ChildIo {
    int in = -1, out = -1, err = -1;
};
// Starts the quill binary (fork + exec). `env` adds NAME=VALUE entries to the environment.
pid_t spawn_quill(const std::vector<std::string>& args, const ChildIo& io, const std::vector<std::string>& env = {});
// Waits at most timeout_s. The exit status, 128 + the signal that killed it, or -1 after killing a child that ran
// past the deadline.
int wait_child(pid_t pid, double timeout_s);
// Reads a descriptor to its end.
std::string read_all(int fd);

// A pipe whose buffer is full: the next write to it blocks until the reader drains it. Returns the filler size.
size_t make_full_pipe(int fds[2]);
// Waits until the child's main thread is blocked in the system call `nr` (SYS_write, SYS_read) on `fd`. False
// when /proc/<pid>/syscall cannot be read (then the caller skips) or the child ended first.
bool wait_blocked_in(long nr, pid_t pid, int fd, bool& supported);
bool wait_blocked_in_write(pid_t pid, int fd, bool& supported);

// One run with each standard descriptor given as a spec: "" captures (stdout, stderr) or is empty input (stdin);
// "<closed>" leaves it closed; anything else is a path opened for reading (stdin) or writing.
struct Outcome {
    int status = -1;
    std::string out, err;
};
Outcome run_io(const std::vector<std::string>& args, const std::string& in, const std::string& out,
               const std::string& err, double timeout_s = 30);

// The last stderr line, and how many lines mention "error".
std::string last_line(const std::string& text);
int count_errors(const std::string& text);

// Copies a GGUF file with `edit` applied to its metadata writer and tensor bytes (name -> mutable bytes).
void rewrite_gguf(const std::string& src, const std::string& dst,
                  const std::function<void(GgufWriter&)>& edit_metadata,
                  const std::function<void(const std::string& name, std::vector<uint8_t>& bytes)>& edit_tensor = {});

}  // namespace quill::test
