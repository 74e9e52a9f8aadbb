// The input of `quill batch`: one request per line, in one of three formats told apart by content.
//  - plain text: a prompt per line; `\n` in a line is a newline (`\t` a tab, `\\` a backslash); ids line-<n>
//  - JSONL: {"id", "prompt" | "messages", and optional "max_tokens", "temperature", "top_p", "top_k", "min_p",
//    "seed", "stop"}
//  - OpenAI batch: {"custom_id", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions", "body"}
// The first non-blank line decides: a JSON object is JSONL (OpenAI batch when it has "custom_id" or "body"), else
// plain text. A line that cannot be a request becomes an error entry (its record says why) and the rest go on.
// parse_batch_input is a pure function of the text: no model, no files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quill::batch {

enum class InputFormat { plain, jsonl, openai };
std::string_view input_format_name(InputFormat f);  // "plain text", "JSONL", "OpenAI batch"

enum class Endpoint { none, completions, chat_completions };  // OpenAI url; none for plain text and JSONL

struct ChatMessage {
    std::string role;
    std::string content;
};

// Per-request settings; unset ones take the command line's.
struct RequestOverrides {
    std::optional<int> max_tokens;
    std::optional<float> temperature, top_p, min_p;
    std::optional<int> top_k;
    std::optional<uint64_t> seed;
    std::optional<std::vector<std::string>> stop;
};

struct BatchRequest {
    std::string id;       // line-<n>, the JSONL "id", or the OpenAI "custom_id"
    size_t line = 0;      // 1-based line in the input
    std::optional<std::string> prompt;  // exactly one of prompt and messages is set
    std::optional<std::vector<ChatMessage>> messages;
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
};

// Parses the whole input. Never throws for a bad line (that is an error entry); throws UsageError for duplicate
// ids (naming the id and both lines), which must stop the batch before anything runs.
BatchInput parse_batch_input(std::string_view text);

// Plain-text escapes: `\n` newline, `\t` tab, `\\` backslash; any other backslash stays as it is.
std::string unescape_plain_line(std::string_view line);

// --shard K/N: "K/N" with 0 <= K < N; UsageError otherwise.
struct Shard {
    int64_t k = 0, n = 1;
};
Shard parse_shard(std::string_view text);

}  // namespace quill::batch
