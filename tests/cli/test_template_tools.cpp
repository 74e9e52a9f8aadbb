// `quill template --messages` with an OpenAI chat request ({"messages", "tools", "enable_thinking", ...}): real
// tool-calling templates render the corpus's tool conversations as Jinja2 does, key order of the input included.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

namespace test_template_tools {

using quill::test::run_quill;

namespace {

const std::filesystem::path kTemplates = std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates";

// Templates print strftime_now's date, which the golden files have at cases.json's clock and quill at today's.
std::string without_dates(const std::string& text) {
    static const std::regex date(R"(\d{4}-\d{2}-\d{2}|\d{1,2} [A-Z][a-z]{2,8} \d{4})");
    return std::regex_replace(text, date, "DATE");
}

}  // namespace

TEST_CASE("quill template passes a request's tools and options to real templates as Jinja2 does", "[chat][cli]") {
    // Ordered, so that the request quill reads has the key order Jinja2 saw.
    const auto cases = nlohmann::ordered_json::parse(quill::test::read_file(kTemplates / "cases.json"));
    int rendered = 0, refused = 0;
    for (const char* name : {"Qwen-Qwen3-0.6B", "openai-gpt-oss-120b", "meta-llama-Llama-3.1-8B-Instruct",
                             "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Mistral-Small-3.2-24B-Instruct-2506"}) {
        for (const char* case_name : {"tools", "tools_openai", "options"}) {
            const auto golden = kTemplates / "golden" / name / (std::string(case_name) + ".txt");
            const auto error = kTemplates / "golden" / name / (std::string(case_name) + ".error");
            if (!std::filesystem::exists(golden) && !std::filesystem::exists(error)) continue;
            CAPTURE(name, case_name);
            const nlohmann::ordered_json& request = cases["cases"][case_name];
            std::vector<std::string> args = {"template", "--chat-template", (kTemplates / "src" / name).string() + ".jinja",
                                             "--bos", "<s>", "--eos", "</s>", "--messages", "-"};
            if (!request["add_generation_prompt"].get<bool>()) args.push_back("--no-generation-prompt");
            auto r = run_quill(args, request.dump());
            if (std::filesystem::exists(golden)) {
                REQUIRE(r.status == 0);
                CHECK(without_dates(r.out) == without_dates(quill::test::read_file(golden)));
                ++rendered;
            } else {  // Jinja2 fails too (a None content the template iterates): one error line, no output
                CHECK(r.status != 0);
                CHECK(r.out.empty());
                CHECK(r.err.starts_with("quill: error: "));
                ++refused;
            }
        }
    }
    CHECK(rendered >= 10);
    CHECK(refused >= 2);
}

TEST_CASE("quill template keeps the key order of the messages file in tojson", "[chat][cli]") {
    const std::string tmpl = (quill::test::temp_dir("template_tools") / "args.jinja").string();
    std::ofstream(tmpl) << (
                            "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }}"
                            "\n{% endfor %}{% endfor %}{{ tools | tojson }}\n{{ reasoning_effort }}");
    const std::string request = R"({"reasoning_effort": "high", "messages": [{"role": "assistant", "content": null,
        "tool_calls": [{"function": {"name": "f", "arguments": {"zeta": 1, "alpha": {"y": 2, "b": 3}}}}]}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})";
    auto r = run_quill({"template", "--chat-template", tmpl, "--messages", "-"}, request);
    REQUIRE(r.status == 0);
    CHECK(r.out == "{\"zeta\": 1, \"alpha\": {\"y\": 2, \"b\": 3}}\n"
                   "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}]\n"
                   "high");
}

TEST_CASE("quill template reads a plain array of messages as before and refuses other requests", "[chat][cli]") {
    auto r = run_quill({"template", "--chat-template", "chatml", "--messages", "-", "--no-generation-prompt"},
                       R"([{"role": "user", "content": "Hi"}])");
    REQUIRE(r.status == 0);
    CHECK(r.out == "<|im_start|>user\nHi<|im_end|>\n");
    auto bad = run_quill({"template", "--chat-template", "chatml", "--messages", "-"}, R"({"tools": []})");
    CHECK(bad.status != 0);
    CHECK(bad.err.find("expected a JSON array of messages") != std::string::npos);
}

}  // namespace test_template_tools
