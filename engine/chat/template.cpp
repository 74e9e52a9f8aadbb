#include "engine/chat/template.h"

#include "engine/chat/jinja_eval.h"
#include "engine/chat/jinja_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace quill::chat {

struct ChatTemplate::Impl {
    std::string raw;  // the source as given
    jinja::Source source;
    jinja::Body body;
};

namespace {

// A message's role is the caller's structure, not content: the template's own, like bos_token.
void trust_roles(const jinja::Value& messages) {
    if (!messages.is_list()) return;
    for (const jinja::Value& m : messages.as_list()->items) {
        if (!m.is_dict()) continue;
        const jinja::Value* role = m.as_dict()->find(std::string_view("role"));
        if (role && role->is_string()) m.as_dict()->set(jinja::Value("role"), jinja::Value(role->as_string()));
    }
}

template <class Json>
jinja::Value make_vars(const Json& vars, const RenderOptions& options) {
    auto d = std::make_shared<jinja::Dict>();
    for (auto it = vars.begin(); it != vars.end(); ++it) {
        const auto& trusted = options.trusted_vars;
        const bool untrusted = std::find(trusted.begin(), trusted.end(), it.key()) == trusted.end();
        jinja::Value v = jinja::Value::from_json(it.value(), untrusted);
        if (it.key() == "messages" && untrusted) trust_roles(v);
        d->set(jinja::Value(it.key()), std::move(v));
    }
    return jinja::Value(d);
}

template <class Json>
RenderedText render_json(const ChatTemplate::Impl& impl, const Json& vars, const RenderOptions& options) {
    if (!vars.is_object())
        throw TemplateError(fmt::format("{}: the template variables must be a JSON object", impl.source.name()));
    jinja::Value values;
    try {
        values = make_vars(vars, options);
    } catch (const jinja::ValueError& e) {
        throw TemplateError(fmt::format("{}: template variables: {}", impl.source.name(), e.message));
    }
    try {
        jinja::Text out = jinja::render(impl.source, impl.body, values, options);
        RenderedText r{std::move(out.bytes), {}};
        for (const jinja::Span& span : out.untrusted) r.untrusted.emplace_back(span.begin, span.end);
        return r;
    } catch (const quill::Error&) {
        throw;
    } catch (const std::exception& e) {  // a safety net: nothing but TemplateError leaves the renderer
        throw TemplateError(fmt::format("{}: internal error while rendering: {}", impl.source.name(), e.what()));
    }
}

// Each format as its published spec lays out a conversation. Formats without a system role fold the system
// message into the first user turn.
constexpr std::string_view kChatml = R"JINJA(
{%- for message in messages %}
{{- '<|im_start|>' ~ message.role ~ '\n' ~ message.content ~ '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %}
)JINJA";

constexpr std::string_view kLlama2 = R"JINJA(
{%- if messages and messages[0].role == 'system' %}
    {%- set system = messages[0].content | trim %}
    {%- set turns = messages[1:] %}
{%- else %}
    {%- set system = '' %}
    {%- set turns = messages %}
{%- endif %}
{%- for message in turns %}
    {%- if message.role == 'user' %}
        {%- set content = message.content | trim %}
        {%- if loop.first and system %}
            {%- set content = '<<SYS>>\n' ~ system ~ '\n<</SYS>>\n\n' ~ content %}
        {%- endif %}
        {{- bos_token ~ '[INST] ' ~ content ~ ' [/INST]' }}
    {%- elif message.role == 'assistant' %}
        {{- ' ' ~ message.content | trim ~ ' ' ~ eos_token }}
    {%- endif %}
{%- endfor %}
)JINJA";

constexpr std::string_view kLlama3 = R"JINJA(
{{- bos_token }}
{%- for message in messages %}
{{- '<|start_header_id|>' ~ message.role ~ '<|end_header_id|>\n\n' ~ message.content | trim ~ '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)JINJA";

constexpr std::string_view kGemma = R"JINJA(
{{- bos_token }}
{%- set ns = namespace(system='') %}
{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- set ns.system = message.content | trim %}
    {%- else %}
        {%- set role = 'model' if message.role == 'assistant' else message.role %}
        {{- '<start_of_turn>' ~ role ~ '\n' }}
        {%- if ns.system and role == 'user' %}
            {{- ns.system ~ '\n\n' }}
            {%- set ns.system = '' %}
        {%- endif %}
        {{- message.content | trim ~ '<end_of_turn>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<start_of_turn>model\n' }}
{%- endif %}
)JINJA";

constexpr std::string_view kMistral = R"JINJA(
{{- bos_token }}
{%- set ns = namespace(system='') %}
{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- set ns.system = message.content | trim %}
    {%- elif message.role == 'user' %}
        {%- set content = message.content | trim %}
        {%- if ns.system %}
            {%- set content = ns.system ~ '\n\n' ~ content %}
            {%- set ns.system = '' %}
        {%- endif %}
        {{- '[INST] ' ~ content ~ ' [/INST]' }}
    {%- elif message.role == 'assistant' %}
        {{- message.content | trim ~ eos_token }}
    {%- endif %}
{%- endfor %}
)JINJA";

constexpr std::string_view kPhi3 = R"JINJA(
{%- for message in messages %}
    {%- if message.role == 'system' and message.content %}
{{- '<|system|>\n' ~ message.content ~ '<|end|>\n' }}
    {%- elif message.role == 'user' %}
{{- '<|user|>\n' ~ message.content ~ '<|end|>\n' }}
    {%- elif message.role == 'assistant' %}
{{- '<|assistant|>\n' ~ message.content ~ '<|end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|assistant|>\n' }}
{%- else %}
{{- eos_token }}
{%- endif %}
)JINJA";

