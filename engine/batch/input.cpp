#include "engine/batch/input.h"

#include "engine/chat/chat_format.h"
#include "engine/error.h"
#include "engine/io/json_input.h"
#include "engine/io/utf8.h"
#include "engine/runtime/sampler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace quill::batch {

using nlohmann::json;

namespace {

// A line that is not a request: the message of its error record.
struct LineError {
    std::string message;
};

std::string line_id(size_t line) { return fmt::format("line-{}", line); }

const json* find(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int get_int(const json& v, const char* key, int64_t lo) {
    if (!v.is_number_integer()) throw LineError{fmt::format("\"{}\" must be an integer", key)};
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())
                               : (v.get<int64_t>() < lo || v.get<int64_t>() > std::numeric_limits<int>::max()))
        throw LineError{fmt::format("\"{}\" {} is out of range: expected {}..{}", key, v.dump(), lo,
                                    std::numeric_limits<int>::max())};
    return static_cast<int>(v.get<int64_t>());
}

float get_float(const json& v, const char* key) {
    if (!v.is_number()) throw LineError{fmt::format("\"{}\" must be a number", key)};
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 1e30) throw LineError{fmt::format("\"{}\" {} is out of range", key, d)};
    return static_cast<float>(d);
}

std::vector<std::string> get_stop(const json& v) {
    if (v.is_string()) return {v.get<std::string>()};
    if (!v.is_array()) throw LineError{"\"stop\" must be a string or an array of strings"};
    std::vector<std::string> out;
    for (const auto& s : v) {
        if (!s.is_string()) throw LineError{"\"stop\" must be a string or an array of strings"};
        out.push_back(s.get<std::string>());
    }
    return out;
}

// OpenAI's {"50256": -100} or llama.cpp's [[50256, -100], [15043, false]] (false bans): ids and biases checked
// for range when the request runs (SamplingParams::validate, the vocabulary).
std::vector<std::pair<int32_t, float>> get_logit_bias(const json& v) {
    const char* kShape = "\"logit_bias\" must be an object of token ids (as strings) to numbers, or an array of "
                         "[token id, number] pairs";
    auto id_of = [&](int64_t id) {
        if (id < 0 || id > std::numeric_limits<int32_t>::max())
            throw LineError{fmt::format("\"logit_bias\": token {} is not a token id", id)};
        return static_cast<int32_t>(id);
    };
    auto bias_of = [&](const json& b) {
        if (b.is_boolean() && !b.get<bool>()) return -100.0f;
        if (!b.is_number()) throw LineError{kShape};
        const double d = b.get<double>();
        if (!(d >= -100 && d <= 100))
            throw LineError{fmt::format("\"logit_bias\": bias {} is out of range: expected -100 to 100", b.dump())};
        return static_cast<float>(d);
    };
    std::vector<std::pair<int32_t, float>> out;
    if (v.is_object()) {
        for (const auto& item : v.items()) {
            int64_t id = -1;
            const std::string& k = item.key();
            auto [p, ec] = std::from_chars(k.data(), k.data() + k.size(), id);
            if (ec != std::errc() || p != k.data() + k.size() || k.empty())
                throw LineError{fmt::format("\"logit_bias\": key \"{}\" is not a token id", k)};
            out.emplace_back(id_of(id), bias_of(item.value()));
        }
    } else if (v.is_array()) {
        for (const json& pair : v) {
            if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer()) throw LineError{kShape};
            out.emplace_back(id_of(pair[0].get<int64_t>()), bias_of(pair[1]));
        }
    } else {
        throw LineError{kShape};
    }
    return out;
}

