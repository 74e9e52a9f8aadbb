#include "engine/chat/chat_format.h"

#include "engine/chat/tool_calls.h"
#include "engine/error.h"
#include "engine/format/gguf.h"
#include "engine/io/json_input.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace quill::chat {

namespace {

constexpr size_t kMaxTemplateFileBytes = 1 << 20;

// The vocabulary's text of a token id, or "" when absent.
std::string token_text(const Tokenizer* tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab()) return {};
    return std::string(tok->piece(id));
}

// Whether the vocabulary has `text` as one control token.
bool has_control_token(const Tokenizer* tok, std::string_view text) {
    if (!tok) return false;
    auto ids = tok->encode(text, false, true);
    return ids.size() == 1 && tok->is_control(ids[0]);
}

// The built-in format the special tokens of a vocabulary suggest.
std::optional<std::string_view> builtin_from_vocab(const Tokenizer* tok) {
    if (has_control_token(tok, "<|im_start|>")) return "chatml";
    if (has_control_token(tok, "<|start_header_id|>")) return "llama3";
    if (has_control_token(tok, "<start_of_turn>")) return "gemma";
    if (has_control_token(tok, "<|user|>") && has_control_token(tok, "<|end|>")) return "phi3";
    if (has_control_token(tok, "[INST]")) return "mistral";
    return std::nullopt;
}

std::string read_template_file(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw UsageError(fmt::format("--chat-template '{}': not a built-in format ({}) and not a readable file", path,
                                     fmt::join(builtin_template_names(), ", ")));
    if (std::filesystem::file_size(path, ec) > kMaxTemplateFileBytes)
        throw UsageError(fmt::format("--chat-template {}: larger than {} bytes", path, kMaxTemplateFileBytes));
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in.good() && !in.eof()) throw FileError(fmt::format("{}: cannot read the chat template", path));
    return ss.str();
}

std::shared_ptr<const ChatTemplate> parse_shared(std::string_view source, const std::string& name) {
    return std::make_shared<const ChatTemplate>(ChatTemplate::parse(source, name));
}

}  // namespace

ChatFormat ChatFormat::from_source(std::string_view source, std::string name, std::string bos, std::string eos) {
    auto tmpl = parse_shared(source, name);  // before `name` is moved from
    return ChatFormat(std::move(tmpl), std::move(name), std::move(bos), std::move(eos));
}

ChatFormat ChatFormat::choose(const GgufFile* file, const Tokenizer* tok, const std::string& choice,
                              const std::function<void(const std::string&)>& warn, std::string_view other_way) {
    const std::string or_other = other_way.empty() ? std::string() : fmt::format(" or {}", other_way);
    std::string bos = tok ? token_text(tok, tok->bos()) : std::string();
    std::string eos = tok ? token_text(tok, tok->eos()) : std::string();
    if (!choice.empty()) {
        if (auto src = builtin_template(choice))
            return from_source(*src, fmt::format("built-in {}", choice), bos, eos);
        return from_source(read_template_file(choice), choice, bos, eos);
    }
    const std::optional<std::string> model_template =
        file ? file->get_string("tokenizer.chat_template") : std::nullopt;
    if (model_template) {
        const std::string& source = *model_template;
        const auto builtin = detect_builtin(source) ? detect_builtin(source) : builtin_from_vocab(tok);
        try {
            ChatFormat f = from_source(source, "the model's template", bos, eos);
            if (builtin) {
                f.fallback_ = parse_shared(*builtin_template(*builtin), fmt::format("built-in {}", *builtin));
                f.fallback_name_ = std::string(*builtin);
                f.warn_ = warn;
            }
            return f;
        } catch (const TemplateError& e) {
            if (!builtin)
                throw UsageError(fmt::format("the model's chat template cannot be used ({}); give --chat-template "
                                             "NAME|FILE{}",
                                             e.what(), or_other));
            if (warn)
                warn(fmt::format("the model's chat template cannot be used ({}); using the built-in {} format",
                                 e.what(), *builtin));
            return from_source(*builtin_template(*builtin), fmt::format("built-in {}", *builtin), bos, eos);
        }
    }
    // No template: the format the vocabulary's control tokens name (Gemma 3's GGUFs carry <start_of_turn> and no
    // template, for one).
    if (auto builtin = builtin_from_vocab(tok))
        return from_source(*builtin_template(*builtin), fmt::format("built-in {}", *builtin), bos, eos);
    throw UsageError(fmt::format("the model has no chat template: give --chat-template NAME|FILE (built-in: {}){}",
                                 fmt::join(builtin_template_names(), ", "), or_other));
}

