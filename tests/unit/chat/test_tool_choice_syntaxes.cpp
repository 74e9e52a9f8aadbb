// tool_choice enforced in the syntaxes that name the tool outside the JSON (chat::tool_choice_constraint): Qwen3-Coder
// XML, Mistral's two forms and gpt-oss harmony. The grammar takes the calls the template teaches and nothing else,
// and every text it can make (random walks over its automaton) parse_tool_calls reads back as one call to an
// allowed tool with arguments valid against the tool's schema.
#include "engine/chat/tool_calls.h"
#include "engine/error.h"
#include "engine/grammar/automaton.h"
#include "engine/grammar/constraint.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <string>

namespace test_tool_choice_syntaxes {

using namespace quill;
using namespace quill::chat;
using ojson = nlohmann::ordered_json;

namespace {

// get_weather's arguments: a short city (a JSON string in XML, as its schema bounds it), a unit whose XML value is
// raw, an optional integer.
const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["c", "f"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "now"}},
  {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}}}])");

ojson vars(const ojson& choice, const ojson& tools = kTools) { return {{"tools", tools}, {"tool_choice", choice}}; }
ojson named(const std::string& name) { return {{"type", "function"}, {"function", {{"name", name}}}}; }

struct Accepts {
    explicit Accepts(const grammar::ConstraintSpec& spec) : a(grammar::compile_constraint(spec)) {}
    bool operator()(std::string_view text) { return a.accepting(a.advance(a.start(), text)); }
    grammar::Automaton a;
};

Accepts accepts_for(const ojson& choice, ToolCallSyntax syntax) {
    const auto spec = tool_choice_constraint(vars(choice), syntax, "request");
    REQUIRE(spec);
    return Accepts(*spec);
}

// Arguments valid against kTools's schema of `name`, checked by hand.
bool valid_arguments(const std::string& name, const std::string& arguments) {
    const ojson args = ojson::parse(arguments);
    if (!args.is_object()) return false;
    if (name == "now") return true;  // no schema: any object
    if (name == "write_file")
        return args.size() == 2 && args.value("path", ojson()).is_string() &&
               args.value("content", ojson()).is_string();
    for (const auto& [key, v] : args.items())
        if (key != "city" && key != "unit" && key != "days") return false;
    if (!args.contains("city") || !args["city"].is_string() || !args.contains("unit")) return false;
    const auto city = args["city"].get<std::string>();
    const auto code_points = std::count_if(city.begin(), city.end(), [](char c) { return (c & 0xC0) != 0x80; });
    if (code_points > 6 || (args["unit"] != "c" && args["unit"] != "f")) return false;
    return !args.contains("days") ||
           (args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7);
}

// Texts the grammar makes: random walks over its automaton, a byte at a time (ASCII bytes while there are some, so
// that the walks stay short), each ended as soon as the text is complete; walks longer than max_bytes are dropped.
std::vector<std::string> random_texts(const grammar::ConstraintSpec& spec, int walks, size_t max_bytes) {
    grammar::Automaton a(grammar::compile_constraint(spec));
    std::mt19937 rng(7);
    std::vector<std::string> out;
    for (int w = 0; w < walks; ++w) {
        std::string text;
        auto s = a.start();
        while (!a.accepting(s) && text.size() < max_bytes) {
            std::vector<uint8_t> ascii, other;
            for (int b = 0; b < 256; ++b)
                if (a.advance(s, static_cast<uint8_t>(b)) != grammar::Automaton::kDead)
                    (b < 0x80 ? ascii : other).push_back(static_cast<uint8_t>(b));
            const auto& from = ascii.empty() ? other : ascii;
            REQUIRE(!from.empty());  // a live state can always go on
            const uint8_t b = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
            text += static_cast<char>(b);
            s = a.advance(s, b);
        }
        if (a.accepting(s)) out.push_back(text);
    }
    return out;
}

