// Chat templates: the Jinja subset that models' tokenizer.chat_template uses, rendered as Hugging Face renders
// them (trim_blocks, lstrip_blocks, loop controls, tojson without ASCII escaping, raise_exception, strftime_now),
// and built-in formats for models without a usable template.
#pragma once

#include "engine/chat/template_error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quill::chat {

struct RenderOptions {
    std::optional<std::tm> now;                // strftime_now's local time; nullopt: the clock
    size_t max_output_bytes = size_t(4) << 20;  // also the limit on any one string or list built while rendering
    int max_call_depth = 256;                  // nested macro calls
    uint64_t max_steps = 2'000'000;            // statements run, loop iterations and calls, all together
};

class ChatTemplate {
public:
    // Parses once; throws TemplateError (name:line:col: what) on syntax errors, unknown tags, filters and tests.
    static ChatTemplate parse(std::string_view source, std::string name = "template");

    // Renders with the given variables (a JSON object: messages, add_generation_prompt, bos_token, eos_token,
    // tools, anything else). Throws TemplateError on runtime errors (for raise_exception(msg) the message is
    // msg) and when a limit of `options` is passed. With nlohmann::json, objects come in sorted key order; pass
    // an ordered_json to keep the caller's order (it shows in tojson output).
    std::string render(const nlohmann::json& vars, const RenderOptions& options = {}) const;
    std::string render(const nlohmann::ordered_json& vars, const RenderOptions& options = {}) const;

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
