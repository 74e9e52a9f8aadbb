// The Catch2 main of quill_tests. It runs the session as Catch's own main does and then decides the exit code:
//   a failed assertion (or an unmatched test name, with -w NoTests)  -> non-zero, never kSkipExitCode;
//   a test case that skipped after asserting anything                 -> 1 (a skip must not hide what ran);
//   every test case run skipped, with no assertion                    -> kSkipExitCode (CTest: Skipped);
//   otherwise                                                         -> 0, after listing the skipped ones.
// CTest runs one test case per process (catch_discover_tests), so a test is Skipped only when it skipped cleanly.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/support/test_util.h"

#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

struct SkippedTest {
    std::string name;
    std::string reason;
    uint64_t assertions = 0;  // assertions the test case made (passed or failed), the skip itself not counted
};

struct RunRecord {
    uint64_t test_cases = 0;
    std::vector<SkippedTest> skipped;
};

// Catch constructs the listener itself and main cannot reach it, so the two share this record. It is written only
// by the listener, on the one thread that runs the tests, and read by main after the run.
RunRecord& run_record() {
    static RunRecord record;
    return record;
}

// Sees each test case's skip warning (quill::test::skip) and its assertion totals.
class SkipListener : public Catch::TestEventListenerBase {
public:
    using TestEventListenerBase::TestEventListenerBase;

    void testCaseStarting(Catch::TestCaseInfo const& info) override {
        TestEventListenerBase::testCaseStarting(info);
        reason_.reset();
    }

    bool assertionEnded(Catch::AssertionStats const& stats) override {
        const Catch::AssertionResult& r = stats.assertionResult;
        const std::string prefix = quill::test::kSkipPrefix;
        if (r.getResultType() == Catch::ResultWas::Warning && !reason_ && r.getMessage().starts_with(prefix))
            reason_ = r.getMessage().substr(prefix.size());
        return true;
    }

    void testCaseEnded(Catch::TestCaseStats const& stats) override {
        TestEventListenerBase::testCaseEnded(stats);
        RunRecord& record = run_record();
        ++record.test_cases;
        if (reason_) record.skipped.push_back({stats.testInfo.name, *reason_, stats.totals.assertions.total()});
    }

private:
    std::optional<std::string> reason_;  // the running test case's skip reason
};

int exit_code(int catch_result, const RunRecord& record) {
    std::cout.flush();  // Catch's report first, then these lines (CTest captures both streams into one)
    int failures = 0;
    for (const SkippedTest& s : record.skipped) {
        if (s.assertions == 0) continue;
        std::cerr << "quill_tests: '" << s.name << "' skipped (" << s.reason << ") after " << s.assertions
                  << " assertion(s): a test skips before it asserts anything, so this is a failure\n";
        ++failures;
    }
    if (catch_result != 0) return catch_result == quill::test::kSkipExitCode ? 1 : catch_result;
    if (failures != 0) return 1;
    if (record.skipped.empty()) return 0;
    std::cerr << "quill_tests: " << record.skipped.size() << " of " << record.test_cases
              << " test case(s) skipped:\n";
    for (const SkippedTest& s : record.skipped) std::cerr << "  " << s.name << ": " << s.reason << "\n";
    return record.skipped.size() == record.test_cases ? quill::test::kSkipExitCode : 0;
}

}  // namespace

CATCH_REGISTER_LISTENER(SkipListener)

int main(int argc, char* argv[]) {
    Catch::Session session;
    if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
    const int result = session.run();
    quill::test::remove_temp_dirs();
    return exit_code(result, run_record());
}
