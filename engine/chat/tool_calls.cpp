#include "engine/chat/tool_calls.h"

#include "engine/error.h"
#include "engine/io/json_input.h"
#include "engine/rng.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
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

// The arguments a JSON value stands for when it is an object: its text, else none.
std::optional<std::string> read_arguments(std::string_view text) {
    try {
        const ojson j = parse_untrusted_ordered_json(text, "tool call arguments");
        if (j.is_object()) return dump(j);
    } catch (const Error&) {
    }
    return std::nullopt;
}

// The call a parsed JSON value stands for, when it is one: {"name": non-empty string, "arguments" | "parameters":
// object}.
std::optional<ToolCall> call_of(const ojson& j) {
    if (!j.is_object()) return std::nullopt;
    const auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
    auto args = j.find("arguments");
    if (args == j.end()) args = j.find("parameters");
    if (args == j.end()) return ToolCall{name->get<std::string>(), "{}"};
    if (!args->is_object()) return std::nullopt;
    return ToolCall{name->get<std::string>(), dump(*args)};
}

// The call a JSON text stands for, when it is one (call_of).
std::optional<ToolCall> read_call(std::string_view text) {
    try {
        return call_of(parse_untrusted_ordered_json(text, "a tool call"));
    } catch (const Error&) {
        return std::nullopt;
    }
}

// The length of the JSON object or array that `s` begins with, found by its brackets outside strings; npos when
// `s` does not begin with one, leaves it open, or nests deeper than kMaxJsonDepth. Whether it is valid JSON is
// for the parser to say.
size_t json_extent(std::string_view s) {
    if (s.empty() || (s[0] != '{' && s[0] != '[')) return std::string_view::npos;
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > kMaxJsonDepth) return std::string_view::npos;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
    }
    return std::string_view::npos;
}

bool opens_json(std::string_view s) { return !s.empty() && (s[0] == '{' || s[0] == '['); }

// The length of the tool name `s` begins with: letters, digits, "_", "-" and ".".
size_t name_length(std::string_view s) {
    size_t n = 0;
    while (n < s.size() && (std::isalnum(static_cast<unsigned char>(s[n])) || s[n] == '_' || s[n] == '-' ||
                            s[n] == '.'))
        ++n;
    return n;
}

size_t skip_space(std::string_view s, size_t at) {
    while (at < s.size() && (s[at] == ' ' || s[at] == '\t' || s[at] == '\r' || s[at] == '\n')) ++at;
    return at;
}

// Spans of an answer that are calls, taken out of its text; what is between them stays.
struct Spans {
    std::string_view answer;
    ParsedAnswer out;
    size_t kept = 0;  // the answer up to here is in out.text or a call

    void take(size_t begin, size_t end, ToolCall call) {
        out.text.append(answer.substr(kept, begin - kept));
        out.calls.push_back(std::move(call));
        kept = end;
    }
    ParsedAnswer finish() {
        out.text.append(answer.substr(std::min(kept, answer.size())));
        if (!out.calls.empty()) out.text = std::string(trim(out.text));
        return std::move(out);
    }
};

// The call a Qwen3-Coder block's body stands for: <function=NAME> <parameter=P>value</parameter>... </function>.
std::optional<ToolCall> read_xml_call(std::string_view body) {
    constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>";
    constexpr std::string_view kParam = "<parameter=", kParamEnd = "</parameter>";
    if (!body.starts_with(kFunction) || !body.ends_with(kFunctionEnd)) return std::nullopt;
    body.remove_prefix(kFunction.size());
    body.remove_suffix(kFunctionEnd.size());
    const size_t n = name_length(body);
    if (n == 0 || n >= body.size() || body[n] != '>') return std::nullopt;
    ToolCall call{std::string(body.substr(0, n)), {}};
    ojson args = ojson::object();
    size_t at = skip_space(body, n + 1);
    while (at < body.size()) {
        if (body.substr(at, kParam.size()) != kParam) return std::nullopt;
        at += kParam.size();
        const size_t pn = name_length(body.substr(at));
        if (pn == 0 || at + pn >= body.size() || body[at + pn] != '>') return std::nullopt;
        const std::string key(body.substr(at, pn));
        at += pn + 1;
        const size_t end = body.find(kParamEnd, at);
        if (end == std::string_view::npos || args.contains(key)) return std::nullopt;
        std::string_view value = body.substr(at, end - at);
        if (value.starts_with("\n")) value.remove_prefix(1);
        if (value.ends_with("\n")) value.remove_suffix(1);
        // JSON when it is, and nests one level less than the limit (the arguments object is one more); else text
        args[key] = std::string(value);
        if (json_too_deep_at(value, kMaxJsonDepth - 1) == std::string_view::npos) {
            try {
                args[key] = parse_untrusted_ordered_json(value, "a tool call parameter");
            } catch (const Error&) {
            }
        }
        at = skip_space(body, end + kParamEnd.size());
    }
    call.arguments = dump(args);
    return call;
}

