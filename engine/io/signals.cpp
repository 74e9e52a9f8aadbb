#include "engine/io/signals.h"

#include <csignal>
#include <cstring>
#include <unistd.h>

namespace quill::signals {

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_count{0};
std::atomic<int> g_last{0};
std::atomic<bool> g_resized{false};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

extern "C" void on_signal(int sig) {
    g_last.store(sig, std::memory_order_relaxed);
    g_count.fetch_add(1, std::memory_order_relaxed);
    g_stop.store(true, std::memory_order_relaxed);
}

extern "C" void on_resize(int) { g_resized.store(true, std::memory_order_relaxed); }

// Async-signal-safe: a fixed message by write(2), then _exit.
extern "C" void on_bus_error(int) {
    static constexpr char kMessage[] =
        "quill: error: a mapped file could not be read (SIGBUS): the model file was truncated or replaced in place "
        "while quill was using it\n";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    ::_exit(1);
}

}  // namespace

void install_fault_handlers() {
    std::signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_bus_error;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, nullptr);
}

void install() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a blocking read (the chat prompt) returns EINTR
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
}

void watch_resize(bool on) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on ? on_resize : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: the editor's read returns EINTR and redraws
    sigaction(SIGWINCH, &sa, nullptr);
}

bool take_resize() { return g_resized.exchange(false, std::memory_order_relaxed); }

const std::atomic<bool>& stop_flag() { return g_stop; }
int count() { return g_count.load(std::memory_order_relaxed); }
int last() { return g_last.load(std::memory_order_relaxed); }
void clear() { g_stop.store(false, std::memory_order_relaxed); }

}  // namespace quill::signals
