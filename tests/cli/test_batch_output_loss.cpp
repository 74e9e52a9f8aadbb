// quill batch's output when the file system fails it: an output file deleted while the batch writes it, a record
// that a file size limit (or a full disk) cuts short.
#include "tests/support/batch_texts.h"
#include "tests/support/fault_util.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>

namespace test_batch_output_loss {

using namespace quill;
namespace fs = std::filesystem;

namespace {

std::string prompt_lines(size_t n) {
    const char* words[] = {"Once upon a time", "The little dog", "Lily wanted to", "One day, Tom", "The sun"};
    std::string s;
    for (size_t i = 0; i < n; ++i) s += fmt::format("{} {}\n", words[i % 5], i);
    return s;
}

// Starts quill with stdin, stdout closed and stderr into `err_file`.
pid_t spawn_batch(const std::vector<std::string>& args, const std::string& err_file) {
    const int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(err >= 0);
    const pid_t pid = test::spawn_quill(args, test::ChildIo{-1, -1, err});
    close(err);
    return pid;
}

}  // namespace

TEST_CASE("a batch whose output file is deleted while it runs stops with an error, not exit 0 into a lost file",
          "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(test::TinyModel::spm);
    const auto dir = test::temp_dir("batch-deleted-output");
    const fs::path sub = dir / "run";
    fs::create_directories(sub);
    const std::string in = (dir / "in.txt").string(), out = (sub / "out.jsonl").string();
    const std::string err = (dir / "err").string();
    std::ofstream(in) << prompt_lines(40);
    const pid_t pid = spawn_batch({"batch", "--raw", "-m", tiny.string(), "-i", in, "-o", out, "--temp", "0", "-n",
                                   "200", "--parallel", "2", "-t", "1", "-q"},
                                  err);
    for (int waited = 0; !fs::exists(out) || fs::file_size(out) == 0; waited += 5) {  // after the first record
        REQUIRE(waited < 60000);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    fs::remove_all(sub);
    CHECK(test::wait_child(pid, 120) == 1);
    const std::string message = test::read_file(err);
    CHECK_THAT(message, Catch::Contains(out + " was deleted while the batch was writing it"));
    CHECK(test::count_errors(message) == 1);
}

TEST_CASE("a record that cannot be written whole is cut off: the output ends with whole records, --resume ends it",
          "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(test::TinyModel::spm);
    const auto dir = test::temp_dir("batch-file-size-limit");
    const std::string in = (dir / "in.txt").string(), out = (dir / "out.jsonl").string();
    const std::string err = (dir / "err").string();
    std::ofstream(in) << prompt_lines(24);
    const std::vector<std::string> args{"batch", "--raw", "-m", tiny.string(), "-i", in, "-o", out, "--temp", "0",
                                        "--seed", "3", "-n", "40", "--parallel", "4", "-t", "1", "-q"};
    REQUIRE(test::wait_child(spawn_batch(args, err), 120) == 0);
    const auto whole = test::texts_by_id(test::read_file(out));
    REQUIRE(whole.size() == 24);
    const uint64_t limit = fs::file_size(out) / 3;  // records are under a third of the whole
    fs::remove(out);

    // The child inherits the limit and SIGXFSZ ignored: its write past the limit fails with EFBIG, as on a full disk.
    rlimit saved{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    rlimit lowered = saved;
    lowered.rlim_cur = limit;
    auto* const old_handler = signal(SIGXFSZ, SIG_IGN);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lowered) == 0);
    const pid_t pid = spawn_batch(args, err);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &saved) == 0);
    signal(SIGXFSZ, old_handler);
    CHECK(test::wait_child(pid, 120) == 1);
    const std::string message = test::read_file(err);
    CHECK_THAT(message, Catch::Contains("cannot write to " + out));
    CHECK(test::count_errors(message) == 1);

    const std::string partial = test::read_file(out);
    REQUIRE(!partial.empty());
    CHECK(partial.size() <= limit);
    CHECK(partial.back() == '\n');  // no torn last line left for other readers of the file
    const auto before = test::texts_by_id(partial);
    CHECK(before.size() < whole.size());

    std::vector<std::string> resume = args;
    resume.push_back("--resume");
    REQUIRE(test::wait_child(spawn_batch(resume, err), 120) == 0);
    CHECK(test::read_file(err).find("torn") == std::string::npos);
    const std::string resumed = test::read_file(out);
    CHECK(std::count(resumed.begin(), resumed.end(), '\n') == 24);  // no record twice
    CHECK(test::texts_by_id(resumed) == whole);
}

}  // namespace test_batch_output_loss
