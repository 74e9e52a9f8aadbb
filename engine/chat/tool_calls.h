// Tool calls in a model's answer: found in the syntax its chat template teaches the model, taken out of the text,
// and given back as OpenAI's "tool_calls". The answer is untrusted text: whatever is not a well-formed call in the
// syntax stays text, and nothing in it can make the parser fail.
#pragma once

#include "engine/grammar/constraint.h"
#include "engine/runtime/generator.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quill::chat {

enum class ToolCallSyntax {
    none,          // calls are not looked for
    hermes,        // <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number (Hermes, Qwen 2.5 and 3, ...)
    llama3_json,   // the whole answer one {"name": ..., "parameters": {...}} (Llama 3.1, 3.2, 3.3)
    mistral,       // [TOOL_CALLS]NAME[ARGS]{...} (Mistral Small 3.2, Devstral, Ministral 3); the list form read too
    mistral_list,  // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral Nemo); the NAME form read too
    harmony,       // <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|> (gpt-oss)
    qwen3_xml,     // <tool_call><function=NAME><parameter=P>value</parameter></function></tool_call> (Qwen3-Coder)
};

// The syntax a chat template's source shows the model: harmony for a template with "<|channel|>" and "<|call|>",
// mistral when it writes "[TOOL_CALLS]" and "[ARGS]", mistral_list for "[TOOL_CALLS]" alone, qwen3_xml for
// "<tool_call>" with "<function=", hermes for "<tool_call>" alone, llama3_json for a Llama 3 header format that
// describes calls by "parameters", else none.
ToolCallSyntax tool_call_syntax(std::string_view template_source);

struct ToolCall {
    std::string name;
    std::string arguments;  // a JSON object's text, its keys in the model's order
};

struct ParsedAnswer {
    std::string text;              // the answer without its calls (trimmed when there were any)
    std::vector<ToolCall> calls;   // in the answer's order
};

// The calls of `answer` in `syntax`. A call is a JSON object (nested at most kMaxJsonDepth) with a non-empty string
// "name" and an object "arguments" (or "parameters"; absent: {}); a block that is not one, or not closed, stays
// in the text as it is. llama3_json takes a call only when its name is one of `tool_names` (a plain JSON answer is
// no call). mistral's NAME form, harmony and qwen3_xml name the tool outside the JSON: the name is letters, digits,
// "_", "-" and "." (plain_tool_name) and the arguments a JSON object; arguments still open at the end of the answer
// (or nested past kMaxJsonDepth) make the rest of it text, as an unclosed block does. qwen3_xml also reads hermes's
// JSON blocks; a parameter's value is JSON when it parses as JSON, else the string between the tags less one
// newline at each end.
ParsedAnswer parse_tool_calls(std::string_view answer, ToolCallSyntax syntax,
                              const std::vector<std::string>& tool_names = {});

// The calls of an answer to a request whose template variables are `vars`: parse_tool_calls with the names of its
// "tools" when it offers some and its "tool_choice" is not "none"; else no calls and the answer as it is.
ParsedAnswer request_tool_calls(std::string_view answer, ToolCallSyntax syntax, const nlohmann::ordered_json& vars);
// The syntax in which request_tool_calls looks for the calls of such a request: `syntax`, or none.
ToolCallSyntax request_call_syntax(ToolCallSyntax syntax, const nlohmann::ordered_json& vars);

// How a call shows on a terminal (chat, run): "[tool call NAME ARGS]".
std::string call_display(const ToolCall& call);

// OpenAI's finish_reason of an answer: "tool_calls" when it ended by itself (stop) with calls, else
// finish_reason_name's.
std::string_view openai_finish_reason(FinishReason reason, bool has_calls);

// Whether `name` can name a tool (or a Qwen3-Coder parameter) outside JSON, as the mistral NAME form, harmony and
// qwen3_xml do: letters, digits, "_", "-" and ".", at least one.
bool plain_tool_name(std::string_view name);

// tool_choice.cpp: what a request's "tool_choice" makes of its answer.

// --tool-choice's value as "tool_choice": "none", "auto" and "required" as they are, any other text the function
// of that name ({"type": "function", "function": {"name": ...}}).
nlohmann::ordered_json tool_choice_value(std::string_view choice);

// UsageError naming `what` when the "tool_choice" of a request's template variables is "required" and its "tools"
// offer none, or names a function its "tools" do not offer.
void check_chosen_tool(const nlohmann::ordered_json& vars, const std::string& what);

// When "tool_choice" is "required" or {"type": "function", "function": {"name": X}}: the grammar of one call in
// `syntax` to one of the offered tools (to X), and nothing else; else none (also for syntax none: the choice then
// only reaches the template). The calls, each as parse_tool_calls reads it:
//   hermes       <tool_call>\n{"name": ..., "arguments": ARGS}\n</tool_call>
//   qwen3_xml    <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
//   llama3_json  the whole answer {"name": ..., "parameters": ARGS}
//   mistral      [TOOL_CALLS]NAME[ARGS]ARGS
//   mistral_list [TOOL_CALLS][{"name": ..., "arguments": ARGS}]
//   harmony      an optional analysis message (<|channel|>analysis<|message|>TEXT<|end|><|start|>assistant, TEXT
//                without "<|"), then <|channel|>commentary to=functions.NAME [<|constrain|>json]<|message|>ARGS or
//                 to=functions.NAME<|channel|>commentary [json]<|message|>ARGS (the generation prompt ends with
//                <|start|>assistant; <|call|> is the end-of-generation token that follows)
// ARGS is valid against the tool's "parameters" schema (any object when it has none). Qwen3-Coder's parameters are
// those of the schema's "properties", in its order, the required ones always there: a plain string parameter is
// raw text without "</parameter>" (text that is itself JSON, such as 42, reads back as JSON), a string enum its
// values as they are (quoted where they would read back as JSON), any other the JSON its schema allows.
// UsageError naming `what` (check_chosen_tool), when a schema is not supported (json_schema_rules), or when a
// tool's name (or a required parameter's) cannot be written in `syntax` (plain_tool_name, for mistral, harmony and
// qwen3_xml).
std::optional<grammar::ConstraintSpec> tool_choice_constraint(const nlohmann::ordered_json& vars, ToolCallSyntax syntax,
                                                              const std::string& what);

// The names of a request's tools (chat::check_tools's shapes); empty for a null or absent list.
std::vector<std::string> tool_names(const nlohmann::ordered_json& tools);

// OpenAI's "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}], arguments as a JSON string.
// Ids are drawn from `seed` (the same seed gives the same ids) in the form the chat template of `syntax` takes back
// (chat, batch and run --json share this rule): 9 letters and digits in Mistral's syntaxes, whose templates refuse
// any other id, else "call_" and 24 hex digits.
nlohmann::ordered_json openai_tool_calls(const std::vector<ToolCall>& calls, ToolCallSyntax syntax, uint64_t seed);

// The "tool_calls" of the assistant message a conversation keeps (chat's history), as chat templates read them:
// openai_tool_calls's, with "arguments" the JSON object itself (Hugging Face passes it so; Qwen3-Coder's and
// gpt-oss's templates refuse its text).
nlohmann::ordered_json history_tool_calls(const std::vector<ToolCall>& calls, ToolCallSyntax syntax, uint64_t seed);

}  // namespace quill::chat
