#include "engine/cpu/thread_pool.h"

#include "engine/error.h"

#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QUILL_CPU_RELAX() _mm_pause()
#else
#define QUILL_CPU_RELAX() ((void)0)
#endif

namespace quill::cpu {

namespace {
// How a thread waits for the next section (workers) or for the others to finish one (the caller): first it spins
// with pause, which covers the microsecond gaps inside a forward pass; then it yields, so that when the machine has
// more runnable threads than cores (other processes, parallel tests) the thread it waits for gets the core; then
// (workers only) it sleeps until woken, so an idle quill burns no CPU while the user types.
constexpr int kSpinPause = 1 << 12;
constexpr int kSpinYield = 1 << 11;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
    if (n_threads < 1) throw UsageError(fmt::format("thread count must be at least 1, got {}", n_threads));
    for (int i = 1; i < n_threads; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_ = &fn;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    fn(0, n_threads_);
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
        if (spin < kSpinPause) QUILL_CPU_RELAX();
        else std::this_thread::yield();
    }
    job_ = nullptr;
}

void ThreadPool::worker(int ith) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = generation_.load(std::memory_order_acquire);
        for (int spin = 0; gen == seen && spin < kSpinPause + kSpinYield; ++spin) {
            if (spin < kSpinPause) QUILL_CPU_RELAX();
            else std::this_thread::yield();
            gen = generation_.load(std::memory_order_acquire);
        }
        if (gen == seen) {
            generation_.wait(seen, std::memory_order_acquire);
            continue;
        }
        seen = gen;
        if (stop_.load(std::memory_order_acquire)) return;
        (*job_)(ith, n_threads_);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

int ThreadPool::physical_cores() {
    // Count distinct (package, core) pairs; fall back to the logical count.
    std::set<std::pair<std::string, std::string>> cores;
    for (unsigned cpu = 0;; ++cpu) {
        std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        std::ifstream pkg(base + "physical_package_id"), core(base + "core_id");
        if (!pkg || !core) break;
        std::string p, c;
        pkg >> p;
        core >> c;
        cores.emplace(p, c);
    }
    int n = static_cast<int>(cores.size());
    if (n == 0) n = static_cast<int>(std::thread::hardware_concurrency());
    return n > 0 ? n : 1;
}

Range split_range(int64_t n, int ith, int nth, int64_t align) {
    int64_t units = (n + align - 1) / align;
    int64_t per = units / nth, extra = units % nth;
    int64_t b = ith * per + std::min<int64_t>(ith, extra);
    int64_t e = b + per + (ith < extra ? 1 : 0);
    return {std::min(n, b * align), std::min(n, e * align)};
}

}  // namespace quill::cpu
