// libFuzzer target: any bytes as a chat template, parsed and rendered with a small fixed conversation under small
// render budgets (a 200 ms deadline, 64 KiB strings, 16 MiB of values), so that no input can time out or run out
// of memory. Only quill::Error may come out (TemplateError for bad templates); a crash, hang, leak or other
// exception is a bug, and so is a provenance that is not sorted, disjoint, non-empty byte ranges of the output.
#include "engine/chat/template.h"
#include "tests/fuzz/fuzz_util.h"

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
    options.max_list_items = 1 << 12;
    options.max_alloc_bytes = 16 << 20;
    options.max_steps = 20000;
    options.max_time = std::chrono::milliseconds(200);
    std::tm now{};
    now.tm_year = 126;
    now.tm_mon = 10;
    now.tm_mday = 29;
    options.now = now;
    try {
        auto tmpl = quill::chat::ChatTemplate::parse(source, "fuzz");
        const quill::chat::RenderedText r = tmpl.render_tracked(conversation(), options);
        for (size_t i = 0; i < r.untrusted.size(); ++i) {
            const auto [begin, end] = r.untrusted[i];
            quill::fuzz::check(begin < end && end <= r.text.size(), "fuzz_template", "an untrusted range out of bounds");
            quill::fuzz::check(i == 0 || begin > r.untrusted[i - 1].second, "fuzz_template",
                               "untrusted ranges not sorted and apart");
        }
    } catch (const quill::Error&) {
    }
    return 0;
}
