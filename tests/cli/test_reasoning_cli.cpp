// --reasoning on `quill run` and `quill chat`, and reasoning_content in `run --json` and `batch` records: a tiny
// model whose output a grammar makes a reasoning model's (<think>plan</think> then the answer) under a template that
// has think blocks (Qwen3's).
#include "tests/support/pty_process.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace test_reasoning_cli {

using namespace quill;
namespace fs = std::filesystem;

namespace {

struct Files {
    std::string model = test::tiny_model_file(test::TinyModel::bpe_chat).string();
    std::string qwen3 = (fs::path(QUILL_SOURCE_DIR) / "tests/data/templates/src/Qwen-Qwen3-0.6B.jinja").string();
    std::string grammar;

    Files() {
        const fs::path dir = test::temp_dir("reasoning_cli");
        grammar = (dir / "think.gbnf").string();
        std::ofstream(grammar) << "root ::= \"<think>\\nFirst, plan.\\n</think>\\n\\nThe answer.\"\n";
    }
    std::vector<std::string> run(std::vector<std::string> more) const {
        std::vector<std::string> args{"run", "-m", model, "--chat-template", qwen3, "--grammar", grammar, "--temp", "0",
                                      "-n", "40", "-q", "-p", "Hi"};
        args.insert(args.end(), more.begin(), more.end());
        return args;
    }
    std::vector<std::string> chat(std::vector<std::string> more) const {
        std::vector<std::string> args{"chat", "-m", model, "--chat-template", qwen3, "--grammar", grammar, "--temp", "0",
                                      "-n", "40", "-q"};
        args.insert(args.end(), more.begin(), more.end());
        return args;
    }
};

}  // namespace

TEST_CASE("quill run shows the reasoning framed and then the answer, and --reasoning hide prints the answer alone",
          "[cli]") {
    const Files f;
    auto r = test::run_quill(f.run({}));
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(r.out == "Thinking...\nFirst, plan.\n...done thinking.\n\nThe answer.");
    r = test::run_quill(f.run({"--reasoning", "hide"}));
    REQUIRE(r.status == 0);
    CHECK(r.out == "The answer.");
    r = test::run_quill(f.run({"--reasoning", "maybe"}));
    CHECK(r.status != 0);
    CHECK(r.err.find("--reasoning") != std::string::npos);
}

TEST_CASE("quill run --json gives reasoning_content apart from text", "[cli]") {
    const Files f;
    const auto r = test::run_quill(f.run({"--json"}));
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["text"] == "The answer.");
    CHECK(j["reasoning_content"] == "First, plan.");
}

TEST_CASE("quill chat through a pipe shows each reply's reasoning framed, or hides it", "[cli]") {
    const Files f;
    auto r = test::run_quill(f.chat({}), "Hi\nAgain\n");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const std::string reply = "Thinking...\nFirst, plan.\n...done thinking.\n\nThe answer.\n\n";
    CHECK(r.out == reply + reply);
    r = test::run_quill(f.chat({"--reasoning", "hide"}), "Hi\n");
    REQUIRE(r.status == 0);
    CHECK(r.out == "The answer.\n\n");
}

TEST_CASE("quill run on a terminal shows the reasoning dim, with no frame", "[cli]") {
    const Files f;
    test::PtyProcess p(f.run({}), test::temp_dir("reasoning_pty").string(), {{"NO_COLOR", std::nullopt}});
    CHECK(p.wait_for("The answer."));
    CHECK(p.wait_exit() == 0);
    CHECK(p.output().find("\033[2mFirst, plan.\033[0m") != std::string::npos);
    CHECK(p.output().find("Thinking...") == std::string::npos);
}

TEST_CASE("quill batch records give the reasoning as reasoning_content", "[cli]") {
    const Files f;
    const auto r = test::run_quill({"batch", "-m", f.model, "--chat-template", f.qwen3, "--grammar", f.grammar, "--temp",
                                    "0", "-n", "40", "-q", "--format", "jsonl"},
                                   R"({"id": "a", "messages": [{"role": "user", "content": "Hi"}]})" "\n");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["text"] == "The answer.");
    CHECK(j["reasoning_content"] == "First, plan.");
}

}  // namespace test_reasoning_cli
