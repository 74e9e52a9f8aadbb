// The limits of one render, charged while the work is done and while values are built (never after), so that no
// template can run long, grow memory or ignore a signal: a deadline, steps (statements, loop iterations, calls,
// and the work inside comparing, sorting, printing and serializing values: a value costs its size), the size of
// every string and list, the bytes of all the values built, and a cancel flag that a signal handler sets.
#pragma once

#include "engine/chat/template.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace quill::chat::jinja {

// A limit ran out; the message names it and ends with "(budget: what and its limit)". The evaluator adds the
// template position and throws TemplateBudgetError.
struct BudgetError {
    std::string message;
};

class Budget {
public:
    explicit Budget(const RenderOptions& options);

    // n units of work. Every few thousand units the clock and the cancel flag are read: past the deadline is a
    // BudgetError, a raised cancel flag throws quill::Interrupted.
    void step(uint64_t n = 1) {
        steps_ += n;
        if (steps_ > max_steps_) steps_exceeded();
        since_check_ += n;
        if (since_check_ >= kCheckEvery) check_clock();
    }
    // Work over n bytes (searching, comparing, copying, case mapping): one step per kBytesPerStep, summed.
    void bytes(size_t n) {
        byte_work_ += n;
        if (byte_work_ >= kBytesPerStep) {
            step(byte_work_ / kBytesPerStep);
            byte_work_ %= kBytesPerStep;
        }
    }
    // n bytes of values built (strings, list and dict slots): counted against the memory limit, and as work.
    void alloc(size_t n) {
        allocated_ += n;
        if (allocated_ > max_alloc_) alloc_exceeded();
        bytes(n);
    }
    // A string of n bytes or a list of n items is about to be built: BudgetError past the limit.
    void check_string(size_t n) const {
        if (n > max_string_) string_exceeded(n);
    }
    void check_list(size_t n) const {
        if (n > max_list_) list_exceeded(n);
    }
    size_t max_string() const { return max_string_; }
    size_t max_list() const { return max_list_; }
    // The clock and the cancel flag, now.
    void check_clock();

    static constexpr uint64_t kCheckEvery = 4096;
    static constexpr size_t kBytesPerStep = 256;

private:
    [[noreturn]] void steps_exceeded() const;
    [[noreturn]] void alloc_exceeded() const;
    [[noreturn]] void string_exceeded(size_t n) const;
    [[noreturn]] void list_exceeded(size_t n) const;

    uint64_t steps_ = 0;
    uint64_t since_check_ = 0;
    size_t byte_work_ = 0;
    size_t allocated_ = 0;
    uint64_t max_steps_;
    size_t max_alloc_;
    size_t max_string_;
    size_t max_list_;
    std::chrono::milliseconds time_limit_;
    std::chrono::steady_clock::time_point deadline_;
    const std::atomic<bool>* cancel_;
};

}  // namespace quill::chat::jinja
