// The input of `quill batch`: one request per line, in one of three formats.
//  - plain text: a prompt per line; `\n` in a line is a newline (`\t` a tab, `\\` a backslash); ids line-<n>
//  - JSONL: {"id", "prompt" | "messages", and optional "max_tokens", "temperature", "top_p", "top_k", "min_p",
//    "seed", "stop", "response_format", "grammar", "tools", "tool_choice", "chat_template_kwargs", ...}
//  - OpenAI batch: {"custom_id", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions", "body"}
// The fields of an OpenAI request body (and llama.cpp server's sampling names), in a JSONL line or a body, are
//  - honoured: max_tokens (max_completion_tokens), temperature, top_p, top_k, min_p, seed, stop (a string or an
//    array), logprobs, top_logprobs, frequency_penalty, presence_penalty, repeat_penalty, repeat_last_n, logit_bias
//    ({"token id": bias} or llama.cpp's [[id, bias]], -100 bans), response_format, grammar; with "messages", tools,
//    tool_choice, parallel_tool_calls (false: a record keeps the first call), reasoning_effort, chat_template_kwargs
//    and any other key reach the template;
//  - ignored, since they cannot change a record: model (echoed in OpenAI records), stream, stream_options, user,
//    metadata, store, service_tier, prediction, prompt_cache_key, safety_identifier, n 1, best_of 1;
//  - refused (the request's error record names the field): n or best_of other than 1, echo true, a suffix, output
//    modalities other than text, audio, web_search_options, the deprecated functions and function_call, and
//    reasoning_effort with a "prompt" (no template to reach).
// The format is given (--format, the file's extension) or read from the whole text: JSON lines when more than half
// of the non-blank lines begin with '{', so that a few broken lines cannot turn a JSONL file into prompts; then
// OpenAI batch when the first line that is a JSON object has "custom_id" or "body". A line that cannot be a request
// becomes an error entry (its record says why) and the rest go on. JSON is parsed with parse_untrusted_json's depth
// limit. A request with "messages" is read as `quill template --messages` reads a chat request
// (chat::chat_request_from_json): its other keys (tools, tool_choice, enable_thinking, ...) reach the template.
// parse_batch_input is a pure function of the text: no model, no files.
#pragma once

#include "engine/grammar/constraint.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quill::batch {

enum class InputFormat { plain, jsonl, openai };
std::string_view input_format_name(InputFormat f);  // "plain text", "JSONL", "OpenAI batch"

// What is known of the format before the text is read: nothing, plain text, JSON lines (JSONL or OpenAI batch, by
// content), or one format.
enum class FormatHint { none, plain, json, jsonl, openai };
// --format: "auto" (none), "txt", "jsonl" or "openai"; UsageError otherwise.
FormatHint parse_format_option(std::string_view name);
// An input file's name: .txt plain text, .jsonl JSON lines, anything else (stdin: "") none.
FormatHint format_hint_from_name(std::string_view path);

enum class Endpoint { none, completions, chat_completions };  // OpenAI url; none for plain text and JSONL

// Per-request settings; unset ones take the command line's.
struct RequestOverrides {
    std::optional<int> max_tokens;
    std::optional<float> temperature, top_p, min_p;
    std::optional<int> top_k;
    std::optional<float> repeat_penalty, frequency_penalty, presence_penalty;
    std::optional<int> repeat_last_n;
    std::optional<std::vector<std::pair<int32_t, float>>> logit_bias;  // SamplingParams::logit_bias
    std::optional<uint64_t> seed;
    std::optional<std::vector<std::string>> stop;
    std::optional<int> logprobs;  // top alternatives per token ("logprobs": true or N, "top_logprobs": N)
    // What the output must be: "response_format" {"type": "json_schema", "json_schema": {"schema", "strict",
    // "name"}} (or llama.cpp's {"type": "json_object", "schema"}), {"type": "json_object"}, or "grammar" (GBNF
    // text). Checked when the request runs: a schema that is not supported gives its request an error record.
    std::optional<grammar::ConstraintSpec> constraint;
};

struct BatchRequest {
    std::string id;       // line-<n>, the JSONL "id", or the OpenAI "custom_id" (an integer as its decimal digits)
    bool id_is_integer = false;  // the line's id was a JSON integer: its records give it back as one
    size_t line = 0;      // 1-based line in the input
    std::optional<std::string> prompt;  // exactly one of prompt and messages is set
    std::optional<nlohmann::ordered_json> messages;  // chat::ChatRequest::messages
    // chat::ChatRequest::vars of a request with messages: the template variables beside them, in the line's order.
    nlohmann::ordered_json template_vars = nlohmann::ordered_json::object();
    Endpoint endpoint = Endpoint::none;
    std::string model;    // the OpenAI body's "model", echoed in the response (may be empty)
    RequestOverrides overrides;
};

// One non-blank input line: a request, or the reason it is none (then `request` holds only id and line).
struct InputEntry {
    BatchRequest request;
    std::optional<std::string> error;
};

struct BatchInput {
    InputFormat format = InputFormat::plain;
    std::vector<InputEntry> entries;  // in input order
    std::vector<size_t> invalid_utf8_lines;  // 1-based lines holding bytes that are not UTF-8, in order
    // Keys of "prompt" requests (JSONL lines, OpenAI /v1/completions bodies) that are no request field (a misspelt
    // "temprature"), ignored: each with the first line that holds it, in order. (A "messages" request's other keys reach the template.)
    std::vector<std::pair<std::string, size_t>> unknown_fields;
};

// Parses the whole input (a UTF-8 byte order mark at its start is dropped). Never throws for a bad line (that is
// an error entry); throws UsageError for duplicate ids (naming the id and both lines), which must stop the batch
// before anything runs.
BatchInput parse_batch_input(std::string_view text, FormatHint hint = FormatHint::none);

// Plain-text escapes: `\n` newline, `\t` tab, `\\` backslash; any other backslash stays as it is.
std::string unescape_plain_line(std::string_view line);

// --shard K/N: shard K of N takes the K-th request of the input, then every N-th (requests counted from 1, blank
// lines not counted), so shards 1/N .. N/N together take every request once.
struct Shard {
    int64_t k = 1, n = 1;  // 1 <= k <= n
    // Whether the entry at 0-based `index` of the input belongs to the shard.
    bool contains(size_t index) const { return static_cast<int64_t>(index % static_cast<size_t>(n)) == k - 1; }
};
// "K/N" with 1 <= K <= N; UsageError otherwise (0/N says that shards count from 1).
Shard parse_shard(std::string_view text);

}  // namespace quill::batch
