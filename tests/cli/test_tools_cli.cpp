// Tools through the commands that generate: `quill batch` lines with tools and `quill run` / `quill chat --tools
// FILE` give the template the prompt `quill template --messages` renders for the same request (the same tokens), and
// an answer in the template's tool-call syntax comes back as OpenAI tool_calls. The tiny chat model writes the calls
// under a grammar, so that its random weights answer with one.
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

namespace test_tools_cli {

using namespace quill;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

const fs::path kTemplates = fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates";
const std::string kHermes = (kTemplates / "src" / "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja").string();

const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}}])");

// A grammar that makes the answer one Hermes tool call.
const std::string kCallGrammar =
    R"(root ::= "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>")";

std::string tiny() { return test::tiny_model_file(test::TinyModel::bpe_chat).string(); }

// The token count of `quill template --tokens` for a request.
size_t template_tokens(const ojson& request, const std::string& chat_template) {
    auto r = test::run_quill({"template", "-m", tiny(), "--chat-template", chat_template, "--messages", "-", "--tokens"},
                             request.dump());
    REQUIRE(r.status == 0);
    const std::string ids = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
    std::istringstream in(ids);
    size_t n = 0;
    for (std::string id; in >> id;) ++n;
    return n;
}

std::vector<nlohmann::json> records(const std::string& out) {
    std::vector<nlohmann::json> rs;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) rs.push_back(nlohmann::json::parse(line));
    return rs;
}

// The id -> record map of a batch output.
std::map<std::string, nlohmann::json> by_id(const std::string& out) {
    std::map<std::string, nlohmann::json> m;
    for (auto& r : records(out)) m[r.contains("custom_id") ? r["custom_id"] : r["id"]] = r;
    return m;
}

fs::path write_file(const fs::path& path, const std::string& text) {
    std::ofstream(path) << text;
    return path;
}

// "context N/" of chat's /stats line: the tokens in the conversation's cache.
long cached_tokens(const std::string& text) {
    std::smatch m;
    REQUIRE(std::regex_search(text, m, std::regex(R"(context (\d+)/)")));
    return std::stol(m[1]);
}

const ojson kUser = ojson::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});

}  // namespace

TEST_CASE("batch: a line's tools give the prompt quill template --messages renders", "[cli][tools]") {
    ojson line = {{"id", "w"}, {"max_tokens", 1}, {"messages", kUser}, {"tools", kTools}, {"tool_choice", "auto"}};
    ojson plain = {{"id", "p"}, {"max_tokens", 1}, {"messages", kUser}};
    const size_t expected = template_tokens(line, kHermes);
    REQUIRE(template_tokens(plain, kHermes) + 50 < expected);  // the tools are in the prompt
    const std::string bad = R"({"id": "bad", "messages": [{"role": "user", "content": "Hi"}], "tools": [{"function": {}}]})";
    auto r = test::run_quill({"batch", "-m", tiny(), "--chat-template", kHermes, "--format", "jsonl", "-q", "--seed", "1"},
                             line.dump() + "\n" + bad + "\n" + plain.dump() + "\n");
    CHECK(r.status == 3);  // the bad line's error record, and the others done
    const auto rs = by_id(r.out);
    REQUIRE(rs.size() == 3);
    CHECK(rs.at("w")["usage"]["prompt_tokens"] == expected);
    CHECK(rs.at("p")["usage"]["prompt_tokens"] == template_tokens(plain, kHermes));
    CHECK(rs.at("bad")["error"]["message"] ==
          "input line 2: tool 1 is not {\"type\": \"function\", \"function\": {\"name\": ...}}");
}

TEST_CASE("batch: an answer in the template's tool-call syntax comes back as OpenAI tool_calls", "[cli][tools]") {
    const ojson body = {{"messages", kUser}, {"tools", kTools}, {"max_tokens", 300}, {"grammar", kCallGrammar}};
    ojson line = {{"id", "call"}};
    line.update(body);
    ojson untooled = line;
    untooled["id"] = "text";
    untooled.erase("tools");
    auto r = test::run_quill({"batch", "-m", tiny(), "--chat-template", kHermes, "--format", "jsonl", "-q"},
                             line.dump() + "\n" + untooled.dump() + "\n");
    REQUIRE(r.status == 0);
    const auto rs = by_id(r.out);
    const auto& call = rs.at("call");
    CHECK(call["text"] == "");
    CHECK(call["finish_reason"] == "tool_calls");
    REQUIRE(call["tool_calls"].size() == 1);
    CHECK(call["tool_calls"][0]["type"] == "function");
    CHECK(call["tool_calls"][0]["function"]["name"] == "get_weather");
    CHECK(call["tool_calls"][0]["function"]["arguments"] == R"({"city":"Paris","unit":"c"})");
    CHECK(std::string(call["tool_calls"][0]["id"]).starts_with("call_"));
    // Without tools offered the same answer is text.
    CHECK(!rs.at("text").contains("tool_calls"));
    CHECK(std::string(rs.at("text")["text"]).starts_with("<tool_call>"));

    const ojson openai = {{"custom_id", "c1"}, {"method", "POST"}, {"url", "/v1/chat/completions"}, {"body", body}};
    r = test::run_quill({"batch", "-m", tiny(), "--chat-template", kHermes, "-q"}, openai.dump() + "\n");
    REQUIRE(r.status == 0);
    const auto choice = nlohmann::json::parse(r.out)["response"]["body"]["choices"][0];
    CHECK(choice["finish_reason"] == "tool_calls");
    CHECK(choice["message"]["content"].is_null());
    CHECK(choice["message"]["tool_calls"][0]["function"]["arguments"] == R"({"city":"Paris","unit":"c"})");
}

