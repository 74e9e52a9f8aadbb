// Constrained generation from the command line: run's --json-schema, --regex and --grammar, batch requests with
// their own response_format or grammar, one request's bad schema failing that request alone, and the corpus of
// schemas whose every finished output must validate with Python's jsonschema package (tests/support/schema_corpus.py).
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sys/wait.h>

namespace test_grammar_cli {

using namespace quill;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string stories() {
    const auto p = test::require_testdata("models/stories260K.gguf");
    return p ? p->string() : "";
}

std::vector<json> records(const std::string& out) {
    std::vector<json> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) v.push_back(json::parse(line));
    return v;
}

// Runs tests/support/schema_corpus.py; its exit code 77 is a skip (no jsonschema package outside CI).
void corpus(const std::vector<std::string>& args) {
    std::string cmd = "python3 '" + std::string(QUILL_SOURCE_DIR) + "/tests/support/schema_corpus.py' '" + QUILL_BIN + "'";
    for (const auto& a : args) cmd += " '" + a + "'";
    cmd += " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int status = pclose(p);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 77) {
        test::skip(out);
        return;
    }
    INFO(out);
    CHECK(code == 0);
}

}  // namespace

TEST_CASE("run: --json-schema, --regex and --grammar shape the output, and bad ones fail before the model loads",
          "[grammar][cli]") {
    const std::string model = stories();
    if (model.empty()) return;
    const auto dir = test::temp_dir("grammar-cli");
    auto r = test::run_quill({"run", "--raw", "-m", model, "-p", "Once", "--seed", "3", "--temp", "1", "-n", "64",
                              "--json-schema", R"({"type":"object","properties":{"n":{"type":"integer"}},
                              "required":["n"],"additionalProperties":false})",
                              "--json"});
    REQUIRE(r.status == 0);
    const json rec = json::parse(r.out);
    const json value = json::parse(rec["text"].get<std::string>());
    CHECK(value.size() == 1);
    CHECK(value["n"].is_number_integer());
    CHECK(rec["finish_reason"] == "stop");

    r = test::run_quill({"run", "--raw", "-m", model, "-p", "Once", "--seed", "1", "-n", "40", "-q", "--regex",
                         "(yes|no), [0-9]{2}!"});
    REQUIRE(r.status == 0);
    CHECK((r.out.rfind("yes, ", 0) == 0 || r.out.rfind("no, ", 0) == 0));
    CHECK(r.out.size() == r.out.find(',') + 5);

    const fs::path gbnf = dir / "list.gbnf";
    std::ofstream(gbnf) << "# two items\nroot ::= item item\nitem ::= \"- \" [a-z]{1,8} \"\\n\"\n";
    r = test::run_quill({"run", "--raw", "-m", model, "-p", "Once", "--seed", "2", "-n", "40", "-q", "--grammar",
                         gbnf.string()});
    REQUIRE(r.status == 0);
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 2);
    CHECK(r.out.rfind("- ", 0) == 0);

    // errors: one line each, exit 2, before any model is read (the model path does not exist)
    const fs::path bad = dir / "bad.gbnf";
    std::ofstream(bad) << "root ::= item\nitem ::= \"a\" | (\"b\"\n";
    for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"--grammar", bad.string()}, bad.string() + ":3:1: expected ')'"},
             {{"--json-schema", R"({"type":"string","format":"uri"})"}, "format 'uri' is not supported"},
             {{"--json-schema", R"({"not":{}})"}, "keyword 'not' is not supported"},
             {{"--regex", "a(?!b)"}, "lookarounds and named groups are not supported"},
             {{"--format", "xml"}, "--format 'xml': expected json"},
             {{"--regex", "a", "--json-object"}, "give at most one of"},
         }) {
        std::vector<std::string> full{"run", "-m", (dir / "missing.gguf").string(), "-p", "x"};
        full.insert(full.end(), args.begin(), args.end());
        r = test::run_quill(full);
        INFO(r.err);
        CHECK(r.status == 2);
        CHECK_THAT(r.err, Catch::Contains(message));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
}