// An OpenAI field that would change the output and that quill cannot honour: its name in an error record.
void refuse_unsupported(const json& obj) {
    auto is_one = [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; };
    if (const json* v = find(obj, "n"); v && !is_one(*v))
        throw LineError{"\"n\": only one choice per request is supported"};
    if (const json* v = find(obj, "best_of"); v && !is_one(*v))
        throw LineError{"\"best_of\": only 1 is supported (one completion per request)"};
    if (const json* v = find(obj, "echo"); v && *v != false)
        throw LineError{"\"echo\" is not supported: a record holds the completion alone"};
    if (const json* v = find(obj, "suffix"); v && *v != "")
        throw LineError{"\"suffix\" is not supported (no insertion: the completion follows the prompt)"};
    if (const json* v = find(obj, "modalities"); v && *v != json::array({"text"}))
        throw LineError{"\"modalities\": only [\"text\"] is supported"};
    for (const char* key : {"audio", "web_search_options", "functions", "function_call"})
        if (find(obj, key))
            throw LineError{fmt::format("\"{}\" is not supported{}", key,
                                        key[0] == 'f' ? " (deprecated: give \"tools\" and \"tool_choice\")" : "")};
    if (const json* v = find(obj, "parallel_tool_calls"); v && !v->is_boolean())
        throw LineError{"\"parallel_tool_calls\" must be true or false"};
}

// The request object of a line (the line itself, or its "body") parsed again with its keys in order, so that a
// schema's properties are generated in the order it gives them (parse_untrusted_json checked the line's depth).
struct OrderedSource {
    std::string_view line;
    bool in_body = false;
    nlohmann::ordered_json get() const {
        nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
        return in_body ? j.at("body") : j;
    }
};

// response_format and grammar (at most one).
std::optional<grammar::ConstraintSpec> read_constraint(const json& obj, const OrderedSource& src, size_t line) {
    using Kind = grammar::ConstraintSpec::Kind;
    const json* rf = find(obj, "response_format");
    const json* g = find(obj, "grammar");
    if (rf && g) throw LineError{"give \"response_format\" or \"grammar\", not both"};
    if (g) {
        if (!g->is_string() || g->get<std::string>().empty())
            throw LineError{"\"grammar\" must be a non-empty string (GBNF)"};
        return grammar::ConstraintSpec{Kind::gbnf, g->get<std::string>(), fmt::format("input line {}: grammar", line)};
    }
    if (!rf) return std::nullopt;
    const json* type = rf->is_object() ? find(*rf, "type") : nullptr;
    if (!type || !type->is_string())
        throw LineError{"\"response_format\" must be an object with a \"type\": text, json_object or json_schema"};
    const std::string source = fmt::format("input line {}: response_format", line);
    if (*type == "text") return std::nullopt;
    if (*type == "json_object") {
        if (find(*rf, "schema"))
            return grammar::ConstraintSpec{Kind::json_schema, src.get().at("response_format").at("schema").dump(),
                                           source};
        return grammar::ConstraintSpec{Kind::json_object, "", source};
    }
    if (*type == "json_schema") {
        const json* js = find(*rf, "json_schema");
        if (!js || !js->is_object() || !find(*js, "schema"))
            throw LineError{"\"response_format\" json_schema needs \"json_schema\": {\"schema\": ...}"};
        if (const json* strict = find(*js, "strict"); strict && !strict->is_boolean())
            throw LineError{"\"response_format\": \"strict\" must be true or false"};
        return grammar::ConstraintSpec{
            Kind::json_schema, src.get().at("response_format").at("json_schema").at("schema").dump(), source};
    }
    throw LineError{fmt::format("\"response_format\" type {} is not supported: expected text, json_object or "
                                "json_schema",
                                type->dump())};
}

