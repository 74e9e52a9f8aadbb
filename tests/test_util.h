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
// A fresh empty directory for one test's files.
std::filesystem::path temp_dir(const std::string& name);

// Prints the reason in the form CTest recognizes as a skip (see tests/CMakeLists.txt).
void skip(const std::string& reason);
// Returns the test data file or directory, or nullopt after calling skip() when it is absent.
std::optional<std::filesystem::path> require_testdata(const std::string& relative);

struct CommandResult {
    int status = -1;  // exit status, or -1 when killed
    std::string out;  // stdout
    std::string err;  // stderr
};
// Runs the quill binary with the given arguments; stdin from `input`.
CommandResult run_quill(const std::vector<std::string>& args, const std::string& input = "");

std::string read_file(const std::filesystem::path& path);

}  // namespace quill::test