TEST_CASE("batch: each request has its own response_format or grammar, and a bad one fails that request alone",
          "[grammar][cli]") {
    const std::string model = stories();
    if (model.empty()) return;
    const std::string input =
        R"({"id":"schema","prompt":"a","seed":1,"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"z":{"enum":[1,2]},"a":{"type":"boolean"}},"required":["z","a"],"additionalProperties":false}}}}
{"id":"object","prompt":"a","seed":2,"response_format":{"type":"json_object"}}
{"id":"gbnf","prompt":"a","seed":3,"grammar":"root ::= [0-9]{3}"}
{"id":"bad","prompt":"a","response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","format":"ipv4"}}}}
{"id":"badgrammar","prompt":"a","grammar":"root ::= x"}
{"id":"free","prompt":"a","seed":4,"max_tokens":5}
{"id":"both","prompt":"a","grammar":"root ::= \"a\"","response_format":{"type":"json_object"}}
)";
    auto r = test::run_quill({"batch", "--raw", "-m", model, "-q", "-n", "200", "--temp", "1"}, input);
    INFO(r.err);
    CHECK(r.status == 3);  // some requests failed
    std::map<std::string, json> by_id;
    for (const json& rec : records(r.out)) by_id[rec["id"]] = rec;
    REQUIRE(by_id.size() == 7);
    const auto s = nlohmann::ordered_json::parse(by_id["schema"]["text"].get<std::string>());
    CHECK(s.begin().key() == "z");  // the schema's order, not the sorted one
    CHECK(s["a"].is_boolean());
    const std::string object = by_id["object"]["text"];
    if (by_id["object"]["finish_reason"] == "stop")
        CHECK(json::parse(object).is_object());
    else
        CHECK(object.rfind("{", 0) == 0);
    CHECK(by_id["gbnf"]["text"].get<std::string>().size() == 3);
    CHECK_THAT(by_id["bad"]["error"]["message"].get<std::string>(), Catch::Contains("format 'ipv4' is not supported"));
    CHECK_THAT(by_id["badgrammar"]["error"]["message"].get<std::string>(),
               Catch::Contains("input line 5: grammar:1:10: rule 'x' is used but not defined"));
    CHECK(by_id["free"]["finish_reason"] == "length");
    CHECK_THAT(by_id["both"]["error"]["message"].get<std::string>(), Catch::Contains("not both"));

    // OpenAI batch bodies, and --json-schema for every request without its own
    const std::string openai =
        R"({"custom_id":"c1","method":"POST","url":"/v1/completions","body":{"prompt":"a","seed":5,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":2,"maxItems":2}}}}}
{"custom_id":"c2","method":"POST","url":"/v1/completions","body":{"prompt":"a","seed":6}}
)";
    r = test::run_quill({"batch", "--raw", "-m", model, "-q", "-n", "100", "--json-schema", R"({"type":"boolean"})"},
                        openai);
    REQUIRE(r.status == 0);
    std::map<std::string, std::string> texts;
    for (const json& rec : records(r.out))
        texts[rec["custom_id"]] = rec["response"]["body"]["choices"][0]["text"].get<std::string>();
    const json arr = json::parse(texts["c1"]);
    CHECK((arr.is_array() && arr.size() == 2));
    CHECK((texts["c2"] == "true" || texts["c2"] == "false"));
}

TEST_CASE("every finished output under each corpus schema validates (SPM: stories260K, 3 seeds)",
          "[grammar][cli][model]") {
    const std::string model = stories();
    if (model.empty()) return;
    corpus({model, "--raw", "--seeds", "3"});
}

TEST_CASE("every finished output under each corpus schema validates (byte-level BPE: default model, 2 seeds)",
          "[grammar][cli][model]") {
    const auto model = test::require_default_model();
    if (!model) return;
    corpus({model->string(), "--seeds", "2", "-n", "200"});
}

}  // namespace test_grammar_cli