// The sampling fields shared by JSONL lines and OpenAI bodies.
RequestOverrides read_overrides(const json& obj) {
    RequestOverrides o;
    if (const json* v = find(obj, "max_tokens")) o.max_tokens = get_int(*v, "max_tokens", 0);
    if (const json* v = find(obj, "max_completion_tokens")) o.max_tokens = get_int(*v, "max_completion_tokens", 0);
    if (const json* v = find(obj, "temperature")) o.temperature = get_float(*v, "temperature");
    if (const json* v = find(obj, "top_p")) o.top_p = get_float(*v, "top_p");
    if (const json* v = find(obj, "min_p")) o.min_p = get_float(*v, "min_p");
    if (const json* v = find(obj, "top_k")) o.top_k = get_int(*v, "top_k", 0);
    if (const json* v = find(obj, "seed")) {
        if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0))
            throw LineError{"\"seed\" must be a non-negative integer"};
        o.seed = v->get<uint64_t>();
    }
    if (const json* v = find(obj, "stop")) o.stop = get_stop(*v);
    if (const json* v = find(obj, "repeat_penalty")) o.repeat_penalty = get_float(*v, "repeat_penalty");
    if (const json* v = find(obj, "repeat_last_n")) o.repeat_last_n = get_int(*v, "repeat_last_n", -1);
    if (const json* v = find(obj, "frequency_penalty")) o.frequency_penalty = get_float(*v, "frequency_penalty");
    if (const json* v = find(obj, "presence_penalty")) o.presence_penalty = get_float(*v, "presence_penalty");
    if (const json* v = find(obj, "logit_bias")) o.logit_bias = get_logit_bias(*v);
    // Chat completions: "logprobs": true and "top_logprobs": N; legacy completions: "logprobs": N.
    if (const json* v = find(obj, "logprobs")) {
        if (v->is_boolean()) {
            if (v->get<bool>()) o.logprobs = 0;
        } else {
            o.logprobs = get_int(*v, "logprobs", 0);
            if (*o.logprobs > kMaxTopLogprobs)
                throw LineError{fmt::format("\"logprobs\" {} is out of range: expected 0 to {}", *o.logprobs,
                                            kMaxTopLogprobs)};
        }
    }
    if (const json* v = find(obj, "top_logprobs")) {
        const int n = get_int(*v, "top_logprobs", 0);
        if (n > kMaxTopLogprobs)
            throw LineError{fmt::format("\"top_logprobs\" {} is out of range: expected 0 to {}", n, kMaxTopLogprobs)};
        if (!o.logprobs) throw LineError{"\"top_logprobs\" needs \"logprobs\": true"};
        o.logprobs = n;
    }
    return o;
}

std::string read_prompt(const json& v) {
    if (!v.is_string()) throw LineError{"\"prompt\" must be a string (token arrays and prompt lists are not supported)"};
    std::string p = v.get<std::string>();
    if (p.empty()) throw LineError{"\"prompt\" is empty"};
    return p;
}

// prompt or messages (exactly one) and the sampling fields of a JSONL line or an OpenAI body.
void read_body(const json& obj, const OrderedSource& ordered, BatchRequest& r) {
    const json* prompt = find(obj, "prompt");
    const json* messages = find(obj, "messages");
    if (prompt && messages) throw LineError{"give \"prompt\" or \"messages\", not both"};
    if (r.endpoint == Endpoint::completions && !prompt) throw LineError{"/v1/completions needs a \"prompt\""};
    if (r.endpoint == Endpoint::chat_completions && !messages)
        throw LineError{"/v1/chat/completions needs \"messages\""};
    if (!prompt && !messages) throw LineError{"no \"prompt\" or \"messages\""};
    if (prompt) r.prompt = read_prompt(*prompt);
    for (const char* key : {"tools", "chat_template_kwargs", "reasoning_effort"})
        if (prompt && find(obj, key)) throw LineError{fmt::format("\"{}\" needs \"messages\", not a \"prompt\"", key)};
    refuse_unsupported(obj);
    if (messages) {
        if (!messages->is_array() || messages->empty()) throw LineError{"\"messages\" must be a non-empty array"};
        chat::ChatRequest request = chat::chat_request_from_json(ordered.get(), fmt::format("input line {}", r.line));
        r.messages = std::move(request.messages);
        r.template_vars = std::move(request.vars);
    }
    r.overrides = read_overrides(obj);
    r.overrides.constraint = read_constraint(obj, ordered, r.line);
}

void read_id(const json& v, const char* key, BatchRequest& r) {
    if (v.is_string() && !v.get<std::string>().empty()) {
        r.id = v.get<std::string>();
    } else if (v.is_number_integer()) {
        r.id = v.dump();
        r.id_is_integer = true;
    } else {
        throw LineError{fmt::format("\"{}\" must be a non-empty string or an integer", key)};
    }
}

