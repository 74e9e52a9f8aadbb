// What a request's "tool_choice" makes of its answer (tool_calls.h): the grammar of one call in the syntax of the
// template, to an offered tool, with its arguments by the tool's parameters schema.
#include "engine/chat/tool_calls.h"

#include "engine/error.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"
#include "engine/io/json_input.h"

#include <fmt/format.h>

#include <algorithm>

namespace quill::chat {

namespace {

using ojson = nlohmann::ordered_json;

// The grammar's own rules have "_" in their names, which json_schema_rules never gives its rules.
constexpr const char* kWs = "call_ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

struct Tool {
    std::string name;
    ojson parameters;  // the schema of its arguments ({"type": "object"} when it gives none)
};

const char* syntax_name(ToolCallSyntax syntax) {
    switch (syntax) {
        case ToolCallSyntax::mistral: return "Mistral";
        case ToolCallSyntax::harmony: return "gpt-oss harmony";
        case ToolCallSyntax::qwen3_xml: return "Qwen3-Coder XML";
        default: return "JSON";
    }
}

// The function a choice of "required" or {"type": "function", ...} names ("" for required); none for any other.
std::optional<std::string> forced_function(const ojson& vars) {
    const auto choice = vars.is_object() ? vars.find("tool_choice") : vars.end();
    if (choice == vars.end()) return std::nullopt;
    if (*choice == "required") return "";
    if (!choice->is_object()) return std::nullopt;
    const auto fn = choice->find("function");
    if (fn == choice->end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
        return std::nullopt;
    return (*fn)["name"].get<std::string>();
}

// The tools `vars` offers, all of them or only the one named `only` (when not empty).
std::vector<Tool> offered_tools(const ojson& vars, const std::string& only) {
    std::vector<Tool> out;
    const auto tools = vars.find("tools");
    if (tools == vars.end() || !tools->is_array()) return out;
    for (const auto& t : *tools) {
        if (!t.is_object()) continue;
        const ojson& fn = t.contains("function") ? t["function"] : t;
        if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
        const std::string name = fn["name"];
        if (!only.empty() && name != only) continue;
        const auto params = fn.find("parameters");
        out.push_back({name, params != fn.end() && !params->is_null() ? *params : ojson{{"type", "object"}}});
    }
    return out;
}

// A GBNF expression for any text in which `stop` does not occur (stop's first character occurs in it only first):
// runs of stop[0] followed by a proper prefix of the rest of stop and a character that continues neither it nor
// the run; at the end, a run and a prefix may be left open.
std::string text_without(std::string_view stop) {
    const auto not_in = [](std::initializer_list<char> chars) {
        std::string out = "[^";
        for (char c : chars) out += fmt::format("\\x{:02X}", static_cast<unsigned char>(c));
        return out + "]";
    };
    const std::string run = grammar::gbnf_literal(stop.substr(0, 1)) + "+";
    std::string after, open;
    for (size_t k = 1; k < stop.size(); ++k) {
        const std::string prefix = k > 1 ? grammar::gbnf_literal(stop.substr(1, k - 1)) + " " : "";
        after += (k > 1 ? " | " : "") + prefix + not_in({stop[k], stop[0]});
        if (k + 1 < stop.size()) open += (k > 1 ? " | " : "") + grammar::gbnf_literal(stop.substr(1, k));
    }
    return fmt::format("({} | {} ({}))* ({}{})?", not_in({stop[0]}), run, after, run,
                       open.empty() ? "" : " (" + open + ")?");
}

// {"name": NAME, "KEY": ARGS}, with the arguments by rule `args`.
std::string json_call(const Tool& t, std::string_view key, const std::string& args) {
    return fmt::format(R"("{{" call_ws "\"name\"" call_ws ":" call_ws {} call_ws "," call_ws {} call_ws ":" )"
                       R"(call_ws {} call_ws "}}")",
                       grammar::gbnf_literal(ojson(t.name).dump()), grammar::gbnf_literal(ojson(key).dump()), args);
}

// `name` as a JSON pointer's reference token: "~" as "~0", "/" as "~1".
std::string pointer_token(std::string_view name) {
    std::string out;
    for (char c : name) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
}

// A Qwen3-Coder parameter's value when it is a string its raw text gives: its rule's body, or none when the
// value must be JSON.
std::optional<std::string> raw_string_value(const ojson& schema) {
    static const std::vector<std::string> annotations = {"description", "title", "default", "examples", "$comment",
                                                         "deprecated", "readOnly", "writeOnly"};
    if (!schema.is_object()) return std::nullopt;
    std::optional<ojson> values;  // enum or const: the strings allowed
    for (const auto& [key, v] : schema.items()) {
        if (key == "type" && v == "string") continue;
        if (key == "enum" && v.is_array() && !v.empty()) values = v;
        else if (key == "const") values = ojson::array({v});
        else if (std::find(annotations.begin(), annotations.end(), key) == annotations.end()) return std::nullopt;
    }
    if (!values) return schema.value("type", "") == "string" ? std::optional<std::string>("raw_text") : std::nullopt;
    std::string alts;
    for (const ojson& v : *values) {
        if (!v.is_string()) return std::nullopt;
        const std::string s = v;
        bool raw = s.find("</parameter>") == std::string::npos;  // else cut short, and read as it is
        try {
            parse_untrusted_ordered_json(s, "an enum value");
            raw = false;  // would read back as JSON
        } catch (const Error&) {
        }
        alts += (alts.empty() ? "" : " | ") + grammar::gbnf_literal(raw ? s : ojson(s).dump());
    }
    return "(" + alts + ")";
}

// <function=NAME>\n, its parameters (rules value_I_J for those that are JSON), </function>\n.
std::string xml_call(const Tool& t, size_t i, std::vector<grammar::SchemaRule>& json_values, const std::string& what) {
    std::string out = grammar::gbnf_literal("<function=" + t.name + ">\n");
    const ojson& params = t.parameters;
    const auto props = params.find("properties");
    std::vector<std::string> required;
    if (params.contains("required") && params["required"].is_array())
        for (const auto& r : params["required"])
            if (r.is_string()) required.push_back(r);
    std::vector<std::pair<std::string, const ojson*>> names;  // each parameter and its schema (null: any text)
    if (props != params.end() && props->is_object())
        for (const auto& [name, schema] : props->items()) names.emplace_back(name, &schema);
    for (const std::string& r : required)
        if (std::none_of(names.begin(), names.end(), [&](const auto& n) { return n.first == r; }))
            names.emplace_back(r, nullptr);
    for (size_t j = 0; j < names.size(); ++j) {
        const auto& [name, schema] = names[j];
        const bool needed = std::find(required.begin(), required.end(), name) != required.end();
        if (!plain_tool_name(name)) {
            if (!needed) continue;  // optional: left out
            throw UsageError(fmt::format("{}: the required parameter \"{}\" of the tool \"{}\" cannot be written in "
                                         "the Qwen3-Coder XML call syntax (letters, digits, \"_\", \"-\" and \".\")",
                                         what, name, t.name));
        }
        std::optional<std::string> value = schema ? raw_string_value(*schema) : "raw_text";
        if (!value) {
            value = fmt::format("value_{}_{}", i, j);
            json_values.push_back({*value, &params, "#/properties/" + pointer_token(name),
                                   fmt::format("{}: the tool \"{}\"'s parameter \"{}\"", what, t.name, name)});
        }
        const std::string param = fmt::format("{} {} {}", grammar::gbnf_literal("<parameter=" + name + ">\n"), *value,
                                              grammar::gbnf_literal("\n</parameter>\n"));
        out += needed ? " " + param : " (" + param + ")?";
    }
    return out + " " + grammar::gbnf_literal("</function>\n");
}

// The grammar of a call to one of `tools` in `syntax` (not none).
std::string call_gbnf(const std::vector<Tool>& tools, ToolCallSyntax syntax, const std::string& what) {
    std::vector<grammar::SchemaRule> json_values;  // the JSON values the calls hold
    std::string calls;                              // root's alternatives: one call per tool
    for (size_t i = 0; i < tools.size(); ++i) {
        const Tool& t = tools[i];
        const bool name_in_json = syntax == ToolCallSyntax::hermes || syntax == ToolCallSyntax::llama3_json ||
                                  syntax == ToolCallSyntax::mistral_list;
        if (!name_in_json && !plain_tool_name(t.name))
            throw UsageError(fmt::format("{}: the tool name \"{}\" cannot be written in the {} call syntax (letters, "
                                         "digits, \"_\", \"-\" and \".\")",
                                         what, t.name, syntax_name(syntax)));
        const std::string args = fmt::format("args_{}", i);
        if (syntax != ToolCallSyntax::qwen3_xml)
            json_values.push_back({args, &t.parameters, "#", fmt::format("{}: the tool \"{}\"'s parameters", what,
                                                                          t.name)});
        const std::string name = grammar::gbnf_literal(t.name);
        std::string call;
        switch (syntax) {
            case ToolCallSyntax::hermes:
            case ToolCallSyntax::mistral_list: call = json_call(t, "arguments", args); break;
            case ToolCallSyntax::llama3_json: call = json_call(t, "parameters", args); break;
            case ToolCallSyntax::mistral: call = fmt::format("{} \"[ARGS]\" {}", name, args); break;
            case ToolCallSyntax::qwen3_xml: call = xml_call(t, i, json_values, what); break;
            case ToolCallSyntax::harmony:
                // the recipient in the channel header, or in the role header (as the template writes past calls)
                call = fmt::format(R"("<|channel|>commentary to=functions." {} (" <|constrain|>json")? )"
                                   R"("<|message|>" {} | " to=functions." {} "<|channel|>commentary" (" json")? )"
                                   R"("<|message|>" {})",
                                   name, args, name, args);
                break;
            case ToolCallSyntax::none: break;
        }
        calls += fmt::format("call_{} ::= {}\n", i, call);
    }
    std::string call = "(";
    for (size_t i = 0; i < tools.size(); ++i) call += fmt::format("{}call_{}", i ? " | " : "", i);
    call += ")";
    std::string root;
    switch (syntax) {
        case ToolCallSyntax::hermes: root = "\"<tool_call>\\n\" " + call + " \"\\n</tool_call>\""; break;
        case ToolCallSyntax::qwen3_xml: root = "\"<tool_call>\\n\" " + call + " \"</tool_call>\""; break;
        case ToolCallSyntax::mistral: root = "\"[TOOL_CALLS]\" " + call; break;
        case ToolCallSyntax::mistral_list: root = "\"[TOOL_CALLS][\" call_ws " + call + " call_ws \"]\""; break;
        case ToolCallSyntax::harmony:
            root = "(\"<|channel|>analysis<|message|>\" " + text_without("<|") +
                   " \"<|end|><|start|>assistant\")? " + call;
            break;
        default: root = call;
    }
    return "root ::= " + root + "\n" + calls + kWs + "raw_text ::= " + text_without("</parameter>") + "\n" +
           grammar::json_schema_rules(json_values);
}

}  // namespace

nlohmann::ordered_json tool_choice_value(std::string_view choice) {
    if (choice == "none" || choice == "auto" || choice == "required") return std::string(choice);
    return {{"type", "function"}, {"function", {{"name", std::string(choice)}}}};
}

void check_chosen_tool(const nlohmann::ordered_json& vars, const std::string& what) {
    const std::optional<std::string> only = forced_function(vars);
    if (!only || !offered_tools(vars, *only).empty()) return;
    if (only->empty())
        throw UsageError(fmt::format("{}: \"tool_choice\" is \"required\" but \"tools\" offers none", what));
    throw UsageError(
        fmt::format("{}: \"tool_choice\" names the function \"{}\", which \"tools\" does not offer", what, *only));
}

std::optional<grammar::ConstraintSpec> tool_choice_constraint(const nlohmann::ordered_json& vars, ToolCallSyntax syntax,
                                                              const std::string& what) {
    check_chosen_tool(vars, what);
    const std::optional<std::string> only = forced_function(vars);
    if (!only || syntax == ToolCallSyntax::none) return std::nullopt;
    return grammar::ConstraintSpec{grammar::ConstraintSpec::Kind::gbnf,
                                   call_gbnf(offered_tools(vars, *only), syntax, what), what + ": tool_choice"};
}

}  // namespace quill::chat
