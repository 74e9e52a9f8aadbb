// Tool calls end to end in `quill chat` and `quill run`: a call shows as "[tool call NAME ARGS]" (not its template
// markers), chat keeps it as an assistant message with tool_calls that /tool answers with a tool message and /save
// writes, run --json says finish_reason "tool_calls"; and a chat format's markers that the vocabulary makes control
// tokens are what --grammar may choose and what --logprobs shows. The tiny chat model's random weights make the calls
// under --tool-choice required (the grammar of one call in the template's syntax).
#include "tests/support/pty_process.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace test_chat_tool_calls_cli {

using namespace quill;
namespace fs = std::filesystem;

namespace {

const std::string kHermes = (fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" /
                             "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")
                                .string();

// One tool whose arguments random weights finish quickly.
constexpr const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters":
    {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}}, "required": ["unit"],
    "additionalProperties": false}}}])";

std::string tiny() { return test::tiny_model_file(test::TinyModel::bpe_chat).string(); }

fs::path tools_file(const fs::path& dir) {
    const fs::path p = dir / "tools.json";
    std::ofstream(p) << kTools;
    return p;
}

}  // namespace

TEST_CASE("run: a tool call shows as [tool call NAME ARGS] and --json says finish_reason tool_calls", "[cli][tools]") {
    const auto dir = test::temp_dir("run-tool-calls");
    const std::vector<std::string> base = {"run", "-m", tiny(), "--chat-template", kHermes, "--tools",
                                           tools_file(dir).string(), "--tool-choice", "required", "--seed", "1",
                                           "-n", "200", "-p", "Weather?"};
    auto args = base;
    args.insert(args.end(), {"--json", "-q"});
    const auto json = test::run_quill(args);
    CAPTURE(json.out, json.err);
    REQUIRE(json.status == 0);
    const auto j = nlohmann::json::parse(json.out);
    REQUIRE(j["tool_calls"].size() == 1);
    CHECK(j["finish_reason"] == "tool_calls");
    const std::string arguments = j["tool_calls"][0]["function"]["arguments"];

    const auto shown = test::run_quill(base);
    CAPTURE(shown.out, shown.err);
    REQUIRE(shown.status == 0);
    CHECK(shown.out == "[tool call get_weather " + arguments + "]");
    CHECK(shown.err.find("finish reason tool_calls") != std::string::npos);
    // A block that is not a call (--grammar says so over --tool-choice) stays text and stops as text does.
    std::ofstream(dir / "g.gbnf") << R"(root ::= "<tool_call>\n{\"name\": 1}\n</tool_call>")" << "\n";
    args = base;
    args.insert(args.end(), {"--grammar", (dir / "g.gbnf").string()});
    const auto malformed = test::run_quill(args);
    CAPTURE(malformed.out, malformed.err);
    REQUIRE(malformed.status == 0);
    CHECK(malformed.out.starts_with("<tool_call>\n{\"name\": 1}\n</tool_call>"));
    args.insert(args.end(), {"--json", "-q"});
    const auto text = test::run_quill(args);
    CAPTURE(text.out, text.err);
    REQUIRE(text.status == 0);
    const auto t = nlohmann::json::parse(text.out);
    CHECK(t["finish_reason"] == "stop");
    CHECK(!t.contains("tool_calls"));
}

TEST_CASE("chat: a call joins the history, /tool answers it and /save keeps both", "[cli][tools]") {
    const auto dir = test::temp_dir("chat-tool-calls");
    const fs::path saved = dir / "saved.json";
    const std::string input = "What is the weather in Paris?\n"
                              "/tool\n"
                              "/set tool-choice auto\n"
                              "/tool {\"temperature\": 18}\n"
                              "/save " + saved.string() + "\n"
                              "/tool again\n";
    const auto r = test::run_quill({"chat", "-m", tiny(), "--chat-template", kHermes, "--tools",
                                    tools_file(dir).string(), "--tool-choice", "required", "--seed", "1", "-n", "300",
                                    "--temp", "0", "-t", "1"},
                                   input);
    CAPTURE(r.out, r.err);
    CHECK(r.status == 1);  // the last /tool had no call to answer
    CHECK(r.err.find("quill: error: /tool: no tool call waits for a result") != std::string::npos);
    CHECK(r.err.find("get_weather (call_") != std::string::npos);  // /tool alone names the call that waits
    const std::string first = r.out.substr(0, r.out.find("\n\n"));
    CHECK(first.starts_with("[tool call get_weather {\"unit\":"));
    CHECK(first.find("<tool_call>") == std::string::npos);

    const auto messages = nlohmann::json::parse(test::read_file(saved))["messages"];
    CAPTURE(messages.dump());
    REQUIRE(messages.size() == 4);
    CHECK(messages[1]["role"] == "assistant");
    CHECK(messages[1]["content"] == "");
    REQUIRE(messages[1]["tool_calls"].size() == 1);
    const auto& call = messages[1]["tool_calls"][0];
    CHECK(call["function"]["name"] == "get_weather");
    CHECK(call["function"]["arguments"].is_object());
    CHECK(first == "[tool call get_weather " + call["function"]["arguments"].dump() + "]");
    CHECK(messages[2] == nlohmann::json{{"role", "tool"}, {"tool_call_id", call["id"]}, {"name", "get_weather"},
                                        {"content", "{\"temperature\": 18}"}});
    CHECK(messages[3]["role"] == "assistant");
    CHECK(!messages[3].contains("tool_calls"));  // tool-choice auto: random weights write text
}

