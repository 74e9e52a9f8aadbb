#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace quill::test {

namespace fs = std::filesystem;

// Appends the running test's name to $QUILL_TESTDATA_LOG, once per process. .ci/test sets it on its first pass and
// runs only the tests named there again as on a fresh clone: a test that never looks for the test data runs the
// same way without it.
static void log_testdata_user() {
    static std::once_flag once;
    const char* log = std::getenv("QUILL_TESTDATA_LOG");
    if (!log || !*log) return;
    std::call_once(once, [log] {
        const std::string line = Catch::getResultCapture().getCurrentTestName() + "\n";
        // One write with O_APPEND: the tests that CTest runs at once never interleave their lines.
        const int fd = ::open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        const ssize_t n = fd >= 0 ? ::write(fd, line.data(), line.size()) : -1;
        if (fd >= 0) ::close(fd);
        if (n != static_cast<ssize_t>(line.size()))
            throw std::runtime_error(fmt::format("cannot append to QUILL_TESTDATA_LOG {}", log));
    });
}

fs::path testdata_dir() {
    log_testdata_user();
    if (const char* env = std::getenv("QUILL_TESTDATA"); env && *env) return env;
    return fs::path(QUILL_SOURCE_DIR) / ".." / "shared" / "testdata";
}

std::optional<fs::path> default_model() {
    fs::path p = fs::path(QUILL_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (const char* env = std::getenv("QUILL_MODEL"); env && *env) p = env;
    if (fs::exists(p)) return p;
    return std::nullopt;
}

namespace {

// The directories temp_dir made in this process, removed when its tests end (remove_temp_dirs).
std::vector<fs::path>& made_temp_dirs() {
    static std::vector<fs::path> dirs;
    return dirs;
}

}  // namespace

fs::path temp_dir(const std::string& name) {
    fs::path dir = fs::temp_directory_path() / fmt::format("quill-test-{}-{}", name, ::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto& made = made_temp_dirs();
    if (std::find(made.begin(), made.end(), dir) == made.end()) made.push_back(dir);
    return dir;
}

void remove_temp_dirs() {
    if (const char* keep = std::getenv("QUILL_KEEP_TEST_DIRS"); keep && *keep && std::string(keep) != "0") return;
    for (const fs::path& dir : made_temp_dirs()) {
        std::error_code ec;  // (a directory a test removed itself, or one a child still writes: left as it is)
        fs::remove_all(dir, ec);
    }
    made_temp_dirs().clear();
}

bool in_ci() {
    const char* ci = std::getenv("CI");
    if (!ci) return false;
    const std::string v = ci;
    return !v.empty() && v != "0" && v != "false";
}

void skip(const std::string& reason) {
    if (in_ci()) FAIL("CI is set, so nothing may be missing: " << reason);
    skip_no_device(reason);
}

void skip_no_device(const std::string& reason) { WARN(kSkipPrefix << reason); }

void skip_unfetched(const std::string& reason) { WARN(kSkipPrefix << reason); }

std::optional<fs::path> require_testdata(const std::string& relative) {
    fs::path p = testdata_dir() / relative;
    if (fs::exists(p)) return p;
    skip(fmt::format("test data {} is absent (set QUILL_TESTDATA)", p.string()));
    return std::nullopt;
}

std::optional<fs::path> require_default_model() {
    auto model = default_model();
    if (!model) skip("the default model is absent: run models/fetch_default.sh (or set QUILL_MODEL)");
    return model;
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

static std::string quote(const std::string& s) {
    std::string q(1, '\'');
    for (char c : s) {
        if (c == '\'') q.append("'\\''");
        else q.push_back(c);
    }
    q.push_back('\'');
    return q;
}

CommandResult run_quill(const std::vector<std::string>& args, const std::string& input) {
    fs::path dir = temp_dir("cmd");
    fs::path in = dir / "in", out = dir / "out", err = dir / "err";
    std::ofstream(in, std::ios::binary) << input;
    std::string cmd = quote(QUILL_BIN);
    for (const auto& a : args) cmd.append(1, ' ').append(quote(a));
    cmd += fmt::format(" <{} >{} 2>{}", quote(in.string()), quote(out.string()), quote(err.string()));
    int rc = std::system(cmd.c_str());
    CommandResult r;
    r.status = (rc != -1 && WIFEXITED(rc)) ? WEXITSTATUS(rc) : -1;
    r.out = read_file(out);
    r.err = read_file(err);
    fs::remove_all(dir);
    return r;
}

}  // namespace quill::test
