// How a conversation becomes prompt tokens: the chat template (the model's own, a built-in format or a file),
// rendered for the messages and tokenized with the template's special tokens parsed as special and the bytes that
// came from the messages never (a user who types "<|im_end|>" gets those characters, not the token). The renderer
// tracks those bytes through whatever the template does to them (trim, slices, concatenation, replace).
#pragma once

#include "engine/chat/template.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace quill {
class GgufFile;
}

namespace quill::chat {

// A rendered conversation: the text and which of its bytes came from the messages.
struct RenderedChat {
    std::string text;
    std::vector<Tokenizer::TextSpan> literal;  // sorted, disjoint: bytes from the messages (all but their roles)
};

class ChatFormat {
public:
    // The format for a model: `choice` is "" (the model's tokenizer.chat_template), a built-in name (chatml,
    // llama2, llama3, gemma, mistral, phi3, zephyr) or a template file. A model template that cannot be parsed
    // gets one warning (through `warn`) and the built-in format it resembles; a model with no template gets
    // chatml when its vocabulary has <|im_start|>. UsageError when nothing fits, asking for --chat-template or
    // `other_way`, the caller's option that needs no template ("--raw"; empty: the command has none).
    static ChatFormat choose(const GgufFile* file, const Tokenizer* tok, const std::string& choice,
                             const std::function<void(const std::string&)>& warn, std::string_view other_way = {});

    // A format from template source, with bos_token / eos_token texts as given.
    static ChatFormat from_source(std::string_view source, std::string name, std::string bos, std::string eos);

    // The text to tokenize for these messages (a JSON array of {role, content, ...}), under the render budgets of
    // RenderOptions. `vars` (a JSON object) are further template variables (tools, enable_thinking, ...), all
    // untrusted like the messages; messages, add_generation_prompt, bos_token and eos_token are set here over any
    // of `vars`. Objects keep their key order into the template (what tojson prints). Throws TemplateError when
    // the template fails (raise_exception included; TemplateBudgetError when it runs out of a budget) and
    // quill::Interrupted once `cancel` is raised (a signal), within milliseconds.
    RenderedChat render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                        const std::atomic<bool>* cancel = nullptr,
                        const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) const;

    // render() then the tokens: BOS is added when the vocabulary wants it and the text does not start with it.
    std::vector<int32_t> tokenize(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                  bool add_generation_prompt, const std::atomic<bool>* cancel = nullptr,
                                  const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) const;

    // "the model's template", "built-in chatml", a file path.
    const std::string& name() const { return name_; }
    // The template's Jinja source.
    const std::string& source() const { return tmpl_->source(); }
    // The texts of bos_token and eos_token (the vocabulary's, or set here).
    const std::string& bos_text() const { return bos_; }
    const std::string& eos_text() const { return eos_; }
    void set_bos_text(std::string text) { bos_ = std::move(text); }
    void set_eos_text(std::string text) { eos_ = std::move(text); }

private:
    ChatFormat(std::shared_ptr<const ChatTemplate> tmpl, std::string name, std::string bos, std::string eos)
        : tmpl_(std::move(tmpl)), name_(std::move(name)), bos_(std::move(bos)), eos_(std::move(eos)) {}

    std::shared_ptr<const ChatTemplate> tmpl_;
    std::string name_;
    std::string bos_, eos_;
    // When the model's own template fails at render time for a reason other than raise_exception or a budget,
    // the built-in format it resembles (if any) takes over after one warning.
    std::shared_ptr<const ChatTemplate> fallback_;
    std::string fallback_name_;
    std::function<void(const std::string&)> warn_;
    mutable bool warned_ = false;
};

// A conversation as a file gives it: the messages and the other template variables beside them, objects in the
// file's key order.
struct ChatRequest {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json vars = nlohmann::ordered_json::object();  // tools, enable_thinking, reasoning_effort, ...
};

// A user's conversation file (`/save`, `quill template --messages`): a JSON array of messages, or an object with
// "messages" (an OpenAI chat request): chat_request_from_json of the parsed text. UsageError naming what is wrong
// (parse_untrusted_json's, for text that is not JSON or nests deeper than kMaxJsonDepth).
ChatRequest parse_chat_request(const std::string& json_text, const std::string& what);
// An OpenAI chat request already parsed (a conversation file, a `quill batch` line or body), or a JSON array of
// messages. The object's other keys become `vars`, in its order, with the entries of "chat_template_kwargs" (an
// object) put in its place over those of the same name. A message has a string "role" and a "content" that is a
// string, null, or an array of {"type": "text", "text"} parts (joined into one string); "tools" is checked by
// check_tools, "tool_choice" is "none", "auto", "required" or {"type": "function", "function": {"name"}}, and
// one that requires a call names an offered tool (check_chosen_tool).
// UsageError "<what>: ..." naming the message, the tool or the key that is wrong.
ChatRequest chat_request_from_json(nlohmann::ordered_json request, const std::string& what);
// OpenAI tool definitions: a JSON array of objects, each {"type": "function", "function": {"name", ...}} or a bare
// function {"name", ...}, names non-empty strings. UsageError "<what>: tool N ..." otherwise.
void check_tools(const nlohmann::ordered_json& tools, const std::string& what);
// A --tools file's text: check_tools of the JSON array it holds.
nlohmann::ordered_json parse_tools(const std::string& json_text, const std::string& what);
// parse_chat_request's messages alone.
nlohmann::ordered_json parse_messages(const std::string& json_text, const std::string& what);

// The single-message conversation of `quill run`: [{system}], {user}.
nlohmann::json one_turn(const std::string& system, const std::string& user);

// How one prompt of `run` or `batch` becomes tokens: with no format (--raw, an OpenAI completions prompt) its bytes
// as they are, BOS added as the vocabulary wants and special-token text kept as text; else the user message of
// `format`, after `system` when that is not empty, with the generation prompt and the template variables `vars`
// (tools, ...). `cancel` as for render(). UsageError when there is no format and `vars` is not empty.
std::vector<int32_t> prompt_tokens(const Tokenizer& tok, const ChatFormat* format, const std::string& prompt,
                                   const std::string& system, const std::atomic<bool>* cancel = nullptr,
                                   const nlohmann::ordered_json& vars = nlohmann::ordered_json::object());

}  // namespace quill::chat
