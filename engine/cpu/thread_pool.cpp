#include "engine/cpu/thread_pool.h"

#include "engine/error.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include <sched.h>

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
// more runnable threads than cores the thread it waits for gets the core; then (workers only) it sleeps until woken,
// so an idle quill burns no CPU while the user types.
constexpr int kSpinPause = 1 << 12;
constexpr int kSpinYield = 1 << 8;
constexpr uint64_t kTaskMask = 0xffffffffu;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
    if (n_threads < 1) throw UsageError(fmt::format("thread count must be at least 1, got {}", n_threads));
    // No section yet: the first generation has every task taken.
    state_.store(static_cast<uint64_t>(n_threads), std::memory_order_relaxed);
    for (int i = 1; i < n_threads; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    const uint64_t gen = (state_.load(std::memory_order_relaxed) >> 32) + 1;
    state_.store((gen << 32) | static_cast<uint64_t>(n_threads_), std::memory_order_release);  // no tasks
    state_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::run_tasks() {
    uint64_t s = state_.load(std::memory_order_acquire);
    while ((s & kTaskMask) < static_cast<uint64_t>(n_threads_)) {
        if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        // Claimed task (s & kTaskMask) of the published section: job_ stays valid until done_ counts it.
        (*job_)(static_cast<int>(s & kTaskMask), n_threads_);
        done_.fetch_add(1, std::memory_order_acq_rel);
        s = state_.load(std::memory_order_acquire);
    }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    // The previous section is complete (done_ reached nth), so nothing reads job_ or done_ now.
    job_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = (state_.load(std::memory_order_relaxed) >> 32) + 1;
    state_.store(gen << 32, std::memory_order_release);  // task 0 is next
    state_.notify_all();
    run_tasks();
    for (int spin = 0; done_.load(std::memory_order_acquire) != n_threads_; ++spin) {
        if (spin < kSpinPause) QUILL_CPU_RELAX();
        else std::this_thread::yield();
    }
    job_ = nullptr;
}

void ThreadPool::worker() {
    for (;;) {
        run_tasks();
        // Wait for the next section: the state word changes when one is published.
        const uint64_t seen = state_.load(std::memory_order_acquire);
        if ((seen & kTaskMask) < static_cast<uint64_t>(n_threads_)) continue;  // published meanwhile
        if (stop_.load(std::memory_order_acquire)) return;
        int spin = 0;
        while (state_.load(std::memory_order_acquire) == seen) {
            if (spin < kSpinPause) {
                QUILL_CPU_RELAX();
            } else if (spin < kSpinPause + kSpinYield) {
                std::this_thread::yield();
            } else {
                state_.wait(seen, std::memory_order_acquire);
            }
            ++spin;
        }
    }
}

namespace {

// The CPU quota of this process's cgroup (v2 cpu.max "quota period", v1 cfs_quota_us / cfs_period_us), rounded up
// to whole CPUs; 0 when there is none.
int cgroup_cpu_limit() {
    std::ifstream self("/proc/self/cgroup");
    std::string line, path = "/";
    while (std::getline(self, line)) {
        if (line.rfind("0::", 0) == 0) path = line.substr(3);  // cgroup v2 entry
    }
    auto ceil_div = [](double quota, double period) {
        return quota > 0 && period > 0 ? static_cast<int>((quota + period - 1) / period) : 0;
    };
    for (const std::string& dir : {"/sys/fs/cgroup" + path, std::string("/sys/fs/cgroup")}) {
        std::ifstream max(dir + "/cpu.max");
        std::string quota;
        double period = 0;
        if (max >> quota >> period) return quota == "max" ? 0 : ceil_div(std::atof(quota.c_str()), period);
    }
    std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    double quota = 0, period = 0;
    if (q >> quota && p >> period) return ceil_div(quota, period);
    return 0;
}

}  // namespace

int ThreadPool::physical_cores() {
    // Distinct (package, core) pairs among the CPUs this process may run on.
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const bool have_mask = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
    std::set<std::pair<std::string, std::string>> cores;
    int logical = 0;
    for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (have_mask && !CPU_ISSET(cpu, &allowed)) continue;
        std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        std::ifstream pkg(base + "physical_package_id"), core(base + "core_id");
        if (!pkg || !core) {
            if (!have_mask) break;  // no mask: CPUs are numbered densely, this is the end
            ++logical;              // in the mask, but no topology: count it as its own core
            continue;
        }
        std::string p, c;
        pkg >> p;
        core >> c;
        cores.emplace(p, c);
    }
    int n = static_cast<int>(cores.size()) + logical;
    if (n == 0) n = have_mask ? CPU_COUNT(&allowed) : static_cast<int>(std::thread::hardware_concurrency());
    const int quota = cgroup_cpu_limit();
    if (quota > 0 && quota < n) n = quota;
    return n > 0 ? n : 1;
}

int ThreadPool::available_cpus() {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    int n = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed)
                                                               : static_cast<int>(std::thread::hardware_concurrency());
    const int quota = cgroup_cpu_limit();
    if (quota > 0 && quota < n) n = quota;
    return n > 0 ? n : 1;
}

Range split_range(int64_t n, int ith, int nth, int64_t align) {
    int64_t units = (n + align - 1) / align;
    int64_t per = units / nth, extra = units % nth;
    int64_t b = ith * per + std::min<int64_t>(ith, extra);
    int64_t e = b + per + (ith < extra ? 1 : 0);
    return {std::min(n, b * align), std::min(n, e * align)};
}

void run_claimed(ThreadPool& pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& work) {
    grain = std::max<int64_t>(grain, 1);
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
        for (int64_t b = next.fetch_add(grain, std::memory_order_relaxed); b < n;
             b = next.fetch_add(grain, std::memory_order_relaxed))
            work(b, std::min(n, b + grain));
    });
}

void run_chunks(ThreadPool* pool, int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& work,
                const std::function<void(int64_t, int64_t)>& done) {
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        const int64_t c1 = std::min(n, c0 + chunk);
        if (pool == nullptr || pool->size() == 1) {
            work(c0, c1);
        } else {
            // Eight pieces a thread, claimed in turn: with a fixed half each, one thread's fresh pages can come much
            // slower than the other's, and it finished long after.
            run_claimed(*pool, c1 - c0, (c1 - c0 + 8 * pool->size() - 1) / (8 * pool->size()),
                        [&](int64_t b, int64_t e) { work(c0 + b, c0 + e); });
        }
        if (done) done(c0, c1);
    }
}

}  // namespace quill::cpu
