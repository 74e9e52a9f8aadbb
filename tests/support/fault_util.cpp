#include "tests/support/fault_util.h"

#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace quill::test {

pid_t spawn_quill(const std::vector<std::string>& args, const ChildIo& io, const std::vector<std::string>& env) {
    std::vector<std::string> argv_s{QUILL_BIN};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s(env);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());  // first: getenv finds the first of duplicate names
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    envp.push_back(nullptr);
    const pid_t pid = fork();
    if (pid != 0) return pid;
    // The child: only async-signal-safe calls until exec.
    const int want[3] = {io.in, io.out, io.err};
    int moved[3];
    for (int i = 0; i < 3; ++i) moved[i] = want[i] >= 0 ? fcntl(want[i], F_DUPFD_CLOEXEC, 10) : -1;
    for (int i = 0; i < 3; ++i) {
        if (moved[i] >= 0) dup2(moved[i], i);
        else close(i);
    }
    signal(SIGPIPE, SIG_DFL);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
}

int wait_child(pid_t pid, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
        int st = 0;
        const pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0) return -1;
        if (std::chrono::steady_clock::now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

std::string read_all(int fd) {
    std::string out;
    char buf[4096];
    for (;;) {
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return out;
        out.append(buf, static_cast<size_t>(n));
    }
}

Outcome run_io(const std::vector<std::string>& args, const std::string& in, const std::string& out,
               const std::string& err, double timeout_s) {
    const auto dir = temp_dir("io");
    const std::string out_file = (dir / "out").string(), err_file = (dir / "err").string();
    auto open_spec = [&](const std::string& spec, bool write, const std::string& capture) {
        if (spec == "<closed>") return -1;
        if (write) return open(spec.empty() ? capture.c_str() : spec.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        return open(spec.empty() ? "/dev/null" : spec.c_str(), O_RDONLY);
    };
    ChildIo io{open_spec(in, false, ""), open_spec(out, true, out_file), open_spec(err, true, err_file)};
    const pid_t pid = spawn_quill(args, io);
    for (int fd : {io.in, io.out, io.err})
        if (fd >= 0) close(fd);
    Outcome r;
    r.status = wait_child(pid, timeout_s);
    if (out.empty()) r.out = read_file(out_file);
    if (err.empty()) r.err = read_file(err_file);
    std::filesystem::remove_all(dir);
    return r;
}

size_t make_full_pipe(int fds[2]) {
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    fcntl(fds[1], F_SETPIPE_SZ, 4096);
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    size_t filled = 0;
    const std::string chunk(512, '#');
    for (ssize_t n; (n = write(fds[1], chunk.data(), chunk.size())) > 0;) filled += static_cast<size_t>(n);
    fcntl(fds[1], F_SETFL, 0);
    return filled;
}

bool wait_blocked_in(long nr, pid_t pid, int fd, bool& supported) {
    const std::string path = "/proc/" + std::to_string(pid) + "/syscall";
    const std::string want = std::to_string(nr) + " 0x" + std::to_string(fd) + " ";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    supported = true;
    while (std::chrono::steady_clock::now() < deadline) {
        const std::string s = read_file(path);
        if (s.empty() && !std::filesystem::exists("/proc/" + std::to_string(pid))) return false;
        if (s.empty()) {
            supported = false;
            return false;
        }
        if (s.starts_with(want)) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

bool wait_blocked_in_write(pid_t pid, int fd, bool& supported) {
    return wait_blocked_in(SYS_write, pid, fd, supported);
}

std::string last_line(const std::string& text) {
    std::string t = text;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    const size_t at = t.rfind('\n');
    return at == std::string::npos ? t : t.substr(at + 1);
}

int count_errors(const std::string& text) {
    int n = 0;
    for (size_t at = text.find("error"); at != std::string::npos; at = text.find("error", at + 1)) ++n;
    return n;
}

void rewrite_gguf(const std::string& src, const std::string& dst,
                  const std::function<void(GgufWriter&)>& edit_metadata,
                  const std::function<void(const std::string&, std::vector<uint8_t>&)>& edit_tensor) {
    const GgufFile f = GgufFile::open(src);
    GgufWriter w(f.version());
    for (const auto& [key, value] : f.metadata()) w.set(key, value);
    if (edit_metadata) edit_metadata(w);
    for (const auto& t : f.tensors()) {
        std::vector<uint8_t> bytes(f.tensor_data(t), f.tensor_data(t) + t.n_bytes);
        if (edit_tensor) edit_tensor(t.name, bytes);
        w.add_tensor(t.name, t.type, t.ne, std::move(bytes));
    }
    w.write(dst);
}

}  // namespace quill::test
