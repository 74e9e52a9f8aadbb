// parse_untrusted_json: JSON from files and stdin parsed with a nesting limit, and messages that say where a text
// stops being JSON; the conversation files of `template --messages` and chat's /load end to end.
#include "engine/error.h"
#include "engine/io/json_input.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>

namespace test_json_input {

using namespace quill;

namespace {

std::string nested(int depth, const std::string& inner = "") {
    return std::string(static_cast<size_t>(depth), '[') + inner + std::string(static_cast<size_t>(depth), ']');
}

// The depth of a tree (its own recursion is bounded by the limit under test).
int depth_of(const nlohmann::json& j) {
    int most = 0;
    if (j.is_structured())
        for (const auto& child : j) most = std::max(most, depth_of(child));
    return most + (j.is_structured() ? 1 : 0);
}

void write_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST_CASE("JSON nested up to 64 levels parses, and one more is an error naming where", "[json]") {
    CHECK(depth_of(parse_untrusted_json(nested(kMaxJsonDepth), "x")) == kMaxJsonDepth);
    CHECK(depth_of(parse_untrusted_json("{\"a\": " + nested(kMaxJsonDepth - 1) + "}", "x")) == kMaxJsonDepth);
    CHECK_THROWS_WITH(parse_untrusted_json(nested(kMaxJsonDepth + 1), "in.json"),
                      "in.json: JSON nested deeper than 64 levels at column 65");
    CHECK_THROWS_AS(parse_untrusted_json(nested(300000), "in.json"), UsageError);
    // A deep tree under a key quill never reads is refused all the same: copying it would overflow the stack.
    CHECK_THROWS_WITH(parse_untrusted_json("{\"id\": 1,\n \"x\": " + nested(100000) + "}", "input line 3"),
                      "input line 3: JSON nested deeper than 64 levels at line 2, column 70");
}

TEST_CASE("try_parse_untrusted_json: the same limit, nullopt instead of an error", "[json]") {
    CHECK(try_parse_untrusted_json(nested(kMaxJsonDepth)).has_value());
    CHECK_FALSE(try_parse_untrusted_json(nested(kMaxJsonDepth + 1)).has_value());
    CHECK_FALSE(try_parse_untrusted_json(nested(300000)).has_value());
    CHECK_FALSE(try_parse_untrusted_json("{\"a\": 1,}").has_value());
    CHECK(try_parse_untrusted_json("{\"a\": [1]}").value()["a"][0] == 1);
}

TEST_CASE("brackets inside strings do not count as nesting", "[json]") {
    const std::string many = std::string(1000, '[') + "\\\"{{{" + std::string(1000, '{');
    const nlohmann::json j = parse_untrusted_json("{\"s\": \"" + many + "\", \"t\": [\"]]]\"]}", "x");
    CHECK(j["s"] == std::string(1000, '[') + "\"{{{" + std::string(1000, '{'));
    CHECK(j["t"][0] == "]]]");
    // An escaped backslash ends before the quote, which then closes the string.
    CHECK(parse_untrusted_json(R"(["\\", [[]]])", "x")[0] == "\\");
    CHECK(json_too_deep_at(R"(["\\", [[]]])", 2) == 8);
    CHECK(json_too_deep_at(R"(["\", [[]]"])", 1) == std::string::npos);
    // Closing brackets before any opening one (not JSON) never make the depth negative.
    CHECK(json_too_deep_at("]]]][[", 1) == 5);
}

TEST_CASE("text that is not JSON gets one message with the place and the parser's reason", "[json]") {
    CHECK_THROWS_WITH(parse_untrusted_json(R"({"id": "a", "prompt": "x",})", "input line 4"),
                      Catch::StartsWith("input line 4: not valid JSON at column 27: syntax error while parsing "
                                        "object key"));
    CHECK_THROWS_WITH(parse_untrusted_json("[1,\n2,\n}", "m.json"),
                      Catch::StartsWith("m.json: not valid JSON at line 3, column 1: "));
    CHECK_THROWS_WITH(parse_untrusted_json("", "stdin"), Catch::StartsWith("stdin: not valid JSON at column 1: "));
    // Bytes that are not UTF-8 are quoted escaped, never raw, and a long token is cut.
    try {
        parse_untrusted_json("{\"p\": \"ab\xff\"}", "f");
        FAIL("no error");
    } catch (const UsageError& e) {
        const std::string m = e.what();
        CHECK_THAT(m, Catch::Contains("UTF-8") && Catch::Contains("\\xff"));
        CHECK(m.find('\xff') == std::string::npos);
    }
    try {
        parse_untrusted_json("[\"" + std::string(100000, 'a'), "f");
        FAIL("no error");
    } catch (const UsageError& e) {
        CHECK(std::string(e.what()).size() < 300);
    }
}

TEST_CASE("template --messages and chat /load refuse JSON nested too deep with one error line", "[chat]") {
    const auto dir = test::temp_dir("hostile-messages");
    const std::string deep(300000, '['), deep_end(300000, ']');
    write_file(dir / "wrapped.json", R"({"messages": )" + deep + deep_end + "}\n");
    write_file(dir / "field.json", R"([{"role": "user", "content": "hi", "x": )" + deep + deep_end + "}]\n");
    for (const char* name : {"wrapped.json", "field.json"}) {
        INFO(name);
        const std::string path = (dir / name).string();
        auto r = test::run_quill({"template", "--chat-template", "chatml", "--messages", path});
        CHECK(r.status == 2);  // a malformed conversation file, as one that is not JSON at all
        CHECK(r.out.empty());
        CHECK_THAT(r.err, Catch::StartsWith("quill: error: " + path + ": JSON nested deeper than 64 levels at column "));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
    // /load says what is wrong and the chat goes on; so it does for a system message whose content is null.
    write_file(dir / "null.json", R"([{"role": "system", "content": null}, {"role": "user", "content": "hi"}])");
    auto chat = test::run_quill({"chat", "-m", test::tiny_model_file(test::TinyModel::spm).string(), "--chat-template",
                                 "chatml", "-t", "1"},
                                "/load " + (dir / "field.json").string() + "\n/load " + (dir / "null.json").string() +
                                    "\n/stats\n");
    CHECK(chat.status == 1);  // from a pipe, a failed command makes the final status 1; the chat went on
    CHECK_THAT(chat.err, Catch::Contains("field.json: JSON nested deeper than 64 levels"));
    CHECK_THAT(chat.err, Catch::Contains("quill: loaded 1 messages from"));
    CHECK_THAT(chat.err, Catch::Contains("quill: 1 messages;"));
}

}  // namespace test_json_input
