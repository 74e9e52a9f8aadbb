// Grammars: GBNF parsing and its errors, the byte automaton's language, regular expressions and JSON Schema
// rewritten as GBNF, and hostile grammars that must fail with one clear message.
#include "engine/error.h"
#include "engine/grammar/automaton.h"
#include "engine/grammar/constraint.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <random>
#include <string>

namespace test_grammar {

using namespace quill;
using namespace quill::grammar;

namespace {

// Whether the whole text is in the grammar's language; prefix: whether it can still become so.
struct Lang {
    explicit Lang(const std::string& gbnf) : a(std::make_shared<const Grammar>(parse_gbnf(gbnf))) {}
    bool full(std::string_view text) { return a.accepting(a.advance(a.start(), text)); }
    bool prefix(std::string_view text) { return a.advance(a.start(), text) != Automaton::kDead; }
    Automaton a;
};

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const UsageError& e) {
        return e.what();
    }
    return "(no error)";
}

std::string gbnf_error(const std::string& text) {
    return error_of([&] { parse_gbnf(text); });
}

std::string schema_error(const std::string& schema) {
    return error_of([&] { compile_constraint({ConstraintSpec::Kind::json_schema, schema, "--json-schema"}); });
}

Lang schema_lang(const std::string& schema) { return Lang(json_schema_to_gbnf(schema)); }

}  // namespace

TEST_CASE("GBNF: literals, classes, groups, repetitions and comments make the language they say", "[grammar]") {
    Lang g(R"(# a list of moves
root ::= move (", " move){0,2} "."
move ::= [a-h] [1-8] | "O-O" ("-O")?   # castling
)");
    CHECK(g.full("e4."));
    CHECK(g.full("e4, O-O-O, h8."));
    CHECK_FALSE(g.full("e4, O-O-O, h8, a1."));  // {0,2}
    CHECK_FALSE(g.full("e9."));
    CHECK(g.prefix("e4, O-"));
    CHECK_FALSE(g.prefix("e4,,"));

    Lang multi(R"(root ::=
  "a"
  | "b" |
  "c" (
    "d" | "e"
  )
)");
    CHECK(multi.full("a"));
    CHECK(multi.full("b"));
    CHECK(multi.full("ce"));
    CHECK_FALSE(multi.full("c"));

    Lang reps(R"(root ::= "x"+ "y"* "z"? [0-9]{2,} [a-c]{,2})");
    CHECK(reps.full("x12"));
    CHECK(reps.full("xxyyz123ab"));
    CHECK_FALSE(reps.full("x1"));
    CHECK_FALSE(reps.full("x12abc"));
}

TEST_CASE("GBNF: Unicode classes and escapes are matched byte by byte, partial characters included", "[grammar]") {
    Lang g(R"(root ::= [ぁ-ゟ]+ "\u00e9" [^\x00-\x7F] "\x41" . "\U0001F600")");
    const std::string ok = "ひらがな\xC3\xA9\xE2\x82\xAC" "A" "z" "\xF0\x9F\x98\x80";
    CHECK(g.full(ok));
    for (size_t n = 0; n < ok.size(); ++n) CHECK(g.prefix(ok.substr(0, n)));  // every byte prefix, mid-character too
    CHECK_FALSE(g.prefix("\xE3\x81"  "\x7F"));          // a broken character
    CHECK_FALSE(g.prefix("a"));                       // not hiragana
    CHECK_FALSE(g.prefix("\xE3\x82\xA0"));            // U+30A0, just past the range
    Lang dot(R"(root ::= . .)");
    CHECK(dot.full("\xED\x9F\xBF" "a"));              // U+D7FF
    CHECK_FALSE(dot.prefix("\xED\xA0\x80"));          // a surrogate is no character
    CHECK_FALSE(dot.prefix("\xC0\x80"));              // overlong
}