RenderedChat ChatFormat::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const std::atomic<bool>* cancel, const nlohmann::ordered_json& extra) const {
    if (!extra.is_object()) throw UsageError("the template variables beside the messages must be a JSON object");
    nlohmann::ordered_json vars = extra;
    vars["messages"] = messages;
    vars["add_generation_prompt"] = add_generation_prompt;
    vars["bos_token"] = bos_;
    vars["eos_token"] = eos_;
    RenderOptions options;
    options.cancel = cancel;
    RenderedText r;
    try {
        r = tmpl_->render_tracked(vars, options);
    } catch (const TemplateRaised&) {
        throw;  // the template refuses this conversation: that is the user's answer, not a renderer failure
    } catch (const TemplateBudgetError&) {
        throw;  // a template that runs away is not one to replace quietly
    } catch (const TemplateError& e) {
        if (!fallback_) throw;
        if (!warned_ && warn_)
            warn_(fmt::format("the model's chat template failed ({}); using the built-in {} format", e.what(),
                              fallback_name_));
        warned_ = true;
        r = fallback_->render_tracked(vars, options);
    }
    RenderedChat out;
    out.text = std::move(r.text);
    for (const auto& [begin, end] : r.untrusted) out.literal.push_back({begin, end - begin});
    return out;
}

std::vector<int32_t> ChatFormat::tokenize(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                          bool add_generation_prompt, const std::atomic<bool>* cancel,
                                          const nlohmann::ordered_json& vars) const {
    RenderedChat r = render(messages, add_generation_prompt, cancel, vars);
    // The template's own BOS text (not a message that starts with it) stands for the BOS token.
    const bool has_bos = !bos_.empty() && r.text.starts_with(bos_) && (r.literal.empty() || r.literal[0].begin >= bos_.size());
    return tok.encode_with_literals(r.text, !has_bos, r.literal, cancel);
}

namespace {

using ojson = nlohmann::ordered_json;

// A message's "content": a string, null, or text parts joined (what templates that print a string expect).
void normalize_content(ojson& m, size_t index, const std::string& what) {
    auto it = m.find("content");
    if (it == m.end() || !(it->is_string() || it->is_null() || it->is_array()))
        throw UsageError(fmt::format("{}: message {} has no string \"content\"", what, index));
    if (!it->is_array()) return;
    std::string text;
    for (const auto& part : *it) {
        const bool ok = part.is_object() && part.contains("type") && part["type"] == "text" && part.contains("text") &&
                        part["text"].is_string();
        if (!ok)
            throw UsageError(fmt::format("{}: message {}: content parts must be {{\"type\": \"text\", \"text\": ...}}",
                                         what, index));
        text += part["text"].get<std::string>();
    }
    *it = std::move(text);
}

bool nonempty_string(const ojson& obj, const char* key) {
    auto it = obj.find(key);
    return it != obj.end() && it->is_string() && !it->get<std::string>().empty();
}

void check_tool_choice(const ojson& choice, const std::string& what) {
    if (choice.is_string() && (choice == "none" || choice == "auto" || choice == "required")) return;
    if (choice.is_object() && choice.contains("function") && choice["function"].is_object() &&
        nonempty_string(choice["function"], "name"))
        return;
    throw UsageError(fmt::format("{}: \"tool_choice\" must be \"none\", \"auto\", \"required\" or "
                                 "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}",
                                 what));
}

}  // namespace

