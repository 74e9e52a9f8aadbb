// json_schema_rules: several schemas as named rules of one grammar, each schema's $refs within its own document,
// and the JSON numbers every schema grammar writes, all of which a JSON parser takes as finite doubles.
#include "engine/error.h"
#include "engine/grammar/automaton.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace test_json_schema_rules {

using namespace quill;
using namespace quill::grammar;
using ojson = nlohmann::ordered_json;

namespace {

struct Lang {
    explicit Lang(const std::string& gbnf) : a(std::make_shared<const Grammar>(parse_gbnf(gbnf))) {}
    bool full(std::string_view text) { return a.accepting(a.advance(a.start(), text)); }
    Automaton a;
};

}  // namespace

TEST_CASE("json_schema_rules: a rule per schema, $refs resolved within each document", "[grammar]") {
    // Both documents define #/$defs/v, differently; b's rule is a property of its document.
    const ojson a = ojson::parse(R"({"$defs": {"v": {"enum": ["x"]}}, "type": "array", "items": {"$ref": "#/$defs/v"}})");
    const ojson b = ojson::parse(R"({"$defs": {"v": {"type": "integer"}}, "type": "object",
        "properties": {"n": {"$ref": "#/$defs/v"}}})");
    const std::string rules = json_schema_rules({{"a_value", &a, "#", "a"}, {"b_n", &b, "#/properties/n", "b"}});
    CHECK(rules.find("root") == std::string::npos);
    Lang lang("root ::= a_value \" \" b_n\n" + rules);
    CHECK(lang.full(R"(["x", "x"] 42)"));
    CHECK_FALSE(lang.full(R"([1] 42)"));
    CHECK_FALSE(lang.full(R"(["x"] "x")"));
    // Errors name the schema they are in.
    const ojson bad = ojson::parse(R"({"type": "object", "patternProperties": {}})");
    CHECK_THROWS_WITH(json_schema_rules({{"ok_1", &a, "#", "a"}, {"bad_1", &bad, "#", "the tool \"f\""}}),
                      Catch::StartsWith("the tool \"f\": ") && Catch::Contains("patternProperties"));
    CHECK_THROWS_WITH(json_schema_rules({{"x_1", &a, "#/properties/none", "a"}}), Catch::Contains("#/properties/none"));
}

TEST_CASE("JSON schema numbers stay finite doubles", "[grammar]") {
    Lang lang(json_schema_to_gbnf(R"({"type": "number"})"));
    CHECK(lang.full("-1.5e99"));
    CHECK(lang.full("9999999999999999.5E-99"));
    CHECK_FALSE(lang.full("1e340"));  // past the largest double: JSON parsers refuse it
}

}  // namespace test_json_schema_rules
