// A fixed set of worker threads for the CPU backend's parallel sections.
//
// Decode runs a hundred or more short parallel sections per token, so a section must start and end in a few
// microseconds: workers spin on an atomic generation counter for a while before they sleep (std::atomic::wait),
// and the caller works as thread 0 instead of waiting.
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace quill::cpu {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Runs fn(ith, nth) for ith in [0, nth) with nth = size(), one call per thread; the caller runs ith = 0.
    // Returns when every call has returned. Not reentrant: fn must not call run().
    void run(const std::function<void(int ith, int nth)>& fn);

    // The physical core count of this machine (at least 1).
    static int physical_cores();

private:
    void worker(int ith);

    int n_threads_;
    std::vector<std::thread> threads_;
    const std::function<void(int, int)>* job_ = nullptr;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
};

// Splits [0, n) into nth nearly equal ranges, rounded to multiples of `align`; returns thread ith's range.
struct Range {
    int64_t begin, end;
};
Range split_range(int64_t n, int ith, int nth, int64_t align = 1);

}  // namespace quill::cpu
