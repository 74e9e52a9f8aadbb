// Fuzz target: a conversation file as `quill template --messages` and chat's /load read it: parse_chat_request, the
// template rendering the parsed messages and variables as they are (template --messages), the grammar of the call
// a "tool_choice" forces (as a batch request's is made), then Conversation::load and a rendering
// of the conversation it keeps (/load, then the next turn). Bad input must come back as quill::Error, never a
// crash, a hang, an abort or another exception; the tree parse_messages returns is never deeper than
// kMaxJsonDepth, every message it passes has a string role and the variables beside them are an object.
#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/chat/tool_calls.h"
#include "engine/grammar/constraint.h"
#include "engine/error.h"
#include "engine/io/json_input.h"
#include "tests/fuzz/fuzz_util.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace {

// A backend that is never run: Conversation::load and messages() do not touch it.
class NoBackend final : public quill::Backend {
public:
    std::string_view name() const override { return "none"; }
    const quill::ModelConfig& config() const override { return config_; }
    const quill::KvCacheShape& kv_shape() const override { return kv_; }
    void forward(const quill::Batch&, std::span<float>) override { std::abort(); }

private:
    quill::ModelConfig config_;
    quill::KvCacheShape kv_;
};

// How deep a tree is (its recursion is what the depth limit bounds).
int depth_of(const nlohmann::ordered_json& j) {
    if (!j.is_structured()) return 0;
    int most = 0;
    for (const auto& child : j) most = std::max(most, depth_of(child));
    return most + 1;
}

// A template that walks every message and prints each as JSON (the parsed messages may carry any fields), and a
// built-in one.
const std::vector<quill::chat::ChatFormat>& formats() {
    static const std::vector<quill::chat::ChatFormat> f = [] {
        std::vector<quill::chat::ChatFormat> v;
        v.push_back(quill::chat::ChatFormat::from_source(
            "{{ tools | tojson }}{% for m in messages %}{{ m.role }}: {{ m.content }} {{ m | tojson }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}",
            "fuzz", "<s>", "</s>"));
        v.push_back(quill::chat::ChatFormat::choose(nullptr, nullptr, "chatml", [](const std::string&) {}));
        return v;
    }();
    return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    quill::chat::ChatRequest request;
    try {
        request = quill::chat::parse_chat_request(text, "fuzz.json");
    } catch (const quill::Error&) {
        return 0;
    }
    const nlohmann::ordered_json& messages = request.messages;
    quill::fuzz::check(depth_of(messages) <= quill::kMaxJsonDepth && depth_of(request.vars) <= quill::kMaxJsonDepth,
                       "parse_chat_request", "a tree deeper than the limit");
    quill::fuzz::check(request.vars.is_object(), "parse_chat_request", "variables that are not an object");
    for (const auto& m : messages)
        quill::fuzz::check(m.is_object() && m.contains("role") && m.at("role").is_string(), "parse_chat_request", "a message without a string role");
    for (const auto& format : formats()) {
        try {
            (void)format.render(messages, true, nullptr, request.vars);
        } catch (const quill::Error&) {
        }
    }
    // The grammar of a call that "tool_choice" forces (batch requests, chat --tool-choice), from the tools offered
    // and their parameters' schemas, in a syntax chosen by the input's length.
    const quill::chat::ToolCallSyntax syntaxes[] = {quill::chat::ToolCallSyntax::hermes,
                                                    quill::chat::ToolCallSyntax::qwen3_xml,
                                                    quill::chat::ToolCallSyntax::mistral,
                                                    quill::chat::ToolCallSyntax::harmony};
    try {
        if (const auto spec = quill::chat::tool_choice_constraint(request.vars, syntaxes[size % 4], "fuzz.json"))
            (void)quill::grammar::compile_constraint(*spec);
    } catch (const quill::Error&) {
    }
    static NoBackend backend;
    const quill::Tokenizer& tok = *quill::fuzz::test_vocabs().front().tok;
    quill::chat::Conversation conv(backend, tok, formats().back(), 64, {}, quill::chat::ContextOverflow::error);
    conv.load(messages);
    for (const auto& m : conv.messages())
        quill::fuzz::check(m.at("role").is_string() && m.at("content").is_string(), "Conversation::load",
                           "a loaded message without string role and content");
    try {
        (void)formats().back().render(conv.messages(), true);
    } catch (const quill::Error&) {
    }
    return 0;
}