// The keys of a "prompt" request (a JSONL line, an OpenAI /v1/completions body) that are no request field, added to
// `unknown` once each: the fields read, those ignored since they cannot change a record, those refused.
void note_unknown_fields(const json& j, size_t line, std::vector<std::pair<std::string, size_t>>& unknown) {
    static constexpr std::string_view kFields[] = {
        "id", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "min_p", "top_k",
        "seed", "stop", "logprobs", "top_logprobs", "n", "response_format", "grammar", "tools", "tool_choice",
        "chat_template_kwargs", "repeat_penalty", "repeat_last_n", "frequency_penalty", "presence_penalty",
        "logit_bias", "parallel_tool_calls", "reasoning_effort", "model", "stream", "stream_options", "user",
        "metadata", "store", "service_tier", "prediction", "prompt_cache_key", "safety_identifier", "best_of",
        "echo", "suffix", "modalities", "audio", "web_search_options", "functions", "function_call"};
    for (const auto& item : j.items()) {
        const std::string& key = item.key();
        if (std::find(std::begin(kFields), std::end(kFields), key) != std::end(kFields)) continue;
        if (std::none_of(unknown.begin(), unknown.end(), [&](const auto& u) { return u.first == key; }))
            unknown.emplace_back(key, line);
    }
}

// A JSON line: the id as early as possible, so that an error record carries it.
void read_json_line(const json& j, std::string_view line, InputFormat format, BatchRequest& r) {
    if (!j.is_object()) throw LineError{"not a JSON object"};
    if (format == InputFormat::jsonl) {
        if (const json* id = find(j, "id")) read_id(*id, "id", r);
        read_body(j, OrderedSource{line, false}, r);
        return;
    }
    const json* custom_id = find(j, "custom_id");
    if (!custom_id) throw LineError{"no \"custom_id\""};
    read_id(*custom_id, "custom_id", r);
    if (const json* m = find(j, "method"); m && *m != "POST") throw LineError{"\"method\" must be \"POST\""};
    const json* url = find(j, "url");
    if (!url || !url->is_string()) throw LineError{"no \"url\""};
    if (*url == "/v1/chat/completions") {
        r.endpoint = Endpoint::chat_completions;
    } else if (*url == "/v1/completions") {
        r.endpoint = Endpoint::completions;
    } else {
        throw LineError{fmt::format("url {} is not supported: expected /v1/chat/completions or /v1/completions",
                                    url->dump())};
    }
    const json* body = find(j, "body");
    if (!body || !body->is_object()) throw LineError{"no \"body\" object"};
    if (const json* model = find(*body, "model"); model && model->is_string()) r.model = model->get<std::string>();
    read_body(*body, OrderedSource{line, true}, r);
}

std::string_view strip_cr(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
}

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

// The first byte of a line after spaces and tabs is '{'.
bool begins_with_brace(std::string_view line) {
    const size_t at = line.find_first_not_of(" \t");
    return at != std::string_view::npos && line[at] == '{';
}

InputFormat detect(const std::vector<std::string_view>& lines, FormatHint hint) {
    switch (hint) {
        case FormatHint::plain: return InputFormat::plain;
        case FormatHint::jsonl: return InputFormat::jsonl;
        case FormatHint::openai: return InputFormat::openai;
        case FormatHint::none: {
            size_t non_blank = 0, braces = 0;
            for (std::string_view l : lines) {
                non_blank += !blank(l);
                braces += begins_with_brace(l);
            }
            if (2 * braces <= non_blank) return InputFormat::plain;
            break;
        }
        case FormatHint::json: break;
    }
    for (std::string_view l : lines) {
        if (!begins_with_brace(l)) continue;
        const std::optional<json> j = try_parse_untrusted_json(l);
        if (!j || !j->is_object()) continue;
        return j->contains("custom_id") || j->contains("body") ? InputFormat::openai : InputFormat::jsonl;
    }
    return InputFormat::jsonl;
}