TEST_CASE("GBNF: errors give the line and column of what is wrong", "[grammar]") {
    CHECK(gbnf_error("root ::= \"a\"\nfoo ::= bar\n") == "grammar:2:9: rule 'bar' is used but not defined");
    CHECK(gbnf_error("root ::= \"a\n") == "grammar:1:12: unterminated string literal (expected '\"')");
    CHECK(gbnf_error("root ::= [a-\n") == "grammar:1:13: unterminated character class (expected ']')");
    CHECK(gbnf_error("root = \"a\"") == "grammar:1:6: expected '::=' after rule name 'root'");
    CHECK(gbnf_error("root ::= (\"a\" \n") == "grammar:2:1: expected ')'");
    CHECK(gbnf_error("root ::= \"a\"{3,1}") == "grammar:1:18: repetition {3,1}: the maximum is below the minimum");
    CHECK(gbnf_error("root ::= \"\\q\"") == "grammar:1:11: unknown escape '\\q'");
    CHECK(gbnf_error("root ::= <think>") ==
          "grammar:1:10: token references (<[id]>, <text>, !<...>) are not supported");
    CHECK(gbnf_error("a ::= \"x\"\n") == "grammar:1:1: the grammar has no 'root' rule (the start rule)");
    CHECK(gbnf_error("root ::= \"a\"\nroot ::= \"b\"") == "grammar:2:1: rule 'root' is defined twice");
    CHECK(gbnf_error("root ::= [z-a]") == "grammar:1:14: character range 7A-61 is reversed");
}

TEST_CASE("GBNF: hostile grammars fail at once with one clear message", "[grammar]") {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    CHECK(gbnf_error("root ::= root \"a\" | \"b\"") ==
          "grammar: rule 'root' is left-recursive (root -> root): rewrite it so that something is matched before "
          "the rule recurs");
    CHECK_THAT(gbnf_error("root ::= a\na ::= b? c\nb ::= \"x\"?\nc ::= a \"y\" | \"z\""),
               Catch::Contains("is left-recursive (a -> c -> a)"));
    CHECK_THAT(gbnf_error("root ::= (\"\")*"), Catch::Contains("is left-recursive"));
    CHECK_THAT(gbnf_error("root ::= \"a\"{1000000000}"), Catch::Contains("repetition count is too large"));
    CHECK_THAT(gbnf_error("root ::= (\"ab\"{900000}){900000}"), Catch::Contains("the grammar is too large"));
    CHECK_THAT(gbnf_error("root ::= \"a\" root"), Catch::Contains("rule 'root' can never end"));
    CHECK_THAT(gbnf_error("root ::= " + std::string(5000, '(') + "\"a\"" + std::string(5000, ')')),
               Catch::Contains("parentheses nested deeper than 200"));
    CHECK_THAT(gbnf_error("root ::= [^\\x00-\\U0010FFFF]"), Catch::Contains("can never end"));
    // ambiguity is bounded: each reading is one stack, and identical stacks are one
    Lang amb(R"(root ::= ("a" | "a" | "aa")* "b")");
    CHECK(amb.full(std::string(2000, 'a') + "b"));
    CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 5.0);
}

