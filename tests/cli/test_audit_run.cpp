// `quill run` takes an unquoted prompt of several words, as `ollama run MODEL why is the sky blue` does.
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace test_audit_run {

using namespace quill;

TEST_CASE("quill run joins several prompt arguments with spaces, options among them, as one -p", "[cli]") {
    const std::string m = test::tiny_model_file(test::TinyModel::spm).string();
    const std::vector<std::string> common = {"run", "-q", "--raw", "-m", m, "-n", "3", "--temp", "0", "-t", "1"};
    auto with = [&](std::vector<std::string> before, const std::vector<std::string>& after) {
        before.insert(before.end(), after.begin(), after.end());
        return before;
    };
    const test::CommandResult want = test::run_quill(with(common, {"-p", "Once upon a time"}));
    REQUIRE(want.status == 0);
    CHECK(!want.out.empty());
    const test::CommandResult got = test::run_quill(
        {"run", "Once", "upon", "-q", "a", "--raw", "-m", m, "-n", "3", "--temp", "0", "-t", "1", "time"});
    INFO(got.err);
    CHECK(got.status == 0);
    CHECK(got.out == want.out);
    // After --, words that look like options are prompt words too.
    const test::CommandResult dashes = test::run_quill(with(common, {"--", "-n", "time"}));
    CHECK(dashes.status == 0);
    CHECK(dashes.out == test::run_quill(with(common, {"-p", "-n time"})).out);
    const std::vector<std::string> quoted = with(common, {"-p", "Once upon a time"});
    // Words and -p are the prompt twice.
    std::vector<std::string> twice = quoted;
    twice.push_back("more");
    const test::CommandResult r = test::run_quill(twice);
    CHECK(r.status == 2);
    CHECK(r.err == "quill: error: give the prompt once: as an argument, with -p or with -f\n");
}

}  // namespace test_audit_run