TEST_CASE("run: --grammar may choose a marker that is a control token and --logprobs shows its text",
          "[cli][tools]") {
    const auto dir = test::temp_dir("marker-logprobs");
    test::TinySpec spec = test::tiny_model_spec(test::TinyModel::bpe_chat);
    spec.control_tokens = {"<tool_call>", "</tool_call>"};
    const int32_t marker = static_cast<int32_t>(test::tiny_bpe_vocab().size());
    const fs::path model = dir / "markers.gguf";
    {
        const std::vector<uint8_t> bytes = test::make_tiny_gguf(spec);
        std::ofstream(model, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                     static_cast<std::streamsize>(bytes.size()));
    }
    std::ofstream(dir / "g.gbnf") << "root ::= \"<tool_call>x<tool_call>x<tool_call>x<tool_call>x\"\n";
    int chosen = 0;  // runs in which the grammar took the marker's own token
    for (const std::string seed : {"1", "2", "3", "4"}) {
        const auto r = test::run_quill({"run", "-m", model.string(), "--chat-template", kHermes, "--grammar",
                                        (dir / "g.gbnf").string(), "--temp", "100", "--top-k", "0", "--top-p", "1",
                                        "--min-p", "0", "--seed", seed, "-n", "60", "-p", "Hi", "--json", "-q",
                                        "--logprobs", "0"});
        CAPTURE(seed, r.out, r.err);
        REQUIRE(r.status == 0);
        const auto j = nlohmann::json::parse(r.out);
        CHECK(j["text"] == "<tool_call>x<tool_call>x<tool_call>x<tool_call>x");
        std::string spelled;
        for (const auto& e : j["logprobs"]) {
            spelled += e["token"].get<std::string>();
            if (e["id"] == marker) {
                ++chosen;
                CHECK(e["token"] == "<tool_call>");
                CHECK(e["bytes"].size() == 11);
            }
        }
        CHECK(spelled == j["text"]);  // every token's text, the markers' included
    }
    CHECK(chosen > 0);
}

TEST_CASE("run on a terminal shows a call dim on a line of its own, as the reasoning is shown", "[cli][tools]") {
    const auto dir = test::temp_dir("tool-calls-pty");
    const fs::path grammar = dir / "call.gbnf";
    std::ofstream(grammar) << R"(root ::= "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\"}}\n</tool_call>")"
                           << "\n";
    const std::vector<std::string> common = {"-m", tiny(), "--chat-template", kHermes, "--tools",
                                             tools_file(dir).string(), "--grammar", grammar.string(), "--temp", "0",
                                             "-n", "200", "-q"};
    std::vector<std::string> run = {"run", "-p", "Weather?"};
    run.insert(run.end(), common.begin(), common.end());
    test::PtyProcess p(run, dir.string(), {{"NO_COLOR", std::nullopt}});
    CHECK(p.wait_for("[0m"));
    CHECK(p.wait_exit() == 0);
    CAPTURE(p.output());
    const std::string& out = p.output();
    const size_t text = out.find("Sure."), call = out.find("\033[2m[tool call get_weather {\"unit\":\"c\"}]\033[0m");
    REQUIRE(text != std::string::npos);
    REQUIRE(call != std::string::npos);
    const std::string between = out.substr(text + 5, call - text - 5);
    CHECK((between == "\n" || between == "\r\n"));
    CHECK(p.output().find("<tool_call>") == std::string::npos);
}

}  // namespace test_chat_tool_calls_cli
