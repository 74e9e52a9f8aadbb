// Chat templates: the Jinja subset that models' tokenizer.chat_template uses, rendered as Hugging Face renders
// them (trim_blocks, lstrip_blocks, loop controls, tojson without ASCII escaping, raise_exception, strftime_now),
// and built-in formats for models without a usable template.
#pragma once

#include "engine/chat/template_error.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace quill::chat {

// The budgets of one render: a template that passes one gets TemplateBudgetError ("chat template: name:line:col:
// what (budget: ...)"), whatever it does, within milliseconds; each is checked as the work is done and as values
// are built. Real templates use a fraction of each default, also for the largest conversation the output allows.
struct RenderOptions {
    std::optional<std::tm> now;                   // strftime_now's local time; nullopt: the clock
    std::chrono::milliseconds max_time{2000};     // wall-clock deadline for the whole render
    size_t max_output_bytes = size_t(4) << 20;    // the output, and any one string built while rendering
    size_t max_list_items = size_t(1) << 20;      // any one list built while rendering
    size_t max_alloc_bytes = size_t(64) << 20;    // the strings and lists built while rendering, all together
    uint64_t max_steps = 2'000'000;               // statements, expressions, loop iterations, calls, values
                                                  // compared, sorted or printed (a value costs its size)
    int max_call_depth = 256;                     // nested macro calls
    const std::atomic<bool>* cancel = nullptr;    // raised (by a signal handler): quill::Interrupted, promptly
    // Which strings of the variables are the template's own, like its text: these top-level variables and the
    // "role" of each message. Every other string (message content, tools, ...) is untrusted input.
    std::vector<std::string> trusted_vars = {"bos_token", "eos_token"};
};

// A rendering and which of its bytes came from untrusted strings of the variables, through every operation of the
// template (concatenation, slices, strip, replace, ...; conservative where an operation mixes its inputs).
struct RenderedText {
    std::string text;
    std::vector<std::pair<size_t, size_t>> untrusted;  // sorted, disjoint byte ranges [begin, end)
};

class ChatTemplate {
public:
    // Parses once; throws TemplateError (name:line:col: what) on syntax errors, unknown tags, filters and tests.
    static ChatTemplate parse(std::string_view source, std::string name = "template");

    // Renders with the given variables (a JSON object: messages, add_generation_prompt, bos_token, eos_token,
    // tools, anything else). Throws TemplateError on runtime errors (for raise_exception(msg) the message is
    // msg, control bytes escaped and cut at 300 bytes), TemplateBudgetError when a budget of `options` runs out,
    // and quill::Interrupted when options.cancel is raised. With nlohmann::json, objects come in sorted key
    // order; pass an ordered_json to keep the caller's order (it shows in tojson output).
    std::string render(const nlohmann::json& vars, const RenderOptions& options = {}) const;
    std::string render(const nlohmann::ordered_json& vars, const RenderOptions& options = {}) const;
    // The same, with the provenance of the output's bytes (RenderOptions::trusted_vars says what is untrusted).
    // A nlohmann::json converts to this in its sorted key order.
    RenderedText render_tracked(const nlohmann::ordered_json& vars, const RenderOptions& options = {}) const;

    const std::string& source() const;
    const std::string& name() const;

    struct Impl;

private:
    explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
    std::shared_ptr<const Impl> impl_;
};

// Built-in formats for models without a usable template: "chatml", "llama2", "llama3", "gemma", "mistral",
// "phi3", "zephyr", each a Jinja source rendered by the same engine. Formats whose published spec starts with
// BOS (llama2, llama3, gemma, mistral) print bos_token, as the models' own templates do.
std::optional<std::string_view> builtin_template(std::string_view name);
std::vector<std::string_view> builtin_template_names();
// The built-in format a template text follows, by its markers ("<|im_start|>", "<|start_header_id|>",
// "<start_of_turn>", "<|user|>" with "<|end|>" or with "</s>"/eos_token, "[INST]" with or without "<<SYS>>");
// nullopt if none.
std::optional<std::string_view> detect_builtin(std::string_view template_text);

}  // namespace quill::chat
