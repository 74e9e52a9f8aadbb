// The chat templates of the models people run (tests/data/templates/src, from llama.cpp's models/templates) against
// Jinja2's renderings of them (golden/, made by tests/data/templates/make_renderings.py as Hugging Face renders
// chat templates), byte for byte, through the entry points `quill template` and `quill chat` use.
#include "engine/chat/chat_format.h"
#include "engine/chat/template.h"
#include "tests/support/test_util.h"
#include "tests/unit/chat/golden_clock.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <string>

namespace test_template_corpus {

namespace fs = std::filesystem;
using quill::chat::ChatTemplate;
using quill::chat::TemplateError;
using json = nlohmann::ordered_json;

namespace {

const fs::path kCorpus = fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates";

// Renderings quill does not reproduce, "template/case" -> why. The test still checks that quill renders them or
// fails with a TemplateError, never anything worse.
const std::map<std::string, std::string> kKnownDifferences = {
};

// The variables make_renderings.py passes: cases.json's "variables", then the case's own.
json case_variables(const json& cases, const std::string& name) {
    json vars = cases.at("variables");
    for (const auto& [key, value] : cases.at("cases").at(name).items()) vars[key] = value;
    return vars;
}

struct Outcome {
    bool ok = false;
    std::string text;  // the rendering, or the error's message
};

Outcome render(const fs::path& source, const json& vars) {
    try {
        ChatTemplate t = ChatTemplate::parse(quill::test::read_file(source), source.stem().string());
        return {true, t.render(vars, quill::test::golden_options())};
    } catch (const TemplateError& e) {
        return {false, e.what()};
    }
}

// Jinja2's error file: "ExceptionClass: message".
std::pair<std::string, std::string> read_error(const fs::path& p) {
    std::string s = quill::test::read_file(p);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    const size_t colon = s.find(": ");
    return {s.substr(0, colon), colon == std::string::npos ? "" : s.substr(colon + 2)};
}

}  // namespace

TEST_CASE("the corpus of real chat templates renders as Jinja2 renders it", "[template][corpus]") {
    const json cases = json::parse(quill::test::read_file(kCorpus / "cases.json"));
    REQUIRE(cases.at("strftime_now_date") == "2026-11-29T12:00:00");
    int templates = 0, exact = 0, errors = 0, known = 0;
    for (const auto& entry : fs::directory_iterator(kCorpus / "src")) {
        const std::string name = entry.path().stem().string();
        ++templates;
        for (const auto& [case_name, c] : cases.at("cases").items()) {
            const fs::path txt = kCorpus / "golden" / name / (case_name + ".txt");
            const fs::path err = kCorpus / "golden" / name / (case_name + ".error");
            if (!fs::exists(txt) && !fs::exists(err)) continue;  // the case does not apply to the template
            CAPTURE(name, case_name);
            const Outcome got = render(entry.path(), case_variables(cases, case_name));
            const auto known_it = kKnownDifferences.find(name + "/" + case_name);
            if (known_it != kKnownDifferences.end()) {
                // Rendered, or a TemplateError: render() let nothing else through.
                ++known;
                continue;
            }
            if (fs::exists(txt)) {
                CHECK(got.ok);
                CHECK(got.text == quill::test::read_file(txt));
                exact += got.ok && got.text == quill::test::read_file(txt);
            } else {
                const auto [kind, message] = read_error(err);
                CHECK_FALSE(got.ok);
                // raise_exception's message is the template's own words: quill gives them as they are.
                if (kind == "TemplateError") CHECK(got.text == message);
                ++errors;
            }
        }
    }
    CHECK(templates >= 70);
    CHECK(exact >= 300);  // the renderings of make_renderings.py, and the errors as many again
    CHECK(errors + known >= 50);
}

TEST_CASE("a conversation without tools renders the same through ChatFormat, as quill template does",
          "[template][corpus]") {
    // ChatFormat::render is `quill template` and `quill chat`: messages, add_generation_prompt, bos and eos.
    const json cases = json::parse(quill::test::read_file(kCorpus / "cases.json"));
    int compared = 0;
    for (const char* case_name : {"basic", "no_generation_prompt", "reasoning"}) {
        const json& c = cases.at("cases").at(case_name);
        for (const auto& entry : fs::directory_iterator(kCorpus / "src")) {
            const std::string name = entry.path().stem().string();
            const fs::path txt = kCorpus / "golden" / name / (std::string(case_name) + ".txt");
            if (!fs::exists(txt) || kKnownDifferences.count(name + "/" + case_name)) continue;
            const std::string source = quill::test::read_file(entry.path());
            if (source.find("strftime_now") != std::string::npos) continue;  // ChatFormat reads the clock
            CAPTURE(name, case_name);
            const auto format = quill::chat::ChatFormat::from_source(source, name,
                                                                     cases.at("variables").at("bos_token"),
                                                                     cases.at("variables").at("eos_token"));
            const nlohmann::json messages = nlohmann::json::parse(c.at("messages").dump());
            CHECK(format.render(messages, c.at("add_generation_prompt")).text == quill::test::read_file(txt));
            ++compared;
        }
    }
    CHECK(compared > 100);
}

}  // namespace test_template_corpus