// Every text of the grammar of `choice` in `syntax` is one call to an allowed tool with valid arguments.
void check_round_trip(const ojson& choice, ToolCallSyntax syntax, size_t min_texts) {
    const auto spec = tool_choice_constraint(vars(choice), syntax, "request");
    REQUIRE(spec);
    const auto texts = random_texts(*spec, 300, 600);
    CHECK(texts.size() >= min_texts);
    for (const std::string& text : texts) {
        CAPTURE(text);
        const ParsedAnswer parsed = parse_tool_calls(text, syntax);
        REQUIRE(parsed.calls.size() == 1);
        const ToolCall& call = parsed.calls[0];
        if (choice.is_object()) CHECK(call.name == choice["function"]["name"]);
        CHECK((call.name == "get_weather" || call.name == "now" || call.name == "write_file"));
        CAPTURE(call.arguments);
        CHECK(valid_arguments(call.name, call.arguments));
    }
}

}  // namespace

TEST_CASE("tool_choice in Qwen3-Coder XML: the function and its parameters, required ones always", "[chat][tools]") {
    Accepts accepts = accepts_for("required", ToolCallSyntax::qwen3_xml);
    const std::string call = "<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Paris\"\n</parameter>\n"
                             "<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>";
    CHECK(accepts(call));
    const ParsedAnswer parsed = parse_tool_calls(call, ToolCallSyntax::qwen3_xml);
    REQUIRE(parsed.calls.size() == 1);
    CHECK(parsed.calls[0].arguments == R"({"city":"Paris","unit":"c"})");
    CHECK(accepts("<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Nice\"\n</parameter>\n<parameter=unit>\n"
                  "f\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"));
    CHECK(accepts("<tool_call>\n<function=now>\n</function>\n</tool_call>"));
    // A plain string parameter is raw text, code included, up to its closing tag.
    CHECK(accepts("<tool_call>\n<function=write_file>\n<parameter=path>\na.h\n</parameter>\n<parameter=content>\n"
                  "#include <vector>\nx < y </param\n</parameter>\n</function>\n</tool_call>"));
    // Prose, a tool not offered, a required parameter missing, one not in the schema, a value its schema refuses
    // (a string longer than 6, a unit not in the enum, days out of range), a raw string that would end early.
    CHECK_FALSE(accepts("It is sunny."));
    CHECK_FALSE(accepts("<tool_call>\n<function=rm>\n</function>\n</tool_call>"));
    CHECK_FALSE(accepts("<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Paris\"\n</parameter>\n"
                        "</function>\n</tool_call>"));
    CHECK_FALSE(accepts("<tool_call>\n<function=now>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>"));
    CHECK_FALSE(accepts("<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Paris, France\"\n</parameter>\n"
                        "<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>"));
    CHECK_FALSE(accepts("<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Paris\"\n</parameter>\n"
                        "<parameter=unit>\nk\n</parameter>\n</function>\n</tool_call>"));
    CHECK_FALSE(accepts("<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Paris\"\n</parameter>\n"
                        "<parameter=unit>\nc\n</parameter>\n<parameter=days>\n9\n</parameter>\n</function>\n"
                        "</tool_call>"));
    CHECK_FALSE(accepts("<tool_call>\n<function=write_file>\n<parameter=path>\na</parameter>b\n</parameter>\n"
                        "<parameter=content>\nx\n</parameter>\n</function>\n</tool_call>"));
    // Named: that function only.
    Accepts only_now = accepts_for(named("now"), ToolCallSyntax::qwen3_xml);
    CHECK(only_now("<tool_call>\n<function=now>\n</function>\n</tool_call>"));
    CHECK_FALSE(only_now(call));
}

