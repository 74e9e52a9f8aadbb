// `quill run` at a terminal without a prompt starts `quill chat`: with all of run's options that chat has, -q and
// --max-input-bytes included. On the tiny chat model the tests write: nothing here needs test data.
#include "tests/support/pty_process.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <string>

namespace test_audit_run_chat {

using namespace quill;
using test::human_pause;
using test::PtyProcess;

TEST_CASE("quill run -q at a terminal starts a chat without the load line and stats, under run's input limit",
          "[cli][chat][terminal]") {
    const auto dir = test::temp_dir("audit-run-chat");
    PtyProcess p({"run", "-q", "--max-input-bytes", "8", "-m", test::tiny_model_file(test::TinyModel::spm_chat).string(),
                  "--chat-template", "chatml", "-n", "3", "--temp", "0", "-t", "1"},
                 dir.string());
    REQUIRE(p.wait_for("> "));
    human_pause();
    size_t mark = p.size();
    p.send("Once upon a time\r");  // 16 bytes: over run's --max-input-bytes 8
    REQUIRE(p.wait_for("> ", mark));
    human_pause();
    mark = p.size();
    p.send("Once\r");  // 4 bytes: a reply of 3 tokens
    REQUIRE(p.wait_for("> ", mark));
    human_pause();
    p.send("/exit\r");
    CHECK(p.wait_exit() == 0);
    const std::string& out = p.output();
    INFO(out);
    CHECK(out.find("the message is longer than the limit of 8 bytes") != std::string::npos);
    CHECK(out.find("loaded in") == std::string::npos);
    CHECK(out.find(" tok/s; context ") == std::string::npos);
}

}  // namespace test_audit_run_chat
