// A fixed set of worker threads for the CPU backend's parallel sections.
//
// Decode runs a hundred or more short parallel sections per token, so a section must start and end in a few
// microseconds: workers spin for a while before they sleep (std::atomic::wait), and the caller works too instead
// of waiting. A section's nth calls are tasks that any thread claims, not calls bound to a thread: when the machine
// has fewer free cores than the pool has threads (other processes, or -t above the core count), the threads that
// are running take the tasks of the ones that are not, and the caller waits only for tasks already under way.
#pragma once

#include <algorithm>
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
    // The CPUs (hardware threads) this process may use: those of its affinity mask, capped by its cgroup's CPU
    // quota; at least 1. A pool larger than this stalls: its threads spin waiting for ones that have no CPU.
    static int available_cpus();

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

// The units [0, n) of a parallel section as one contiguous range per task: task ith takes its range from the front
// a chunk at a time, so its row tiles run in address order across chunks (and the kernels' prefetch of the next
// tile reaches into its next chunk); a task whose range is done takes chunks from the back of the others', so a
// thread slowed by something else on the machine does not hold them up. Chunks handed out in turn from one counter
// (each thread's next chunk somewhere else, its first tile's records cold) were slower than one range per thread
// with no stealing, and slower still with more chunks. Attention's tiles go
// the same way (a chunk of one), so that a thread keeps the same sequences from layer to layer.
class UnitRanges {
public:
    UnitRanges(int64_t n, int n_tasks, int64_t chunk, int64_t align = 1)
        : slots_(static_cast<size_t>(n_tasks)), chunk_(chunk) {
        for (int i = 0; i < n_tasks; ++i) {
            const Range r = split_range(n, i, n_tasks, align);
            slots_[i].span.store(pack(r.begin, r.end), std::memory_order_relaxed);
        }
    }
    // The next units for task ith into *r; false when every range is done.
    bool next(int ith, Range* r) {
        if (take(slots_[ith], true, r)) return true;
        const int n = static_cast<int>(slots_.size());
        for (int i = 1; i < n; ++i)
            if (take(slots_[(ith + i) % n], false, r)) return true;
        return false;
    }

private:
    struct alignas(64) Slot {
        std::atomic<uint64_t> span{0};  // begin | end << 32
    };
    static uint64_t pack(int64_t begin, int64_t end) {
        return static_cast<uint64_t>(begin) | static_cast<uint64_t>(end) << 32;
    }
    bool take(Slot& s, bool front, Range* r) const {
        uint64_t v = s.span.load(std::memory_order_relaxed);
        for (;;) {
            const auto b = static_cast<int64_t>(v & 0xffffffffu), e = static_cast<int64_t>(v >> 32);
            if (b >= e) return false;
            const int64_t k = std::min(chunk_, e - b);
            const uint64_t taken = front ? pack(b + k, e) : pack(b, e - k);
            if (s.span.compare_exchange_weak(v, taken, std::memory_order_acq_rel, std::memory_order_relaxed)) {
                *r = front ? Range{b, b + k} : Range{e - k, e};
                return true;
            }
        }
    }
    std::vector<Slot> slots_;
    int64_t chunk_;
};

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