void check_unique_ids(const std::vector<InputEntry>& entries) {
    std::unordered_map<std::string, size_t> seen;  // id -> line
    for (const auto& e : entries) {
        auto [it, fresh] = seen.emplace(e.request.id, e.request.line);
        if (!fresh)
            throw UsageError(fmt::format("the input holds id \"{}\" twice (lines {} and {}): ids must be unique",
                                         e.request.id, it->second, e.request.line));
    }
}

}  // namespace

std::string_view input_format_name(InputFormat f) {
    switch (f) {
        case InputFormat::plain: return "plain text";
        case InputFormat::jsonl: return "JSONL";
        case InputFormat::openai: return "OpenAI batch";
    }
    return "plain text";
}

std::string unescape_plain_line(std::string_view line) {
    std::string out;
    out.reserve(line.size());
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (c == '\\' && i + 1 < line.size()) {
            const char n = line[i + 1];
            if (n == 'n' || n == 't' || n == '\\') {
                out.push_back(n == 'n' ? '\n' : n == 't' ? '\t' : '\\');
                ++i;
                continue;
            }
        }
        out.push_back(c);
    }
    return out;
}

FormatHint parse_format_option(std::string_view name) {
    if (name == "auto") return FormatHint::none;
    if (name == "txt") return FormatHint::plain;
    if (name == "jsonl") return FormatHint::jsonl;
    if (name == "openai") return FormatHint::openai;
    throw UsageError(fmt::format("--format '{}': expected auto, txt, jsonl or openai", name));
}

FormatHint format_hint_from_name(std::string_view path) {
    if (path.ends_with(".txt")) return FormatHint::plain;
    if (path.ends_with(".jsonl")) return FormatHint::json;
    return FormatHint::none;
}

BatchInput parse_batch_input(std::string_view text, FormatHint hint) {
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
    std::vector<std::string_view> lines;
    for (size_t start = 0; start < text.size();) {
        const size_t end = std::min(text.find('\n', start), text.size());
        lines.push_back(strip_cr(text.substr(start, end - start)));
        start = end + 1;
    }
    BatchInput in;
    in.format = detect(lines, hint);
    for (size_t i = 0; i < lines.size(); ++i) {
        if (blank(lines[i])) continue;
        if (!utf8::is_valid(lines[i])) in.invalid_utf8_lines.push_back(i + 1);
        InputEntry e;
        e.request.line = i + 1;
        e.request.id = line_id(i + 1);
        if (in.format == InputFormat::plain) {
            e.request.prompt = unescape_plain_line(lines[i]);
        } else {
            try {
                const json j = parse_untrusted_json(lines[i], fmt::format("input line {}", i + 1));
                read_json_line(j, lines[i], in.format, e.request);
                if (e.request.prompt)
                    note_unknown_fields(in.format == InputFormat::openai ? j.at("body") : j, i + 1,
                                        in.unknown_fields);
            } catch (const LineError& err) {
                e.error = fmt::format("input line {}: {}", i + 1, err.message);
            } catch (const UsageError& err) {  // not JSON, or nested too deep
                e.error = err.what();
            }
        }
        in.entries.push_back(std::move(e));
    }
    check_unique_ids(in.entries);
    return in;
}

Shard parse_shard(std::string_view text) {
    const size_t slash = text.find('/');
    Shard s;
    auto num = [](std::string_view v, int64_t& out) {
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
        return ec == std::errc() && p == v.data() + v.size() && !v.empty();
    };
    if (slash == std::string_view::npos || !num(text.substr(0, slash), s.k) || !num(text.substr(slash + 1), s.n) ||
        s.n < 1 || s.k < 0 || s.k > s.n)
        throw UsageError(fmt::format("--shard '{}': expected K/N with 1 <= K <= N (e.g. 1/4)", text));
    if (s.k == 0)
        throw UsageError(fmt::format("--shard '{}': shards count from 1: expected K/N with 1 <= K <= N (the first "
                                     "of {} is 1/{}, the last {}/{})",
                                     text, s.n, s.n, s.n, s.n));
    return s;
}

}  // namespace quill::batch
