// Progress of `quill batch` on stderr: a live line redrawn in place while stderr is a terminal, and a final
// summary line always (unless quiet).
#pragma once

#include "engine/batch/runner.h"

#include <chrono>
#include <string>

namespace quill::batch {

// "12/64 done, 1 error | prompt 523 tok/s | generated 85.3 tok/s | ETA 1m05s"
std::string progress_line(const BatchProgress& p);
// "quill: batch: 64 requests, 1 error, ... | 8192 generated tokens | 95.3 s | 86.0 generated tok/s ..."
std::string summary_line(const BatchProgress& p);
// "quill: shard 2/3 takes 5 of 16 requests: 2, 5, 8, 11, 14 (ids line-2 to line-14)", requests counted from 1.
std::string shard_line(const BatchInput& input, const Shard& shard);
// "quill: 2 of 200 requests failed (error records in out.jsonl)"
std::string failures_line(size_t failed, size_t total, const std::string& output_name);

// Whether two descriptors are one terminal (stdout and stderr on the same tty: a live line on stderr must be cleared
// before a record goes to stdout, or the record starts where the line ends).
bool same_terminal(int fd_a, int fd_b);

class ProgressReporter {
public:
    // live: redraw a line on stderr (when it is a terminal); quiet: print nothing at all.
    ProgressReporter(bool live, bool quiet) : live_(live && !quiet), quiet_(quiet) {}
    // Redraws the live line, at most a few times a second.
    void update(const BatchProgress& p);
    // Clears the live line, if drawn; the next update draws it again.
    void clear();
    // Clears the live line and prints the summary.
    void finish(const BatchProgress& p);

private:
    bool live_, quiet_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point last_{};
};

}  // namespace quill::batch
