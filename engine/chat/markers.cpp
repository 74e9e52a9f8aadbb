#include "engine/chat/markers.h"

#include <string_view>

namespace quill::chat {

std::vector<int32_t> marker_tokens(const Tokenizer& tok, ToolCallSyntax tools, ReasoningSyntax reasoning) {
    std::vector<std::string_view> texts;
    if (tools == ToolCallSyntax::hermes || tools == ToolCallSyntax::qwen3_xml)
        texts.insert(texts.end(), {"<tool_call>", "</tool_call>"});
    if (tools == ToolCallSyntax::mistral || tools == ToolCallSyntax::mistral_list)
        texts.insert(texts.end(), {"[TOOL_CALLS]", "[ARGS]"});
    if (reasoning == ReasoningSyntax::think) texts.insert(texts.end(), {"<think>", "</think>"});
    if (texts.empty()) return {};
    return control_tokens_with_text(tok, texts);
}

}  // namespace quill::chat
