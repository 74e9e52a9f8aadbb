// A fixed set of worker threads for the CPU backend's parallel sections.
//
// Decode runs a hundred or more short parallel sections per token, so a section must start and end in a few
// microseconds: workers spin for a while before they sleep (std::atomic::wait), and the caller works too instead
// of waiting. A section's nth calls are tasks that any thread claims, not calls bound to a thread: when the machine
// has fewer free cores than the pool has threads (other processes, or -t above the core count), the threads that
// are running take the tasks of the ones that are not, and the caller waits only for tasks already under way.
#pragma once

#include <atomic>
#include <cstdint>
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
    // Runs fn(ith, nth) for every ith in [0, nth), nth = size(), each call once and on any of the pool's threads
    // (the caller's included); two calls with one ith never overlap, so ith may index per-thread scratch. Returns
    // when every call has returned. Not reentrant: fn must not call run().
    void run(const std::function<void(int ith, int nth)>& fn);

    // The cores this process may use: the physical cores (distinct package and core ids) among the CPUs of its
    // affinity mask, capped by its cgroup's CPU quota (cpu.max); at least 1.
    static int physical_cores();

private:
    void worker();
    // Claims and runs tasks of the current section until none is left unclaimed.
    void run_tasks();

    int n_threads_;
    std::vector<std::thread> threads_;
    const std::function<void(int, int)>* job_ = nullptr;
    // The section's generation (high 32 bits) and the next unclaimed task (low 32 bits): one word, so that a claim
    // (compare-exchange) can only take a task of the section currently published.
    std::atomic<uint64_t> state_{0};
    std::atomic<int> done_{0};  // tasks of the current section that have returned
    std::atomic<bool> stop_{false};
};

// Splits [0, n) into nth nearly equal ranges, rounded to multiples of `align`; returns thread ith's range.
struct Range {
    int64_t begin, end;
};
Range split_range(int64_t n, int ith, int nth, int64_t align = 1);

// work(begin, end) over [0, n) in pieces of `grain` that the pool's threads claim one after another, so that a
// thread slowed by what it touches (a VM's first touch of a page) is not waited for with a fixed share of the work.
void run_claimed(ThreadPool& pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& work);

// work(begin, end) over [0, n) a chunk of `chunk` at a time, each chunk's pieces claimed by the pool's threads
// (run_claimed; the caller alone when pool is null or has one thread), and done(begin, end) after each chunk, in
// order (a long job that reports its progress: packing or copying weights, each chunk's file pages handed back
// when done).
void run_chunks(ThreadPool* pool, int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& work,
                const std::function<void(int64_t, int64_t)>& done);

}  // namespace quill::cpu