// <tool_call>JSON</tool_call> blocks (and, with `xml`, <tool_call><function=...>...</tool_call>); the text between
// and around them kept.
ParsedAnswer parse_hermes(std::string_view answer, bool xml) {
    Spans spans{answer, {}};
    size_t at = 0;
    while (at < answer.size()) {
        const size_t open = answer.find(kOpen, at);
        if (open == std::string_view::npos) break;
        const size_t body = open + kOpen.size();
        const size_t close = answer.find(kClose, body);
        if (close == std::string_view::npos) break;  // cut short: the rest is text
        const std::string_view inner = trim(answer.substr(body, close - body));
        auto call = xml && inner.starts_with("<function=") ? read_xml_call(inner) : read_call(inner);
        if (call) spans.take(open, close + kClose.size(), std::move(*call));
        at = close + kClose.size();
    }
    return spans.finish();
}

// Mistral's calls: [TOOL_CALLS] then a JSON array of calls, or NAME, an optional [CALL_ID]ID, [ARGS] and the
// arguments object; a marker not followed by one stays text.
ParsedAnswer parse_mistral(std::string_view answer) {
    constexpr std::string_view kMarker = "[TOOL_CALLS]", kCallId = "[CALL_ID]", kArgs = "[ARGS]";
    Spans spans{answer, {}};
    size_t at = 0;
    while ((at = answer.find(kMarker, at)) != std::string_view::npos) {
        const size_t begin = at;
        size_t p = skip_space(answer, at + kMarker.size());
        at += kMarker.size();
        const std::string_view rest = answer.substr(p);
        if (rest.starts_with("[")) {
            const size_t n = json_extent(rest);
            if (n == std::string_view::npos) break;  // open to the end (or nested too deep): the rest is text
            std::vector<ToolCall> calls;
            try {
                const ojson list = parse_untrusted_ordered_json(rest.substr(0, n), "tool calls");
                for (const ojson& item : list)
                    if (auto call = call_of(item)) calls.push_back(std::move(*call));
                if (calls.empty() || calls.size() != list.size()) continue;
            } catch (const Error&) {
                continue;
            }
            for (size_t i = 0; i < calls.size(); ++i)
                spans.take(i == 0 ? begin : p + n, p + n, std::move(calls[i]));
            at = p + n;
            continue;
        }
        const size_t name = name_length(rest);
        if (name == 0) continue;
        p += name;
        if (answer.substr(p, kCallId.size()) == kCallId)
            p += kCallId.size() + name_length(answer.substr(p + kCallId.size()));
        if (answer.substr(p, kArgs.size()) != kArgs) continue;
        const size_t args_at = skip_space(answer, p + kArgs.size());
        const size_t n = json_extent(answer.substr(args_at));
        if (n == std::string_view::npos && opens_json(answer.substr(args_at))) break;  // the rest is text
        if (n == std::string_view::npos) continue;
        auto args = read_arguments(answer.substr(args_at, n));
        if (!args) continue;
        spans.take(begin, args_at + n, ToolCall{std::string(rest.substr(0, name)), std::move(*args)});
        at = args_at + n;
    }
    return spans.finish();
}

// `s` less `suffix` (and the spaces before it) when it ends so.
bool drop_suffix(std::string_view& s, std::string_view suffix) {
    std::string_view t = s;
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
    if (!t.ends_with(suffix)) return false;
    s = t.substr(0, t.size() - suffix.size());
    return true;
}

