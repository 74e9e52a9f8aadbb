// tool_choice enforced: a batch line (and quill run --tool-choice) whose tool_choice is "required" or names a
// function is generated under the grammar of one call in the template's syntax, so that even the tiny chat model's
// random weights answer with a call whose arguments validate against the tool's schema; with "auto" they do not.
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace test_tool_choice_cli {

using namespace quill;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

const std::string kHermes = (fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" /
                             "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")
                                .string();

// Bounded strings, so that random weights finish the call within max_tokens.
const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather in a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "now", "description": "The time",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}}])");

const ojson kUser = ojson::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});

std::string tiny() { return test::tiny_model_file(test::TinyModel::bpe_chat).string(); }

// The arguments of a get_weather call, checked against kTools's schema by hand.
void check_weather_arguments(const std::string& arguments) {
    const auto args = nlohmann::json::parse(arguments);
    REQUIRE(args.is_object());
    CHECK(args.size() == 2);
    REQUIRE(args.contains("city"));
    REQUIRE(args["city"].is_string());
    CHECK(std::string(args["city"]).size() <= 6 * 4);  // at most 6 code points
    CHECK((args["unit"] == "c" || args["unit"] == "f"));
}

}  // namespace

TEST_CASE("batch: tool_choice required or named makes the answer a call valid against the schema",
          "[cli][tools]") {
    std::string input;
    for (int seed = 1; seed <= 3; ++seed) {
        input += ojson{{"id", "req" + std::to_string(seed)}, {"messages", kUser}, {"tools", kTools},
                       {"tool_choice", "required"}, {"max_tokens", 800}, {"seed", seed}}
                     .dump() +
                 "\n";
    }
    input += ojson{{"id", "named"}, {"messages", kUser}, {"tools", kTools},
                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                   {"max_tokens", 800}, {"seed", 4}}
                 .dump() +
             "\n";
    input += ojson{{"id", "auto"}, {"messages", kUser}, {"tools", kTools}, {"tool_choice", "auto"},
                   {"max_tokens", 40}, {"seed", 1}}
                 .dump() +
             "\n";
    auto r = test::run_quill({"batch", "-m", tiny(), "--chat-template", kHermes, "--format", "jsonl", "-q"}, input);
    REQUIRE(r.status == 0);
    std::map<std::string, nlohmann::json> rs;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
        auto j = nlohmann::json::parse(line);
        rs[j["id"]] = j;
    }
    for (const std::string id : {"req1", "req2", "req3", "named"}) {
        CAPTURE(id, rs.at(id).dump());
        const auto& rec = rs.at(id);
        CHECK(rec["finish_reason"] == "tool_calls");
        CHECK(rec["text"] == "");
        REQUIRE(rec["tool_calls"].size() == 1);
        const auto& fn = rec["tool_calls"][0]["function"];
        if (id == "named") REQUIRE(fn["name"] == "get_weather");
        if (fn["name"] == "get_weather") check_weather_arguments(fn["arguments"]);
        else CHECK(fn["arguments"] == "{}");
    }
    CAPTURE(rs.at("auto").dump());
    CHECK(!rs.at("auto").contains("tool_calls"));
}

TEST_CASE("run --tool-choice: required or a name makes the --json answer a valid call", "[cli][tools]") {
    const auto dir = test::temp_dir("tool-choice-cli");
    const std::string tools = (dir / "tools.json").string();
    std::ofstream(tools) << kTools.dump();
    const std::vector<std::string> base = {"run", "-m", tiny(), "--chat-template", kHermes, "--tools", tools, "-p",
                                           "What is the weather in Paris?", "--json", "-q"};
    for (const std::string choice : {"required", "get_weather", "now"}) {
        for (const std::string seed : {"1", "2"}) {
            auto args = base;
            args.insert(args.end(), {"--tool-choice", choice, "--seed", seed, "-n", "800"});
            auto r = test::run_quill(args);
            CAPTURE(choice, seed, r.out, r.err);
            REQUIRE(r.status == 0);
            const auto j = nlohmann::json::parse(r.out);
            CHECK(j["text"] == "");
            REQUIRE(j["tool_calls"].size() == 1);
            const auto& fn = j["tool_calls"][0]["function"];
            if (choice != "required") CHECK(fn["name"] == choice);
            if (fn["name"] == "get_weather") check_weather_arguments(fn["arguments"]);
            else CHECK(fn["arguments"] == "{}");
        }
    }
    // auto leaves the random weights to write text; a name no tool has is one error line.
    auto args = base;
    args.insert(args.end(), {"--tool-choice", "auto", "--seed", "1", "-n", "40"});
    auto r = test::run_quill(args);
    REQUIRE(r.status == 0);
    CHECK(!nlohmann::json::parse(r.out).contains("tool_calls"));
    args = base;
    args.insert(args.end(), {"--tool-choice", "nope", "-n", "1"});
    r = test::run_quill(args);
    CHECK(r.status != 0);
    CHECK(r.err.find("quill: error: --tool-choice") != std::string::npos);
    CHECK(r.err.find("nope") != std::string::npos);
}

}  // namespace test_tool_choice_cli
