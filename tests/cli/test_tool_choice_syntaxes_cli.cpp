// tool_choice enforced in every tool-call syntax quill reads: a batch line (quill run --tool-choice, quill chat
// --tool-choice and /set tool-choice) whose tool_choice is "required" or names a function is generated under the
// grammar of one call in the syntax of the template (Qwen3-Coder XML, Mistral's NAME[ARGS] and list forms, gpt-oss
// harmony), so that even the tiny chat model's random weights answer with a call that parses back, to the allowed
// tool, with arguments valid against its schema. A choice that names no offered tool is that line's error.
#include "engine/chat/tool_calls.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace test_tool_choice_syntaxes_cli {

using namespace quill;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

std::string template_path(const std::string& name) {
    return (fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" / (name + ".jinja")).string();
}

// Bounded values, so that random weights finish the call within max_tokens.
const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather in a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["c", "f"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "now", "description": "The time",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}}])");

const ojson kUser = ojson::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});

std::string tiny() { return test::tiny_model_file(test::TinyModel::bpe_chat).string(); }

// A call's arguments, checked against kTools's schema by hand.
void check_arguments(const std::string& name, const std::string& arguments) {
    CAPTURE(name, arguments);
    const auto args = nlohmann::json::parse(arguments);
    REQUIRE(args.is_object());
    if (name == "now") {
        CHECK(args.empty());
        return;
    }
    REQUIRE(name == "get_weather");
    for (const auto& [key, _] : args.items()) CHECK((key == "city" || key == "unit" || key == "days"));
    REQUIRE(args.contains("city"));
    REQUIRE(args["city"].is_string());
    const std::string city = args["city"];
    CHECK(std::count_if(city.begin(), city.end(), [](char c) { return (c & 0xC0) != 0x80; }) <= 6);
    CHECK((args["unit"] == "c" || args["unit"] == "f"));
    if (args.contains("days")) CHECK((args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7));
}

struct Syntax {
    std::string template_name;
    chat::ToolCallSyntax syntax;
};

const std::vector<Syntax> kSyntaxes = {{"Qwen3-Coder", chat::ToolCallSyntax::qwen3_xml},
                                       {"mistralai-Ministral-3-14B-Reasoning-2512", chat::ToolCallSyntax::mistral},
                                       {"mistralai-Mistral-Nemo-Instruct-2407", chat::ToolCallSyntax::mistral_list},
                                       {"openai-gpt-oss-120b", chat::ToolCallSyntax::harmony}};

}  // namespace

TEST_CASE("batch: tool_choice makes a valid call in Qwen3-Coder XML, both Mistral forms and harmony",
          "[cli][tools]") {
    for (const Syntax& s : kSyntaxes) {
        CAPTURE(s.template_name);
        REQUIRE(chat::tool_call_syntax(test::read_file(template_path(s.template_name))) == s.syntax);
        std::string input;
        for (int seed = 1; seed <= 2; ++seed)
            input += ojson{{"id", "req" + std::to_string(seed)}, {"messages", kUser}, {"tools", kTools},
                           {"tool_choice", "required"}, {"max_tokens", 1500}, {"seed", seed}}
                         .dump() +
                     "\n";
        for (const std::string name : {"get_weather", "now"})
            input += ojson{{"id", name}, {"messages", kUser}, {"tools", kTools},
                           {"tool_choice", {{"type", "function"}, {"function", {{"name", name}}}}},
                           {"max_tokens", 1500}, {"seed", 3}}
                         .dump() +
                     "\n";
        // Errors are the line's own: a function not offered, required with no tools.
        input += ojson{{"id", "nope"}, {"messages", kUser}, {"tools", kTools},
                       {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}
                     .dump() +
                 "\n";
        input += ojson{{"id", "no-tools"}, {"messages", kUser}, {"tool_choice", "required"}}.dump() + "\n";
        auto r = test::run_quill(
            {"batch", "-m", tiny(), "--chat-template", template_path(s.template_name), "--format", "jsonl", "-q"},
            input);
        CAPTURE(r.err);
        std::map<std::string, nlohmann::json> rs;
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);) {
            auto j = nlohmann::json::parse(line);
            rs[j["id"]] = j;
        }
        REQUIRE(rs.size() == 6);
        for (const std::string id : {"req1", "req2", "get_weather", "now"}) {
            const auto& rec = rs.at(id);
            CAPTURE(id, rec.dump());
            CHECK(rec["finish_reason"] == "tool_calls");
            // harmony may think first: the analysis message stays in the text
            if (s.syntax == chat::ToolCallSyntax::harmony)
                CHECK((rec["text"] == "" || rec["text"].get<std::string>().starts_with("<|channel|>analysis")));
            else
                CHECK(rec["text"] == "");
            REQUIRE(rec["tool_calls"].size() == 1);
            const auto& fn = rec["tool_calls"][0]["function"];
            if (id == "get_weather" || id == "now") CHECK(fn["name"] == id);
            check_arguments(fn["name"], fn["arguments"]);
        }
        CHECK(rs.at("nope")["error"]["message"].get<std::string>().find("\"nope\"") != std::string::npos);
        CHECK(rs.at("no-tools")["error"]["message"].get<std::string>().find("required") != std::string::npos);
        CHECK(r.status != 0);  // some lines failed
    }
}

