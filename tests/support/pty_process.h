// The quill binary on a pseudo-terminal, for the tests that type as a person does (chat, a terminal on stdin).
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <pty.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace quill::test {

// Environment changes for the child: NAME and its value, or nullopt to unset it.
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

// A child process on a pseudo-terminal (120 x 40), with NO_COLOR set and XDG_STATE_HOME (the history) in state_dir;
// its stdout goes to the file `stdout_file` instead where one is named.
class PtyProcess {
public:
    PtyProcess(const std::vector<std::string>& args, const std::string& state_dir, const EnvChanges& env = {},
               const std::string& stdout_file = "") {
        winsize size{};
        size.ws_row = 40;
        size.ws_col = 120;
        pid_ = forkpty(&fd_, nullptr, nullptr, &size);
        REQUIRE(pid_ >= 0);
        if (pid_ == 0) {
            // A clean start whatever the test process did with signals (masks and ignored signals survive exec).
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, nullptr);
            for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD}) std::signal(sig, SIG_DFL);
            setenv("NO_COLOR", "1", 1);
            setenv("XDG_STATE_HOME", state_dir.c_str(), 1);
            for (const auto& [name, value] : env) {
                if (value)
                    setenv(name.c_str(), value->c_str(), 1);
                else
                    unsetenv(name.c_str());
            }
            if (!stdout_file.empty()) {
                const int fd = open(stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
                if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) _exit(126);
                close(fd);
            }
            std::vector<char*> argv;
            argv.push_back(const_cast<char*>(QUILL_BIN));
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            execv(QUILL_BIN, argv.data());
            _exit(127);
        }
    }
    ~PtyProcess() {
        if (pid_ > 0 && !reaped_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (fd_ >= 0) close(fd_);
    }
    PtyProcess(const PtyProcess&) = delete;
    PtyProcess& operator=(const PtyProcess&) = delete;

    // Resizes the terminal; the kernel sends SIGWINCH to the child, as a terminal window does.
    void resize(int columns, int rows) {
        winsize size{};
        size.ws_row = static_cast<unsigned short>(rows);
        size.ws_col = static_cast<unsigned short>(columns);
        REQUIRE(ioctl(fd_, TIOCSWINSZ, &size) == 0);
    }
    void send(const std::string& s) { REQUIRE(write(fd_, s.data(), s.size()) == static_cast<ssize_t>(s.size())); }

    // Reads until `needle` appears after `from` in the whole output, or the time runs out (then false).
    // The output is kept without '\r'.
    bool wait_for(const std::string& needle, size_t from = 0, int seconds = 60) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        while (all_.find(needle, from) == std::string::npos) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
            if (left.count() <= 0) return false;
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
            char buf[4096];
            const ssize_t n = read(fd_, buf, sizeof buf);
            if (n <= 0) return all_.find(needle, from) != std::string::npos;
            for (ssize_t i = 0; i < n; ++i)
                if (buf[i] != '\r') all_.push_back(buf[i]);
        }
        return true;
    }
    // Waits for the child to exit: its exit status, 128 + the signal that killed it, or -1 after `seconds`.
    int wait_exit(int seconds = 30) {
        for (int i = 0; i < seconds * 10; ++i) {
            pollfd p{fd_, POLLIN, 0};
            while (poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
                char buf[4096];
                const ssize_t n = read(fd_, buf, sizeof buf);
                if (n <= 0) break;
                for (ssize_t k = 0; k < n; ++k)
                    if (buf[k] != '\r') all_.push_back(buf[k]);
            }
            int st = 0;
            if (waitpid(pid_, &st, WNOHANG) == pid_) {
                reaped_ = true;
                return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            }
            usleep(100000);
        }
        return -1;
    }
    const std::string& output() const { return all_; }
    size_t size() const { return all_.size(); }

private:
    int fd_ = -1;
    pid_t pid_ = -1;
    bool reaped_ = false;
    std::string all_;
};

// A person types a moment after the prompt shows; libedit prints the prompt just before it puts the terminal in
// its own mode, and a key that arrives in between is handled by the terminal's line discipline instead.
inline void human_pause() { usleep(300000); }

}  // namespace quill::test