constexpr std::string_view kZephyr = R"JINJA(
{%- for message in messages %}
    {%- if message.role == 'user' %}
{{- '<|user|>\n' ~ message.content ~ eos_token ~ '\n' }}
    {%- elif message.role == 'assistant' %}
{{- '<|assistant|>\n' ~ message.content ~ eos_token ~ '\n' }}
    {%- else %}
{{- '<|' ~ message.role ~ '|>\n' ~ message.content ~ eos_token ~ '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|assistant|>\n' }}
{%- endif %}
)JINJA";

struct Builtin {
    std::string_view name;
    std::string_view source;
};
constexpr std::array<Builtin, 7> kBuiltins = {{
    {"chatml", kChatml}, {"llama2", kLlama2}, {"llama3", kLlama3}, {"gemma", kGemma},
    {"mistral", kMistral}, {"phi3", kPhi3}, {"zephyr", kZephyr},
}};

}  // namespace

ChatTemplate ChatTemplate::parse(std::string_view source, std::string name) {
    auto impl = std::make_shared<Impl>(Impl{std::string(source), jinja::Source(source, std::move(name)), {}});
    impl->body = jinja::parse(impl->source);
    return ChatTemplate(std::move(impl));
}

std::string ChatTemplate::render(const nlohmann::json& vars, const RenderOptions& options) const {
    return render_json(*impl_, vars, options).text;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& vars, const RenderOptions& options) const {
    return render_json(*impl_, vars, options).text;
}

RenderedText ChatTemplate::render_tracked(const nlohmann::ordered_json& vars, const RenderOptions& options) const {
    return render_json(*impl_, vars, options);
}

const std::string& ChatTemplate::source() const {
    return impl_->raw;
}

const std::string& ChatTemplate::name() const {
    return impl_->source.name();
}

std::optional<std::string_view> builtin_template(std::string_view name) {
    for (const auto& b : kBuiltins)
        if (b.name == name) return b.source;
    return std::nullopt;
}

std::vector<std::string_view> builtin_template_names() {
    std::vector<std::string_view> names;
    for (const auto& b : kBuiltins) names.push_back(b.name);
    return names;
}

std::optional<std::string_view> detect_builtin(std::string_view t) {
    auto has = [&](std::string_view marker) { return t.find(marker) != std::string_view::npos; };
    if (has("<|im_start|>")) return "chatml";
    if (has("<|start_header_id|>")) return "llama3";
    if (has("<start_of_turn>")) return "gemma";
    if (has("<|user|>")) {
        if (has("<|end|>")) return "phi3";
        if (has("</s>") || has("eos_token")) return "zephyr";
    }
    if (has("[INST]")) return has("<<SYS>>") ? "llama2" : "mistral";
    return std::nullopt;
}

}  // namespace quill::chat
