// JSON Schema oneOf: exact (no warning) where its alternatives are disjoint by type, by const/enum values or by a
// required property that tells them apart; generated as anyOf with one warning naming where otherwise.
#include "engine/grammar/automaton.h"
#include "engine/grammar/constraint.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

namespace test_json_oneof {

using namespace quill;
using namespace quill::grammar;

namespace {

std::vector<std::string> warnings_of(const std::string& schema) {
    std::vector<std::string> w;
    json_schema_to_gbnf(schema, &w);
    return w;
}

// A discriminated union: each alternative an object whose required "kind" has its own const or enum values.
std::string tagged(const std::string& a, const std::string& b, const std::string& required = R"(["kind"])") {
    return R"({"oneOf":[{"type":"object","properties":{"kind":)" + a + R"(,"r":{"type":"number"}},"required":)" +
           required + R"(},{"type":"object","properties":{"kind":)" + b + R"(,"side":{"type":"integer"}},"required":)" +
           required + "}]}";
}

}  // namespace

TEST_CASE("JSON schema: a oneOf whose alternatives cannot overlap is exact and says nothing", "[grammar]") {
    std::ifstream corpus(std::string(QUILL_SOURCE_DIR) + "/tests/data/schemas/oneof_disjoint.json");
    std::stringstream forbids;
    forbids << corpus.rdbuf();
    const std::vector<std::string> disjoint = {
        R"({"oneOf":[{"type":"string"},{"type":"integer"},{"type":"null"},{"type":["boolean","array"]}]})",
        tagged(R"({"const":"circle"})", R"({"const":"square"})"),
        tagged(R"({"enum":["a","b"]})", R"({"type":"string","enum":["c"]})"),
        R"({"$defs":{"a":{"type":"object","properties":{"t":{"const":1}},"required":["t"]},
                     "b":{"type":"object","properties":{"t":{"const":2}},"required":["t"]}},
            "oneOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/b"}]})",
        forbids.str(),  // circle or square: each alternative forbids what the other requires
        R"({"oneOf":[{"const":1},{"enum":[2,"x",null]},{"type":"object"}]})",
        R"({"oneOf":[{"type":"string"},{"type":"integer","nullable":true}]})",
        R"({"oneOf":[{"anyOf":[{"type":"string"},{"type":"boolean"}]},{"allOf":[{"type":"number"}]}]})",
    };
    for (const std::string& s : disjoint) {
        INFO(s);
        CHECK(warnings_of(s).empty());
    }
    // the grammar is the alternatives' union, no more
    Automaton a(std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf(tagged(R"({"const":"circle"})",
                                                                                      R"({"const":"square"})")))));
    auto full = [&](std::string_view text) { return a.accepting(a.advance(a.start(), text)); };
    CHECK(full(R"({"kind":"circle","r":1.5})"));
    CHECK(full(R"({"kind":"square","side":2})"));
    CHECK_FALSE(full(R"({"kind":"triangle"})"));
    CHECK_FALSE(full(R"({"r":1})"));
}

TEST_CASE("JSON schema: a oneOf whose alternatives may overlap is anyOf, and the conversion says so once",
          "[grammar]") {
    const std::vector<std::pair<std::string, std::string>> overlapping = {
        {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})", "at #:"},  // 1 is both
        {R"({"properties":{"v":{"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]}}})", "at #/properties/v:"},
        {R"({"oneOf":[{"type":"object","properties":{"a":{"type":"string"}}},
                      {"type":"object","properties":{"b":{"type":"string"}}}]})", "at #:"},  // {} is both
        {R"({"oneOf":[{"const":1},{"const":1.0}]})", "at #:"},
        {tagged(R"({"const":"circle"})", R"({"const":"square"})", "[]"), "at #:"},  // kind may be absent
        {tagged(R"({"enum":["a","b"]})", R"({"enum":["b","c"]})"), "at #:"},
        {R"({"oneOf":[{"type":"string","nullable":true},{"type":"integer","nullable":true}]})", "at #:"},
        {R"({"$defs":{"n":{"oneOf":[{"type":"array","items":{"$ref":"#/$defs/n"}},{"type":"array"}]}},
            "$ref":"#/$defs/n"})", "at #/$defs/n:"},
    };
    for (const auto& [schema, where] : overlapping) {
        INFO(schema);
        const std::vector<std::string> w = warnings_of(schema);
        REQUIRE(w.size() == 1);
        CHECK_THAT(w[0], Catch::Contains(where) && Catch::Contains("oneOf") && Catch::Contains("anyOf"));
    }
    // anyOf never warns; and the warning reaches the compiled grammar, naming its source
    CHECK(warnings_of(R"({"anyOf":[{"type":"integer"},{"type":"number"}]})").empty());
    const auto g = compile_constraint({ConstraintSpec::Kind::json_schema, overlapping[0].first, "--json-schema"});
    REQUIRE(g->warnings.size() == 1);
    CHECK_THAT(g->warnings[0], Catch::StartsWith("--json-schema: JSON schema at #: oneOf"));
    Automaton a(g);
    CHECK(a.accepting(a.advance(a.start(), "12")));
    CHECK(a.accepting(a.advance(a.start(), "1.5")));
}

}  // namespace test_json_oneof