// gpt-oss's harmony messages to "functions.NAME", with the recipient in the role header
// (<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>) or in the channel header
// (<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>); a call's whole message, from
// its <|start|>assistant when it has one to its <|call|>, leaves the text.
ParsedAnswer parse_harmony(std::string_view answer) {
    constexpr std::string_view kTo = "to=functions.", kMessage = "<|message|>", kChannel = "<|channel|>";
    constexpr std::string_view kConstrain = "<|constrain|>", kCall = "<|call|>", kEnd = "<|end|>";
    constexpr size_t kMaxHeader = 64;
    Spans spans{answer, {}};
    size_t at = 0;
    while ((at = answer.find(kTo, at)) != std::string_view::npos) {
        const size_t to = at;
        at += kTo.size();
        const size_t name = name_length(answer.substr(at));
        if (name == 0) continue;
        // The header is short: looked for in a window, so that many recipients cost no more than the answer's length.
        const size_t window = answer.substr(at + name, kMaxHeader + kMessage.size()).find(kMessage);
        if (window == std::string_view::npos) continue;
        const size_t message = at + name + window;
        // The header between the name and <|message|>: a channel, a constraint, spaces and words only.
        std::string header(answer.substr(at + name, message - at - name));
        for (std::string_view tag : {kChannel, kConstrain})
            for (size_t t; (t = header.find(tag)) != std::string::npos;) header.erase(t, tag.size());
        if (!std::all_of(header.begin(), header.end(), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) || c == ' ' || c == '_' || c == '-';
            }))
            continue;
        const size_t args_at = skip_space(answer, message + kMessage.size());
        const size_t n = json_extent(answer.substr(args_at));
        if (n == std::string_view::npos && opens_json(answer.substr(args_at))) break;  // the rest is text
        if (n == std::string_view::npos) continue;
        auto args = read_arguments(answer.substr(args_at, n));
        if (!args) continue;
        size_t end = skip_space(answer, args_at + n);
        if (answer.substr(end, kCall.size()) == kCall) end += kCall.size();
        else if (answer.substr(end, kEnd.size()) == kEnd) end += kEnd.size();
        else if (end != answer.size()) continue;
        std::string_view before = answer.substr(spans.kept, to - spans.kept);
        if (!drop_suffix(before, "<|channel|>commentary")) drop_suffix(before, "<|channel|>analysis");
        drop_suffix(before, "<|start|>assistant");
        spans.take(spans.kept + before.size(), end,
                   ToolCall{std::string(answer.substr(at, name)), std::move(*args)});
        at = end;
    }
    return spans.finish();
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
    const auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
    if (has("<|channel|>") && has("<|call|>")) return ToolCallSyntax::harmony;
    if (has("[TOOL_CALLS]")) return has("[ARGS]") ? ToolCallSyntax::mistral : ToolCallSyntax::mistral_list;
    if (has(kOpen) && has("<function=")) return ToolCallSyntax::qwen3_xml;
    if (has(kOpen)) return ToolCallSyntax::hermes;
    if (source.find("<|start_header_id|>") != std::string_view::npos &&
        source.find("\"parameters\"") != std::string_view::npos)
        return ToolCallSyntax::llama3_json;
    return ToolCallSyntax::none;
}

ParsedAnswer parse_tool_calls(std::string_view answer, ToolCallSyntax syntax, const std::vector<std::string>& tool_names) {
    switch (syntax) {
        case ToolCallSyntax::hermes: return parse_hermes(answer, false);
        case ToolCallSyntax::qwen3_xml: return parse_hermes(answer, true);
        case ToolCallSyntax::mistral:
        case ToolCallSyntax::mistral_list: return parse_mistral(answer);
        case ToolCallSyntax::harmony: return parse_harmony(answer);
        case ToolCallSyntax::llama3_json: return parse_llama3(answer, tool_names);
        case ToolCallSyntax::none: break;
    }
    return ParsedAnswer{std::string(answer), {}};
}

ToolCallSyntax request_call_syntax(ToolCallSyntax syntax, const nlohmann::ordered_json& vars) {
    const auto tools = vars.is_object() ? vars.find("tools") : vars.end();
    const bool offered = tools != vars.end() && tools->is_array() && !tools->empty();
    const auto choice = offered ? vars.find("tool_choice") : vars.end();
    if (!offered || (choice != vars.end() && *choice == "none")) return ToolCallSyntax::none;
    return syntax;
}

ParsedAnswer request_tool_calls(std::string_view answer, ToolCallSyntax syntax, const nlohmann::ordered_json& vars) {
    syntax = request_call_syntax(syntax, vars);
    if (syntax == ToolCallSyntax::none) return ParsedAnswer{std::string(answer), {}};
    return parse_tool_calls(answer, syntax, tool_names(vars.at("tools")));
}

std::string call_display(const ToolCall& call) { return "[tool call " + call.name + " " + call.arguments + "]"; }

std::string_view openai_finish_reason(FinishReason reason, bool has_calls) {
    if (has_calls && reason == FinishReason::stop) return "tool_calls";
    return finish_reason_name(reason);
}

bool plain_tool_name(std::string_view name) { return !name.empty() && name_length(name) == name.size(); }

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

namespace {

// One call's id, drawn from `rng`: 9 letters and digits for Mistral's syntaxes, else "call_" and 24 hex digits.
std::string tool_call_id(ToolCallSyntax syntax, Rng& rng) {
    if (syntax == ToolCallSyntax::mistral || syntax == ToolCallSyntax::mistral_list) {
        constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        std::string id;
        for (int k = 0; k < 9; ++k) id += kAlnum[rng.next() % kAlnum.size()];
        return id;
    }
    const uint64_t hi = rng.next(), lo = rng.next();
    return fmt::format("call_{:016x}{:08x}", hi, lo >> 32);
}

}  // namespace

nlohmann::ordered_json openai_tool_calls(const std::vector<ToolCall>& calls, ToolCallSyntax syntax, uint64_t seed) {
    Rng rng(seed);
    ojson out = ojson::array();
    for (const ToolCall& c : calls)
        out.push_back({{"id", tool_call_id(syntax, rng)},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    return out;
}

ojson history_tool_calls(const std::vector<ToolCall>& calls, ToolCallSyntax syntax, uint64_t seed) {
    ojson out = openai_tool_calls(calls, syntax, seed);
    for (size_t i = 0; i < calls.size(); ++i)
        out[i]["function"]["arguments"] = parse_untrusted_ordered_json(calls[i].arguments, "tool call arguments");
    return out;
}

}  // namespace quill::chat
