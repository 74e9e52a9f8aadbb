// `quill chat --context-overflow error`: a message too long for the context even alone says so, and what helps (a
// larger -c), also after earlier turns, where /undo or /reset cannot help; a conversation that outgrew the context
// still gets the hint to drop turns.
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

namespace test_chat_overflow_error {

using quill::test::run_quill;

namespace {

std::string words(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += i ? " the big dog" : "the big dog";
    return s;
}

}  // namespace

TEST_CASE("chat --context-overflow error: a message longer than the context alone is told so after earlier turns",
          "[chat][cli]") {
    const std::string m = quill::test::tiny_model_file(quill::test::TinyModel::spm_chat).string();
    const std::vector<std::string> args{"chat", "-m", m, "--context-overflow", "error", "-c", "256", "-n", "4",
                                        "--temp", "0", "-q"};
    // First turn fits; the second is longer than the context by itself.
    auto r = run_quill(args, "Once upon a time\n" + words(200) + "\n");
    INFO(r.err);
    CHECK(r.status == 1);  // a message failed, the chat went on
    CHECK(r.err.find("longer than the context of 256: shorten it or give a larger -c") != std::string::npos);
    CHECK(r.err.find("/undo") == std::string::npos);

    // Each message fits alone but not together: dropping turns helps, and the error says how.
    r = run_quill(args, words(30) + "\n" + words(30) + "\n" + words(30) + "\n");
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("/undo, /reset, a larger -c or --context-overflow drop-oldest") != std::string::npos);
    CHECK(r.err.find("longer than the context") == std::string::npos);
}

}  // namespace test_chat_overflow_error
