// Shared helpers for the tests: where the test data and the binary are, skipping, running the CLI.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace quill::test {

// ../shared/testdata, or $QUILL_TESTDATA.
std::filesystem::path testdata_dir();
// The default model (models/SmolLM2-135M-Instruct.Q4_1.gguf or $QUILL_MODEL); nullopt when it is not there.
std::optional<std::filesystem::path> default_model();
// A fresh empty directory for one test's files, removed when the test process ends (remove_temp_dirs, called by the
// test main; QUILL_KEEP_TEST_DIRS=1 keeps them to look at).
std::filesystem::path temp_dir(const std::string& name);
void remove_temp_dirs();

// Skipping: a test calls skip (or a require_* helper) and returns before it asserts anything. The test main
// (tests/support/test_main.cpp) then exits with kSkipExitCode, which CTest reports as Skipped; a test that skips after
// an assertion, or that failed one, fails.

// The prefix of the Catch2 warning that marks a skip; tests/support/test_main.cpp and .ci/skip-report look for it.
inline constexpr const char* kSkipPrefix = "QUILL-SKIP: ";
// The exit code of a run whose test cases all skipped (CTest's SKIP_RETURN_CODE, tests/CMakeLists.txt).
inline constexpr int kSkipExitCode = 77;

// True when $CI is set to anything but "", "0" or "false".
bool in_ci();
// Skips because test data or the default model is absent. Under CI (in_ci()) nothing may be missing: the test
// fails with the reason instead.
void skip(const std::string& reason);
// Skips because this machine lacks hardware the test needs (a GPU): a skip under CI too.
void skip_no_device(const std::string& reason);
// Skips because a model that CI does not fetch on purpose (models/fetch_real.sh's) is absent: a skip under CI too.
void skip_unfetched(const std::string& reason);
// Returns the test data file or directory, or nullopt after calling skip() when it is absent.
std::optional<std::filesystem::path> require_testdata(const std::string& relative);
// Returns the default model, or nullopt after calling skip() when it is absent.
std::optional<std::filesystem::path> require_default_model();

struct CommandResult {
    int status = -1;  // exit status, or -1 when killed
    std::string out;  // stdout
    std::string err;  // stderr
};
// Runs the quill binary with the given arguments; stdin from `input`.
CommandResult run_quill(const std::vector<std::string>& args, const std::string& input = "");

std::string read_file(const std::filesystem::path& path);

}  // namespace quill::test