TEST_CASE("regex: the subset JSON Schema patterns use, anchored or searched", "[grammar]") {
    auto whole = [](const std::string& re) { return Lang("root ::= " + regex_to_gbnf(re, RegexMode::whole_text)); };
    Lang phone = whole(R"(\(\d{3}\) \d{3}-\d{4})");
    CHECK(phone.full("(555) 123-4567"));
    CHECK_FALSE(phone.full("555-123-4567"));
    Lang alt = whole("(?:cat|dog)s?|[A-Z][a-z]*\\.");
    CHECK(alt.full("dogs"));
    CHECK(alt.full("Hello."));
    CHECK_FALSE(alt.full("hello."));
    Lang neg = whole("[^a-c\\d]+x");
    CHECK(neg.full("zé!x"));
    CHECK_FALSE(neg.full("zbx"));

    // in a JSON string: characters JSON escapes are matched escaped; unanchored patterns match anywhere
    auto js = [](const std::string& re) {
        return Lang("root ::= \"\\\"\" " + regex_to_gbnf(re, RegexMode::json_string) + " \"\\\"\"\n" +
                    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})");
    };
    Lang quote = js("^a\"b\\\\c$");
    CHECK(quote.full(R"("a\"b\\c")"));
    CHECK_FALSE(quote.full(R"("a"b\c")"));
    Lang anywhere = js("ab+");
    CHECK(anywhere.full(R"("xxabbby")"));
    CHECK_FALSE(anywhere.full(R"("xxaby\")"));
    CHECK_FALSE(anywhere.full(R"("xxa")"));
    Lang dot = js("^.$");
    CHECK(dot.full(R"("\"")"));
    CHECK(dot.full(R"("\t")"));
    CHECK_FALSE(dot.full(R"("\n")"));

    CHECK_THAT(error_of([] { regex_to_gbnf("a(?=b)", RegexMode::whole_text); }),
               Catch::Contains("lookarounds and named groups are not supported"));
    CHECK_THAT(error_of([] { regex_to_gbnf("(a)\\1", RegexMode::whole_text); }),
               Catch::Contains("backreferences are not supported"));
    CHECK_THAT(error_of([] { regex_to_gbnf("a\\bc", RegexMode::whole_text); }),
               Catch::Contains("word boundaries"));
    CHECK_THAT(error_of([] { regex_to_gbnf("a^b", RegexMode::whole_text); }),
               Catch::Contains("^ and $ are supported only at the ends"));
    CHECK_THAT(error_of([] { regex_to_gbnf("(a", RegexMode::whole_text); }), Catch::Contains("expected ')'"));
}

TEST_CASE("JSON schema: integer bounds make exactly the integers within them", "[grammar]") {
    std::mt19937 rng(7);
    for (int round = 0; round < 12; ++round) {
        std::uniform_int_distribution<int> d(-1200, 1200);
        int lo = d(rng), hi = d(rng);
        if (lo > hi) std::swap(lo, hi);
        const bool excl = round % 3 == 2;
        const std::string schema =
            excl ? fmt::format(R"({{"type":"integer","exclusiveMinimum":{},"exclusiveMaximum":{}}})", lo, hi)
                 : fmt::format(R"({{"type":"integer","minimum":{},"maximum":{}}})", lo, hi);
        if (excl && hi - lo < 2) continue;
        Lang g = schema_lang(schema);
        for (int v = -1300; v <= 1300; ++v) {
            const bool in = excl ? v > lo && v < hi : v >= lo && v <= hi;
            INFO(schema << " " << v);
            CHECK(g.full(std::to_string(v)) == in);
        }
        CHECK_FALSE(g.full("007"));
        CHECK_FALSE(g.full("-0" + std::to_string(std::abs(lo))));
    }
    Lang only_min = schema_lang(R"({"type":"integer","minimum":-5})");
    CHECK(only_min.full("123456789012"));
    CHECK(only_min.full("-5"));
    CHECK_FALSE(only_min.full("-6"));
}

TEST_CASE("JSON schema: number bounds hold for fractions too", "[grammar]") {
    Lang unit = schema_lang(R"({"type":"number","minimum":0,"maximum":1})");
    for (const char* ok : {"0", "1", "0.5", "0.999999", "1.0", "1.000"}) CHECK(unit.full(ok));
    for (const char* bad : {"1.5", "-0.5", "2", "1.01", "1e3"}) CHECK_FALSE(unit.full(bad));
    Lang open = schema_lang(R"({"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":3})");
    for (const char* ok : {"-1.999", "-1", "0", "2.999999", "-1.000001"}) CHECK(open.full(ok));
    for (const char* bad : {"-2", "3", "-2.0", "3.0", "3.5"}) CHECK_FALSE(open.full(bad));
    Lang neg = schema_lang(R"({"type":"number","maximum":-10})");
    CHECK(neg.full("-10"));
    CHECK(neg.full("-10.5"));
    CHECK_FALSE(neg.full("-9.5"));
    CHECK_THAT(schema_error(R"({"type":"number","minimum":0.5})"),
               Catch::Contains("number bound 0.5 is not supported"));
}

TEST_CASE("JSON schema: objects, arrays, enums, refs and formats", "[grammar]") {
    Lang obj = schema_lang(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
        "c":{"type":"boolean"}},"required":["b"],"additionalProperties":false})");
    CHECK(obj.full(R"({"b":"x"})"));
    CHECK(obj.full(R"({"a":1,"b":"x","c":true})"));
    CHECK(obj.full("{\n  \"a\": 1,\n  \"b\": \"x\"\n}"));
    CHECK_FALSE(obj.full(R"({"a":1})"));
    CHECK_FALSE(obj.full(R"({"b":"x","d":1})"));
    CHECK_FALSE(obj.full(R"({"b":"x",})"));

    Lang extra = schema_lang(R"({"properties":{"name":{"type":"string"}},"additionalProperties":{"type":"integer"}})");
    CHECK(extra.full(R"({"name":"x","nam":1,"names":2})"));
    CHECK_FALSE(extra.full(R"({"name":"x","name":1})"));  // an extra key cannot repeat a declared one
    CHECK_FALSE(extra.full(R"({"other":"x"})"));

    Lang arr = schema_lang(R"({"type":"array","items":{"enum":["a",1,null]},"minItems":2,"maxItems":3})");
    CHECK(arr.full(R"(["a", 1])"));
    CHECK(arr.full(R"([null,null,"a"])"));
    CHECK_FALSE(arr.full(R"(["a"])"));
    CHECK_FALSE(arr.full(R"([1,1,1,1])"));

    Lang tree = schema_lang(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
        "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],
        "additionalProperties":false}}})");
    CHECK(tree.full(R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
    CHECK_FALSE(tree.full(R"({"v":1,"kids":[{"kids":[]}]})"));

    Lang fmt_date = schema_lang(R"({"type":"string","format":"date"})");
    CHECK(fmt_date.full(R"("2024-02-28")"));
    CHECK_FALSE(fmt_date.full(R"("2024-02-30")"));
    CHECK_FALSE(fmt_date.full(R"("2024-13-01")"));
    Lang uuid = schema_lang(R"({"type":"string","format":"uuid"})");
    CHECK(uuid.full(R"("123e4567-e89b-12d3-a456-426614174000")"));
    Lang nullable = schema_lang(R"({"type":["string","null"],"maxLength":2})");
    CHECK(nullable.full("null"));
    CHECK(nullable.full(R"("\u00e9x")"));
    CHECK_FALSE(nullable.full(R"("abc")"));
    CHECK_FALSE(nullable.full(R"("\ud800")"));  // surrogate escapes are left out: lengths stay exact
}

TEST_CASE("JSON schema: what is not supported is an error naming it, never a relaxation", "[grammar]") {
    CHECK(schema_error(R"({"type":"object","minProperties":1})") ==
          "--json-schema: JSON schema at #: keyword 'minProperties' is not supported");
    CHECK(schema_error(R"({"properties":{"a":{"type":"string","format":"uri"}}})") ==
          "--json-schema: JSON schema at #/properties/a: format 'uri' is not supported (date, time, date-time, uuid, "
          "email are)");
    CHECK_THAT(schema_error(R"({"type":"array","uniqueItems":true})"), Catch::Contains("uniqueItems true"));
    CHECK_THAT(schema_error(R"({"$ref":"http://x/y"})"), Catch::Contains("only references within the document"));
    CHECK_THAT(schema_error(R"({"$ref":"#/$defs/missing"})"), Catch::Contains("does not resolve"));
    CHECK_THAT(schema_error(R"({"allOf":[{"type":"string"},{"maxLength":3}]})"), Catch::Contains("allOf"));
    CHECK_THAT(schema_error(R"({"type":"integer","multipleOf":2})"), Catch::Contains("'multipleOf'"));
    CHECK_THAT(schema_error(R"({"type":"string","pattern":"(?<=a)b"})"), Catch::Contains("lookarounds"));
    CHECK_THAT(schema_error("{\"type\":"), Catch::Contains("not valid JSON"));
    CHECK_THAT(schema_error(std::string(100, '[') + std::string(100, ']')), Catch::Contains("nested deeper"));
    CHECK_THAT(schema_error(R"({"$ref":"#"})"), Catch::Contains("rule 'root' can never end"));
    CHECK_THAT(schema_error(R"({"$ref":"#/$defs/a","$defs":{"a":{"type":"object",
        "properties":{"x":{"$ref":"#/$defs/a"}}, "required":["x"]}}})"),
               Catch::Contains("can never end"));
    CHECK_THAT(schema_error(R"({"type":"string","maxLength":100001})"), Catch::Contains("too large"));
    CHECK_THAT(schema_error(R"({"properties":{"a":{"maxLength":100000},"b":{"maxLength":100000},
        "c":{"maxLength":100000}}})"),
               Catch::Contains("the grammar is too large"));
}

}  // namespace test_grammar
