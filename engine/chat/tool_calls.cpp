#include "engine/chat/tool_calls.h"

#include "engine/error.h"
#include "engine/io/json_input.h"
#include "engine/rng.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace quill::chat {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::string_view trim(std::string_view s) {
    const size_t begin = s.find_first_not_of(" \t\r\n");
    if (begin == std::string_view::npos) return {};
    return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// The call a JSON text stands for, when it is one: {"name": non-empty string, "arguments" | "parameters": object}.
std::optional<ToolCall> read_call(std::string_view text) {
    ojson j;
    try {
        j = parse_untrusted_ordered_json(text, "a tool call");
    } catch (const Error&) {
        return std::nullopt;
    }
    if (!j.is_object()) return std::nullopt;
    const auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
    auto args = j.find("arguments");
    if (args == j.end()) args = j.find("parameters");
    if (args == j.end()) return ToolCall{name->get<std::string>(), "{}"};
    if (!args->is_object()) return std::nullopt;
    return ToolCall{name->get<std::string>(), dump(*args)};
}

// <tool_call>JSON</tool_call> blocks; the text between and around them kept.
ParsedAnswer parse_hermes(std::string_view answer) {
    ParsedAnswer out;
    size_t at = 0;
    while (at < answer.size()) {
        const size_t open = answer.find(kOpen, at);
        if (open == std::string_view::npos) break;
        const size_t body = open + kOpen.size();
        const size_t close = answer.find(kClose, body);
        if (close == std::string_view::npos) break;  // cut short: the rest is text
        out.text.append(answer.substr(at, open - at));
        if (auto call = read_call(trim(answer.substr(body, close - body)))) {
            out.calls.push_back(std::move(*call));
        } else {
            out.text.append(answer.substr(open, close + kClose.size() - open));
        }
        at = close + kClose.size();
    }
    out.text.append(answer.substr(std::min(at, answer.size())));
    if (!out.calls.empty()) out.text = std::string(trim(out.text));
    return out;
}

// The whole answer one call, optionally after <|python_tag|>, to a tool the request offers.
ParsedAnswer parse_llama3(std::string_view answer, const std::vector<std::string>& tool_names) {
    std::string_view body = trim(answer);
    constexpr std::string_view kPythonTag = "<|python_tag|>";
    if (body.starts_with(kPythonTag)) body = trim(body.substr(kPythonTag.size()));
    if (body.starts_with("{")) {
        auto call = read_call(body);
        if (call && std::find(tool_names.begin(), tool_names.end(), call->name) != tool_names.end())
            return ParsedAnswer{"", {std::move(*call)}};
    }
    return ParsedAnswer{std::string(answer), {}};
}

}  // namespace

ToolCallSyntax tool_call_syntax(std::string_view source) {
    if (source.find(kOpen) != std::string_view::npos) return ToolCallSyntax::hermes;
    if (source.find("<|start_header_id|>") != std::string_view::npos &&
        source.find("\"parameters\"") != std::string_view::npos)
        return ToolCallSyntax::llama3_json;
    return ToolCallSyntax::none;
}

ParsedAnswer parse_tool_calls(std::string_view answer, ToolCallSyntax syntax, const std::vector<std::string>& tool_names) {
    switch (syntax) {
        case ToolCallSyntax::hermes: return parse_hermes(answer);
        case ToolCallSyntax::llama3_json: return parse_llama3(answer, tool_names);
        case ToolCallSyntax::none: break;
    }
    return ParsedAnswer{std::string(answer), {}};
}

ParsedAnswer request_tool_calls(std::string_view answer, ToolCallSyntax syntax, const nlohmann::ordered_json& vars) {
    const auto tools = vars.is_object() ? vars.find("tools") : vars.end();
    const bool offered = tools != vars.end() && tools->is_array() && !tools->empty();
    const auto choice = offered ? vars.find("tool_choice") : vars.end();
    if (!offered || (choice != vars.end() && *choice == "none")) return ParsedAnswer{std::string(answer), {}};
    return parse_tool_calls(answer, syntax, tool_names(*tools));
}

std::vector<std::string> tool_names(const nlohmann::ordered_json& tools) {
    std::vector<std::string> names;
    if (!tools.is_array()) return names;
    for (const auto& t : tools) {
        if (!t.is_object()) continue;
        const ojson& fn = t.contains("function") ? t["function"] : t;
        if (fn.is_object() && fn.contains("name") && fn["name"].is_string()) names.push_back(fn["name"]);
    }
    return names;
}

nlohmann::ordered_json openai_tool_calls(const std::vector<ToolCall>& calls, uint64_t seed) {
    Rng rng(seed);
    ojson out = ojson::array();
    for (const ToolCall& c : calls) {
        const uint64_t hi = rng.next(), lo = rng.next();
        out.push_back({{"id", fmt::format("call_{:016x}{:08x}", hi, lo >> 32)},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    return out;
}

}  // namespace quill::chat
