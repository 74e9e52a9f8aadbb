// A real model's chat template given as a file (--chat-template FILE): gpt-oss's harmony template through
// `quill template`, `quill run` and `quill chat` on the default model, as Jinja2 renders it.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <regex>
#include <sstream>

namespace test_template_files {

using quill::test::run_quill;

namespace {

const std::filesystem::path kTemplates = std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates";
const std::string kGptOss = (kTemplates / "src" / "openai-gpt-oss-120b.jinja").string();

// The template prints strftime_now's date, which the golden file has at cases.json's clock and quill at today's.
std::string without_date(const std::string& text) {
    return std::regex_replace(text, std::regex("Current date: \\d{4}-\\d{2}-\\d{2}"), "Current date: DATE");
}

size_t count_ids(const std::string& line) {
    std::istringstream ss(line);
    size_t n = 0;
    for (int id; ss >> id;) ++n;
    return n;
}

}  // namespace

TEST_CASE("quill template renders gpt-oss's harmony template from a file as Jinja2 does", "[chat][model]") {
    auto model = quill::test::require_default_model();
    if (!model) return;
    const nlohmann::json cases = nlohmann::json::parse(quill::test::read_file(kTemplates / "cases.json"));
    for (const char* case_name : {"basic", "reasoning"}) {
        CAPTURE(case_name);
        const nlohmann::json& c = cases["cases"][case_name];
        std::vector<std::string> args = {"template", "-m",    model->string(), "--chat-template", kGptOss,
                                         "--bos",    "<s>",   "--eos",         "</s>",            "--messages", "-"};
        if (!c["add_generation_prompt"].get<bool>()) args.push_back("--no-generation-prompt");
        auto r = run_quill(args, c["messages"].dump());
        REQUIRE(r.status == 0);
        const std::string golden = quill::test::read_file(kTemplates / "golden" / "openai-gpt-oss-120b" /
                                                          (std::string(case_name) + ".txt"));
        CHECK(without_date(r.out) == without_date(golden));
    }
}

TEST_CASE("quill run and quill chat prompt the default model through gpt-oss's template file", "[chat][model]") {
    auto model = quill::test::require_default_model();
    if (!model) return;
    const std::string m = model->string();
    // The prompt `run` feeds is the one `quill template --tokens` prints.
    auto t = run_quill({"template", "-m", m, "--chat-template", kGptOss, "--messages", "-", "--tokens"},
                       R"([{"role": "user", "content": "Why is the sky blue?"}])");
    REQUIRE(t.status == 0);
    CHECK(t.out.find("<|start|>user<|message|>Why is the sky blue?<|end|><|start|>assistant") != std::string::npos);
    const size_t last_line = t.out.rfind('\n', t.out.size() - 2);
    REQUIRE(last_line != std::string::npos);
    auto run = run_quill({"run", "-m", m, "--chat-template", kGptOss, "-p", "Why is the sky blue?", "--temp", "0", "-n",
                          "8", "--json"});
    REQUIRE(run.status == 0);
    const auto j = nlohmann::json::parse(run.out);
    CHECK(j["prompt_tokens"].get<size_t>() == count_ids(t.out.substr(last_line + 1)));
    CHECK(j["completion_tokens"].get<int>() > 0);

    // Two turns of chat: the first reply is run's, so the same template made the same prompt.
    auto plain = run_quill({"run", "-m", m, "--chat-template", kGptOss, "-p", "Why is the sky blue?", "--temp", "0",
                            "-n", "8"});
    REQUIRE(plain.status == 0);
    auto chat = run_quill({"chat", "-m", m, "--chat-template", kGptOss, "--temp", "0", "-n", "8"},
                          "Why is the sky blue?\nAnd the sea?\n");
    REQUIRE(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
    const size_t sep = chat.out.find("\n\n");
    REQUIRE(sep != std::string::npos);
    CHECK(chat.out.substr(0, sep) == plain.out);
    CHECK(chat.out.size() > sep + 2);  // a second reply
}

}  // namespace test_template_files
