// Chat templates: real templates against Jinja2's renderings (golden files), built-in formats, detection, and the
// model's own template. Constructs and the expression evaluator are in test_template_eval.cpp.
#include "engine/chat/template.h"
#include "engine/format/gguf.h"
#include "tests/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using quill::chat::ChatTemplate;
using quill::chat::RenderOptions;
using quill::chat::TemplateError;
using json = nlohmann::ordered_json;

namespace {

std::string slurp(const fs::path& p) {
    return quill::test::read_file(p);
}

// The golden cases' clock: 2026-11-29 12:00 (golden/cases.json "strftime_now_date").
RenderOptions golden_options() {
    RenderOptions o;
    std::tm tm{};
    tm.tm_year = 2026 - 1900;
    tm.tm_mon = 10;
    tm.tm_mday = 29;
    tm.tm_hour = 12;
    tm.tm_wday = 0;  // a Sunday
    tm.tm_yday = 332;
    o.now = tm;
    return o;
}

json case_variables(const json& cases, const std::string& name) {
    json vars = cases["variables"];
    const json& c = cases["cases"][name];
    vars["messages"] = c["messages"];
    vars["add_generation_prompt"] = c["add_generation_prompt"];
    return vars;
}

}  // namespace

TEST_CASE("every real template renders every golden case as Jinja2 does", "[template]") {
    auto dir = quill::test::require_testdata("templates");
    if (!dir) return;
    json cases = json::parse(slurp(*dir / "golden" / "cases.json"));
    REQUIRE(cases.at("strftime_now_date") == "2026-11-29T12:00:00");
    int templates = 0, checked = 0;
    for (const auto& entry : fs::directory_iterator(*dir / "src")) {
        if (entry.path().extension() != ".jinja") continue;
        std::string name = entry.path().stem().string();
        ++templates;
        ChatTemplate tmpl = ChatTemplate::parse(slurp(entry.path()), name);
        for (const auto& [case_name, c] : cases["cases"].items()) {
            CAPTURE(name, case_name);
            fs::path golden = *dir / "golden" / name / (case_name + ".txt");
            fs::path error = *dir / "golden" / name / (case_name + ".error");
            json vars = case_variables(cases, case_name);
            if (fs::exists(error)) {
                // "TemplateError: <message>": Python's exception class, then the message raise_exception gave.
                std::string expected = slurp(error);
                while (!expected.empty() && expected.back() == '\n') expected.pop_back();
                expected = expected.substr(expected.find(": ") + 2);
                try {
                    tmpl.render(vars, golden_options());
                    FAIL("rendered although Jinja2 raised: " << expected);
                } catch (const TemplateError& e) {
                    CHECK(std::string(e.what()) == expected);
                }
            } else {
                REQUIRE(fs::exists(golden));
                CHECK(tmpl.render(vars, golden_options()) == slurp(golden));
            }
            ++checked;
        }
    }
    CHECK(templates == 7);
    CHECK(checked == 35);
}
