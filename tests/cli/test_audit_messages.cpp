// Error lines that name the right thing: the file each command reads (a batch input, a text to score, a messages
// or tools file, not "the prompt file"), and only options the command has. On the tiny models the tests write.
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <string>

namespace test_audit_messages {

using namespace quill;

namespace {

// Exactly one line on stderr, "quill: error: ...", and the exit status.
void check_one_error(const test::CommandResult& r, int status, const std::string& says) {
    INFO(r.err);
    CHECK(r.status == status);
    CHECK(r.err.starts_with("quill: error: "));
    CHECK(r.err.find('\n') == r.err.size() - 1);
    CHECK(r.err.find(says) != std::string::npos);
}

}  // namespace

TEST_CASE("a directory given as a command's input file is named as that command's file", "[cli]") {
    const std::string m = test::tiny_model_file(test::TinyModel::spm_chat).string();
    const std::string dir = test::temp_dir("audit-dir-input").string();
    check_one_error(test::run_quill({"batch", "-m", m, "-i", dir}), 1, dir + ": the batch input is a directory");
    check_one_error(test::run_quill({"perplexity", "-m", m, "-f", dir}), 1, dir + ": the text file is a directory");
    check_one_error(test::run_quill({"template", "-m", m, "--messages", dir}), 1,
                    dir + ": the messages file is a directory");
    check_one_error(test::run_quill({"run", "-m", m, "--tools", dir, "-p", "hi"}), 1,
                    dir + ": the tools file is a directory");
    check_one_error(test::run_quill({"run", "-m", m, "-f", dir}), 1, dir + ": the prompt file is a directory");
}

TEST_CASE("a model without a chat template: chat and template ask for --chat-template, run and batch also --raw",
          "[cli][chat]") {
    const std::string m = test::tiny_model_file(test::TinyModel::spm).string();
    for (const auto& args : {std::vector<std::string>{"chat", "-q", "-m", m}, {"template", "-m", m}}) {
        const test::CommandResult r = test::run_quill(args, "hi\n");
        check_one_error(r, 2, "the model has no chat template: give --chat-template NAME|FILE");
        CHECK(r.err.find("--raw") == std::string::npos);  // neither command has --raw
    }
    check_one_error(test::run_quill({"run", "-q", "-m", m, "-p", "hi"}), 2, ") or --raw\n");
    const test::CommandResult batch = test::run_quill({"batch", "-q", "-m", m, "-n", "1"}, "hi\n");
    CHECK(batch.status == 3);
    CHECK(batch.out.find(") or --raw\"") != std::string::npos);
}

TEST_CASE("quill batch --max-input-bytes refuses 0 and a negative number, as run does", "[cli][batch]") {
    const std::string m = test::tiny_model_file(test::TinyModel::spm_chat).string();
    for (const char* bad : {"-1", "0"}) {
        INFO(bad);
        const test::CommandResult r = test::run_quill({"batch", "-q", "-m", m, "-n", "1", "--max-input-bytes", bad}, "hi\n");
        check_one_error(r, 2, "--max-input-bytes: Value " + std::string(bad) + " not in range");
        CHECK(r.out.empty());
    }
}

TEST_CASE("a chat message longer than the context alone is said to be so, not the conversation with drop-oldest",
          "[cli][chat]") {
    const std::string m = test::tiny_model_file(test::TinyModel::spm_chat).string();
    std::string long_message;
    for (int i = 0; i < 80; ++i) long_message += "the big dog ";
    // drop-oldest (the default) has dropped what it could: only a shorter message or a larger -c helps.
    const test::CommandResult r = test::run_quill(
        {"chat", "-q", "-m", m, "-n", "4", "-c", "128", "--temp", "0", "-t", "1"}, "Once\n" + long_message + "\n");
    check_one_error(r, 1, "the message is ");
    CHECK(r.err.find("longer than the context of 128: shorten it or give a larger -c") != std::string::npos);
    CHECK(r.err.find("--context-overflow") == std::string::npos);
}

}  // namespace test_audit_messages
