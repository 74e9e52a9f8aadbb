// libFuzzer target: any bytes as a chat template, parsed and rendered with a small fixed conversation. Only
// quill::Error may come out (TemplateError for bad templates); a crash, hang, leak or other exception is a bug.
#include "engine/chat/template.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace {

const nlohmann::json& conversation() {
    static const nlohmann::json vars = nlohmann::json::parse(R"({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi! \u00e9\u4e16 <tag> \\n"},
            {"role": "assistant", "content": "Hello.", "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
            {"role": "tool", "content": "{\"ok\": true}"},
            {"role": "user", "content": "Bye"}
        ],
        "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                   "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
        "add_generation_prompt": true,
        "bos_token": "<s>",
        "eos_token": "</s>"
    })");
    return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view source(reinterpret_cast<const char*>(data), size);
    quill::chat::RenderOptions options;
    options.max_output_bytes = 1 << 16;  // small limits keep each input fast
    options.max_steps = 20000;
    std::tm now{};
    now.tm_year = 126;
    now.tm_mon = 10;
    now.tm_mday = 29;
    options.now = now;
    try {
        auto tmpl = quill::chat::ChatTemplate::parse(source, "fuzz");
        (void)tmpl.render(conversation(), options);
    } catch (const quill::Error&) {
    }
    return 0;
}
