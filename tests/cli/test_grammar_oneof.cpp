// A JSON schema's oneOf from the command line: one whose alternatives may overlap is generated as anyOf and quill
// says so once on stderr (run: for its schema; batch: once in the run, whatever the requests); an exact one says
// nothing.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace test_grammar_oneof {

using namespace quill;

namespace {

std::string stories() {
    const auto p = test::require_testdata("models/stories260K.gguf");
    return p ? p->string() : "";
}

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

const char* const kOverlapping = R"({"oneOf":[{"type":"integer"},{"type":"number"}]})";
const char* const kExact = R"({"oneOf":[{"type":"integer"},{"type":"boolean"}]})";

}  // namespace

TEST_CASE("run: a oneOf that may overlap is said once on stderr, and an exact one says nothing", "[grammar][cli]") {
    const std::string model = stories();
    if (model.empty()) return;
    auto r = test::run_quill(
        {"run", "--raw", "-m", model, "-q", "-n", "100", "--seed", "1", "--json-schema", kOverlapping, "a"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(count(r.err, "quill: warning: --json-schema: JSON schema at #: oneOf's alternatives may overlap") == 1);
    CHECK(count(r.err, "oneOf") == 1);
    CHECK(nlohmann::json::parse(r.out).is_number());
    r = test::run_quill({"run", "--raw", "-m", model, "-q", "-n", "100", "--seed", "1", "--json-schema", kExact, "a"});
    REQUIRE(r.status == 0);
    CHECK(count(r.err, "oneOf") == 0);
}

TEST_CASE("batch: requests whose oneOf may overlap get one warning in the run, naming the first", "[grammar][cli]") {
    const std::string model = stories();
    if (model.empty()) return;
    const std::string rf = R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)";
    const std::string input =
        std::string(R"({"id":"exact","prompt":"a","seed":1)") + rf + kExact + "}}}\n" +
        R"({"id":"first","prompt":"a","seed":2)" + rf + kOverlapping + "}}}\n" +
        R"({"id":"second","prompt":"a","seed":3)" + rf +
        R"({"properties":{"v":{"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]}}})" + "}}}\n" +
        R"({"id":"again","prompt":"a","seed":4)" + rf + kOverlapping + "}}}\n";
    auto r = test::run_quill({"batch", "--raw", "-m", model, "-q", "-n", "40", "--parallel", "1"}, input);
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(count(r.err, "oneOf") == 1);
    CHECK(count(r.err, "quill: warning: input line 2: response_format: JSON schema at #: oneOf's alternatives may "
                       "overlap") == 1);
}

}  // namespace test_grammar_oneof