TEST_CASE("run --tool-choice in Qwen3-Coder XML and harmony, and required with no tools is one error line",
          "[cli][tools]") {
    const auto dir = test::temp_dir("tool-choice-syntaxes");
    const std::string tools = (dir / "tools.json").string(), none = (dir / "none.json").string();
    std::ofstream(tools) << kTools.dump();
    std::ofstream(none) << "[]";
    for (const std::string name : {"Qwen3-Coder", "openai-gpt-oss-120b"}) {
        auto r = test::run_quill({"run", "-m", tiny(), "--chat-template", template_path(name), "--tools", tools, "-p",
                                  "Weather?", "--json", "-q", "--tool-choice", "get_weather", "--seed", "5", "-n",
                                  "1500"});
        CAPTURE(name, r.out, r.err);
        REQUIRE(r.status == 0);
        const auto j = nlohmann::json::parse(r.out);
        REQUIRE(j["tool_calls"].size() == 1);
        CHECK(j["tool_calls"][0]["function"]["name"] == "get_weather");
        check_arguments("get_weather", j["tool_calls"][0]["function"]["arguments"]);
    }
    auto r = test::run_quill({"run", "-m", tiny(), "--chat-template", template_path("Qwen3-Coder"), "--tools", none,
                              "-p", "Weather?", "-q", "--tool-choice", "required", "-n", "1"});
    CHECK(r.status != 0);
    CHECK(r.err.starts_with("quill: error: --tool-choice"));
    CHECK(r.err.find("required") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("chat --tool-choice forces each reply to be a call, and /set tool-choice changes it", "[cli][tools]") {
    const auto dir = test::temp_dir("chat-tool-choice");
    const std::string tools = (dir / "tools.json").string();
    std::ofstream(tools) << kTools.dump();
    const std::string tmpl = template_path("mistralai-Ministral-3-14B-Reasoning-2512");
    const std::vector<std::string> base = {"chat", "-m", tiny(), "--chat-template", tmpl, "--tools", tools, "-q",
                                           "--seed", "2", "-n", "400"};
    auto args = base;
    args.insert(args.end(), {"--tool-choice", "required"});
    // Two forced replies (any tool, then now, each answered by /tool), free ones, a choice that names no tool, and
    // the choice shown.
    auto r = test::run_quill(args, "Weather in Paris?\n/set tool-choice now\n/tool 18 C\n/set tool-choice auto\n"
                                   "/tool 12:00\nThanks.\n/set tool-choice nope\n/set\n");
    CAPTURE(r.out, r.err);
    // Each call shows as "[tool call NAME ARGS]", a reply of its own.
    chat::ParsedAnswer parsed;
    for (size_t at = 0; (at = r.out.find("[tool call ", at)) != std::string::npos;) {
        const size_t name = at + 11, args = r.out.find(' ', name), end = r.out.find("]\n\n", args);
        REQUIRE(end != std::string::npos);
        parsed.calls.push_back({r.out.substr(name, args - name), r.out.substr(args + 1, end - args - 1)});
        at = end;
    }
    CHECK(r.out.find("[TOOL_CALLS]") == std::string::npos);
    REQUIRE(parsed.calls.size() == 2);
    check_arguments(parsed.calls[0].name, parsed.calls[0].arguments);
    CHECK(parsed.calls[1].name == "now");
    check_arguments(parsed.calls[1].name, parsed.calls[1].arguments);
    CHECK(r.err.find("quill: error: /set tool-choice: \"tool_choice\" names the function \"nope\"") !=
          std::string::npos);
    CHECK(r.err.find("tool-choice auto\n") != std::string::npos);  // /set lists it; nope left it as it was
    CHECK(r.status == 1);  // a command failed, from a pipe
    // A name no tool has, from the start: one error line, nothing generated.
    args = base;
    args.insert(args.end(), {"--tool-choice", "nope"});
    r = test::run_quill(args, "Hi\n");
    CHECK(r.status != 0);
    CHECK(r.err.find("quill: error: --tool-choice") != std::string::npos);
    CHECK(r.err.find("\"nope\"") != std::string::npos);
    CHECK(r.out.empty());
}

}  // namespace test_tool_choice_syntaxes_cli