TEST_CASE("tool_choice in Qwen3-Coder XML: every text of the grammar parses as a valid call", "[chat][tools]") {
    const ojson tools = ojson::array({kTools[0], kTools[1]});  // write_file's raw strings would make long walks
    const auto spec = tool_choice_constraint(vars("required", tools), ToolCallSyntax::qwen3_xml, "request");
    REQUIRE(spec);
    const auto texts = random_texts(*spec, 300, 600);
    CHECK(texts.size() >= 100);
    for (const std::string& text : texts) {
        CAPTURE(text);
        const ParsedAnswer parsed = parse_tool_calls(text, ToolCallSyntax::qwen3_xml);
        REQUIRE(parsed.calls.size() == 1);
        CHECK(valid_arguments(parsed.calls[0].name, parsed.calls[0].arguments));
    }
}

TEST_CASE("tool_choice in Mistral's NAME[ARGS] form and its list form", "[chat][tools]") {
    Accepts name_form = accepts_for("required", ToolCallSyntax::mistral);
    CHECK(name_form(R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "c"})"));
    CHECK(name_form(R"([TOOL_CALLS]now[ARGS]{})"));
    CHECK_FALSE(name_form(R"([TOOL_CALLS][{"name": "now", "arguments": {}}])"));
    CHECK_FALSE(name_form(R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})"));
    CHECK_FALSE(name_form(R"([TOOL_CALLS]rm[ARGS]{})"));
    CHECK_FALSE(name_form("Sure. [TOOL_CALLS]now[ARGS]{}"));
    Accepts list_form = accepts_for("required", ToolCallSyntax::mistral_list);
    CHECK(list_form(R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "f"}}])"));
    CHECK_FALSE(list_form(R"([TOOL_CALLS]now[ARGS]{})"));
    CHECK_FALSE(list_form(R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": 1, "unit": "f"}}])"));
    Accepts only_now = accepts_for(named("now"), ToolCallSyntax::mistral);
    CHECK(only_now(R"([TOOL_CALLS]now[ARGS]{})"));
    CHECK_FALSE(only_now(R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "c"})"));
    check_round_trip("required", ToolCallSyntax::mistral, 100);
    check_round_trip(named("get_weather"), ToolCallSyntax::mistral_list, 100);
}

TEST_CASE("tool_choice in harmony: an optional analysis message, then the call in either header", "[chat][tools]") {
    Accepts accepts = accepts_for("required", ToolCallSyntax::harmony);
    const std::string channel =
        R"(<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo", "unit": "c"})";
    CHECK(accepts(channel));
    CHECK(accepts("<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant" + channel));
    CHECK(accepts(R"( to=functions.now<|channel|>commentary json<|message|>{})"));
    CHECK(accepts(R"(<|channel|>commentary to=functions.now<|message|>{})"));
    const std::string thought = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant";
    for (const std::string& text : {channel, thought + channel}) {
        const ParsedAnswer parsed = parse_tool_calls(text, ToolCallSyntax::harmony);
        REQUIRE(parsed.calls.size() == 1);
        CHECK(parsed.calls[0].name == "get_weather");
    }
    CHECK_FALSE(accepts("<|channel|>final<|message|>It is sunny."));
    CHECK_FALSE(accepts("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi"));
    CHECK_FALSE(accepts(R"(<|channel|>commentary to=functions.rm <|constrain|>json<|message|>{})"));
    CHECK_FALSE(accepts(R"(<|channel|>commentary to=functions.get_weather<|message|>{"city": "Oslo"})"));
    Accepts only_now = accepts_for(named("now"), ToolCallSyntax::harmony);
    CHECK(only_now(R"(<|channel|>commentary to=functions.now <|constrain|>json<|message|>{})"));
    CHECK_FALSE(only_now(channel));
    check_round_trip("required", ToolCallSyntax::harmony, 50);
}