TEST_CASE("run --tools: the template's prompt with the tools, and the answer's calls in --json", "[cli][tools]") {
    const auto dir = test::temp_dir("tools-cli");
    const std::string tools = write_file(dir / "tools.json", kTools.dump()).string();
    const ojson request = {{"messages", kUser}, {"tools", kTools}};
    auto r = test::run_quill({"run", "-m", tiny(), "--chat-template", kHermes, "--tools", tools, "-p",
                              "What is the weather in Paris?", "-n", "1", "--json", "-q"});
    REQUIRE(r.status == 0);
    CHECK(nlohmann::json::parse(r.out)["prompt_tokens"] == template_tokens(request, kHermes));

    const std::string grammar = write_file(dir / "call.gbnf", kCallGrammar).string();
    r = test::run_quill({"run", "-m", tiny(), "--chat-template", kHermes, "--tools", tools, "-p",
                         "What is the weather in Paris?", "-n", "300", "--grammar", grammar, "--json", "-q"});
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["text"] == "");
    REQUIRE(j["tool_calls"].size() == 1);
    CHECK(j["tool_calls"][0]["function"]["name"] == "get_weather");
    CHECK(j["tool_calls"][0]["function"]["arguments"] == R"({"city":"Paris","unit":"c"})");
}

TEST_CASE("chat --tools: every turn is rendered with the tools", "[cli][tools]") {
    const auto dir = test::temp_dir("tools-chat");
    const std::string tools = write_file(dir / "tools.json", kTools.dump()).string();
    const std::vector<std::string> args = {"chat", "-m", tiny(), "--chat-template", kHermes, "-n", "1", "--temp", "0"};
    const std::string input = "What is the weather in Paris?\n/stats\n";
    auto plain = test::run_quill(args, input);
    std::vector<std::string> with = args;
    with.insert(with.end(), {"--tools", tools});
    auto tooled = test::run_quill(with, input);
    REQUIRE(plain.status == 0);
    REQUIRE(tooled.status == 0);
    const long added = template_tokens({{"messages", kUser}, {"tools", kTools}}, kHermes) -
                       template_tokens({{"messages", kUser}}, kHermes);
    CHECK(added > 50);
    CHECK(cached_tokens(tooled.out + tooled.err) - cached_tokens(plain.out + plain.err) == added);
}

TEST_CASE("a --tools file that is not an array of tool definitions is one error line", "[cli][tools]") {
    const auto dir = test::temp_dir("tools-bad");
    const std::string not_array = write_file(dir / "tools.json", R"({"tools": []})").string();
    const std::string no_name = write_file(dir / "noname.json", R"([{"type": "function", "function": {}}])").string();
    const std::string not_json = write_file(dir / "broken.json", "[{").string();
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"run", "-p", "Hi", "--tools", not_array}, "--tools " + not_array + ": \"tools\" must be a JSON array"},
        {{"run", "-p", "Hi", "--tools", no_name}, "--tools " + no_name + ": tool 1 is not"},
        {{"run", "-p", "Hi", "--tools", not_json}, "--tools " + not_json + ": not valid JSON"},
        {{"run", "-p", "Hi", "--tools", (dir / "missing.json").string()}, "missing.json"},
        {{"chat", "--tools", no_name}, "--tools " + no_name + ": tool 1 is not"},
        {{"run", "-p", "Hi", "--raw", "--tools", no_name}, "--raw"},
    };
    for (const auto& [args, message] : cases) {
        std::vector<std::string> full = args;
        full.insert(full.begin() + 1, {"-m", tiny(), "--chat-template", kHermes});
        CAPTURE(full);
        auto r = test::run_quill(full, "Hi\n");
        CHECK(r.status != 0);
        CHECK(r.out.empty());
        CHECK(r.err.starts_with("quill: error: "));
        CHECK(r.err.find(message) != std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
}

}  // namespace test_tools_cli
