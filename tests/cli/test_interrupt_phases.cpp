// Ctrl-C (SIGINT) stops quill within a fraction of the work left in the phases before generation: tokenizing
// megabytes of text (quill tokenize, a batch line). Each test times the same command uninterrupted first, on the
// same machine, so that the bound follows the machine's speed.
#include "tests/support/fault_util.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <random>
#include <thread>
#include <unistd.h>

namespace test_interrupt_phases {

using namespace quill;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace {

// About `bytes` of words of random letters on one line: few repeat, so the tokenizer's word cache cannot skip
// the work.
std::string random_words(size_t bytes) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> letter('a', 'z'), length(2, 12);
    std::string text;
    text.reserve(bytes + 16);
    while (text.size() < bytes) {
        for (int n = length(rng); n > 0; --n) text.push_back(static_cast<char>(letter(rng)));
        text.push_back(' ');
    }
    return text;
}

struct Timed {
    int status = 0;              // exit status, 128 + the signal that killed it
    double after_signal_s = 0;   // from the SIGINT to the exit (the whole run when none was sent)
    double waited_s = 0;         // from the start to `wait_for` on stderr (0 without one)
    std::string err;             // stderr
};

// Runs quill with stdin from `input`, stdout to /dev/null and stderr to `err`; with wait_for, first waits (up to 60
// s, polling) until stderr holds that text; with interrupt_after_s > 0, sends SIGINT that long after the start (or
// after that text). A run past 60 s is killed (status -1).
Timed run_timed(const std::vector<std::string>& args, const fs::path& input, const fs::path& err,
                double interrupt_after_s = 0, const std::string& wait_for = {}) {
    const int in = open(input.c_str(), O_RDONLY | O_CLOEXEC);
    const int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
    const int errors = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE((in >= 0 && out >= 0 && errors >= 0));
    auto t0 = clock_type::now();
    const pid_t pid = test::spawn_quill(args, test::ChildIo{in, out, errors});
    close(in);
    close(out);
    close(errors);
    Timed r;
    if (!wait_for.empty()) {
        while (test::read_file(err).find(wait_for) == std::string::npos &&
               clock_type::now() - t0 < std::chrono::seconds(60))
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        r.waited_s = std::chrono::duration<double>(clock_type::now() - t0).count();
        t0 = clock_type::now();
    }
    if (interrupt_after_s > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(interrupt_after_s));
        t0 = clock_type::now();
        kill(pid, SIGINT);
    }
    r.status = test::wait_child(pid, 60);
    r.after_signal_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    r.err = test::read_file(err);
    return r;
}

}  // namespace

TEST_CASE("SIGINT stops quill tokenize of megabytes of text at once, exit 130 and one line", "[cli][signals][model]") {
    const auto model = test::require_default_model();
    if (!model) return;
    const fs::path dir = test::temp_dir("interrupt-tokenize");
    std::ofstream(dir / "big.txt") << random_words(size_t{3} << 20);
    const std::vector<std::string> args{"tokenize", "-m", model->string()};
    const Timed full = run_timed(args, dir / "big.txt", dir / "err");
    REQUIRE(full.status == 0);
    INFO("uninterrupted: " << full.after_signal_s << " s");
    const Timed cut = run_timed(args, dir / "big.txt", dir / "err", full.after_signal_s / 4);
    INFO("exit " << cut.after_signal_s << " s after SIGINT; stderr: " << cut.err);
    CHECK(cut.status == 130);
    CHECK(cut.after_signal_s < full.after_signal_s / 3);
    CHECK(cut.err.starts_with("quill: interrupted while "));
    CHECK(std::count(cut.err.begin(), cut.err.end(), '\n') == 1);
}

TEST_CASE("SIGINT while batch tokenizes a long line keeps the finished record and leaves that line for --resume",
          "[cli][signals][batch][model]") {
    const auto model = test::require_default_model();
    if (!model) return;
    const fs::path dir = test::temp_dir("interrupt-batch");
    std::ofstream(dir / "in.txt") << "Hello\n" << random_words(size_t{3} << 20) << "\n";
    const std::string out = (dir / "out.jsonl").string();
    const std::vector<std::string> args{"batch", "--raw", "-m", model->string(), "-c", "256", "-n", "1",
                                        "--temp", "0", "-t", "1", "-o", out, "--overwrite"};
    // Timed from the load line on (however long loading the model takes this time): the first request runs while
    // the long line is tokenized; the SIGINT comes a quarter of the way through.
    const Timed full = run_timed(args, dir / "in.txt", dir / "err", 0, " loaded in ");
    INFO("uninterrupted: exit " << full.status << ", " << full.after_signal_s << " s after the load line; stderr: "
                                << full.err);
    REQUIRE(full.status == 3);  // the long line is an error record: longer than the context
    const Timed cut = run_timed(args, dir / "in.txt", dir / "err", full.after_signal_s / 4, " loaded in ");
    INFO("exit " << cut.after_signal_s << " s after SIGINT; stderr: " << cut.err);
    CHECK(cut.status == 130);
    CHECK(cut.after_signal_s < full.after_signal_s / 3);
    std::ifstream records(out);
    std::vector<nlohmann::json> written;
    for (std::string line; std::getline(records, line);) written.push_back(nlohmann::json::parse(line));
    REQUIRE(written.size() == 1);
    CHECK(written[0]["id"] == "line-1");
    CHECK(!written[0].contains("error"));
}

}  // namespace test_interrupt_phases