TEST_CASE("tool_choice errors: a function not offered, required with no tools, names a syntax cannot write",
          "[chat][tools]") {
    for (ToolCallSyntax syntax : {ToolCallSyntax::none, ToolCallSyntax::hermes, ToolCallSyntax::qwen3_xml,
                                  ToolCallSyntax::mistral, ToolCallSyntax::mistral_list, ToolCallSyntax::harmony}) {
        CHECK_THROWS_WITH(tool_choice_constraint(vars(named("nope")), syntax, "input line 3"),
                          Catch::Contains("input line 3") && Catch::Contains("\"nope\""));
        CHECK_THROWS_WITH(tool_choice_constraint({{"tool_choice", "required"}}, syntax, "input line 4"),
                          Catch::Contains("input line 4") && Catch::Contains("required"));
        CHECK_THROWS_WITH(tool_choice_constraint(vars("required", ojson::array()), syntax, "r"),
                          Catch::Contains("required"));
        CHECK_FALSE(tool_choice_constraint(vars("auto"), syntax, "r"));
    }
    ojson spaced = kTools;
    spaced[1]["function"]["name"] = "what time";
    CHECK_THROWS_WITH(tool_choice_constraint(vars("required", spaced), ToolCallSyntax::harmony, "r"),
                      Catch::Contains("\"what time\""));
    CHECK_THROWS_WITH(tool_choice_constraint(vars("required", spaced), ToolCallSyntax::mistral, "r"),
                      Catch::Contains("\"what time\""));
    CHECK_NOTHROW(tool_choice_constraint(vars("required", spaced), ToolCallSyntax::hermes, "r"));  // a JSON name
    CHECK_NOTHROW(tool_choice_constraint(vars("required", spaced), ToolCallSyntax::mistral_list, "r"));
    ojson param = kTools;
    param[0]["function"]["parameters"]["properties"]["the city"] = {{"type", "string"}};
    CHECK_NOTHROW(tool_choice_constraint(vars("required", param), ToolCallSyntax::qwen3_xml, "r"));  // optional
    param[0]["function"]["parameters"]["required"].push_back("the city");
    CHECK_THROWS_WITH(tool_choice_constraint(vars("required", param), ToolCallSyntax::qwen3_xml, "r"),
                      Catch::Contains("\"the city\""));
    // A schema the converter does not support names the tool.
    ojson bad = kTools;
    bad[1]["function"]["parameters"] = {{"type", "object"}, {"patternProperties", ojson::object()}};
    CHECK_THROWS_WITH(tool_choice_constraint(vars("required", bad), ToolCallSyntax::mistral, "r"),
                      Catch::Contains("\"now\"") && Catch::Contains("patternProperties"));
}

TEST_CASE("tool_choice: $ref in a tool's parameters resolves within them", "[chat][tools]") {
    const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "move", "parameters": {
      "type": "object", "$defs": {"dir": {"enum": ["up", "down"]}},
      "properties": {"to": {"$ref": "#/$defs/dir"}}, "required": ["to"], "additionalProperties": false}}}])");
    for (ToolCallSyntax syntax : {ToolCallSyntax::hermes, ToolCallSyntax::mistral, ToolCallSyntax::qwen3_xml}) {
        const auto spec = tool_choice_constraint(vars("required", tools), syntax, "r");
        REQUIRE(spec);
        Accepts accepts(*spec);
        const std::string args = R"({"to": "up"})";
        if (syntax == ToolCallSyntax::hermes) {
            CHECK(accepts("<tool_call>\n{\"name\": \"move\", \"arguments\": " + args + "}\n</tool_call>"));
            CHECK_FALSE(accepts("<tool_call>\n{\"name\": \"move\", \"arguments\": {\"to\": \"left\"}}\n</tool_call>"));
        } else if (syntax == ToolCallSyntax::mistral) {
            CHECK(accepts("[TOOL_CALLS]move[ARGS]" + args));
        } else {
            CHECK(accepts("<tool_call>\n<function=move>\n<parameter=to>\n\"down\"\n</parameter>\n</function>\n"
                          "</tool_call>"));
        }
    }
}

}  // namespace test_tool_choice_syntaxes