void check_tools(const nlohmann::ordered_json& tools, const std::string& what) {
    if (!tools.is_array()) throw UsageError(fmt::format("{}: \"tools\" must be a JSON array of tool definitions", what));
    for (size_t i = 0; i < tools.size(); ++i) {
        const ojson& t = tools[i];
        const ojson* fn = t.is_object() && t.contains("function") ? &t["function"] : &t;
        if (t.is_object() && t.contains("type") && t["type"] != "function")
            throw UsageError(fmt::format("{}: tool {} has \"type\" {}: only \"function\" tools are supported", what,
                                         i + 1, t["type"].dump()));
        if (!fn->is_object() || !nonempty_string(*fn, "name"))
            throw UsageError(fmt::format("{}: tool {} is not {{\"type\": \"function\", \"function\": {{\"name\": "
                                         "...}}}}",
                                         what, i + 1));
        if (fn->contains("parameters") && !(*fn)["parameters"].is_object())
            throw UsageError(fmt::format("{}: tool {}: \"parameters\" must be a JSON schema object", what, i + 1));
    }
}

nlohmann::ordered_json parse_tools(const std::string& json_text, const std::string& what) {
    ojson tools = parse_untrusted_ordered_json(json_text, what);
    check_tools(tools, what);
    return tools;
}

ChatRequest chat_request_from_json(nlohmann::ordered_json j, const std::string& what) {
    ChatRequest request;
    if (j.is_object() && j.contains("messages")) {
        ojson messages = std::move(j["messages"]);
        j.erase("messages");
        request.vars = std::move(j);
        j = std::move(messages);
    }
    if (!j.is_array()) throw UsageError(fmt::format("{}: expected a JSON array of messages or {{\"messages\": [...]}}", what));
    for (size_t i = 0; i < j.size(); ++i) {
        auto& m = j[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw UsageError(fmt::format("{}: message {} has no string \"role\"", what, i + 1));
        normalize_content(m, i + 1, what);
    }
    request.messages = std::move(j);
    ojson& vars = request.vars;
    if (auto kw = vars.find("chat_template_kwargs"); kw != vars.end()) {
        if (!kw->is_object())
            throw UsageError(fmt::format("{}: \"chat_template_kwargs\" must be a JSON object", what));
        ojson kwargs = std::move(*kw);
        vars.erase("chat_template_kwargs");
        for (auto& [key, value] : kwargs.items()) vars[key] = std::move(value);
    }
    if (vars.contains("tools") && !vars["tools"].is_null()) check_tools(vars["tools"], what);
    if (vars.contains("tool_choice") && !vars["tool_choice"].is_null()) check_tool_choice(vars["tool_choice"], what);
    check_chosen_tool(vars, what);
    return request;
}

ChatRequest parse_chat_request(const std::string& json_text, const std::string& what) {
    return chat_request_from_json(parse_untrusted_ordered_json(json_text, what), what);
}

nlohmann::ordered_json parse_messages(const std::string& json_text, const std::string& what) {
    return parse_chat_request(json_text, what).messages;
}

nlohmann::json one_turn(const std::string& system, const std::string& user) {
    nlohmann::json messages = nlohmann::json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    messages.push_back({{"role", "user"}, {"content", user}});
    return messages;
}

std::vector<int32_t> prompt_tokens(const Tokenizer& tok, const ChatFormat* format, const std::string& prompt,
                                   const std::string& system, const std::atomic<bool>* cancel,
                                   const nlohmann::ordered_json& vars) {
    if (!format) {
        if (!vars.empty()) throw UsageError("tools and template options need the chat template: not with --raw");
        return tok.encode(prompt, true, false, cancel);
    }
    return format->tokenize(tok, one_turn(system, prompt), true, cancel, vars);
}

}  // namespace quill::chat
