// The markers of a chat format's tool-call and reasoning syntaxes that a vocabulary makes control tokens (Mistral's
// [TOOL_CALLS] and [ARGS], <tool_call> or <think> in some vocabularies): control tokens print nothing, so without
// them the answer's parsers would never see the marker, and a grammar that forces one could not choose the token.
// They print their text instead, as llama.cpp's server renders a chat format's "preserved" tokens.
#pragma once

#include "engine/chat/reasoning.h"
#include "engine/chat/tool_calls.h"
#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <vector>

namespace quill::chat {

// The control tokens of `tok` that are markers of `tools` or `reasoning` (GenerationParams::shown_tokens), sorted:
//   hermes, qwen3_xml  <tool_call> </tool_call>
//   mistral, mistral_list  [TOOL_CALLS] [ARGS]
//   think  <think> </think>
// (harmony's markers already print their text: the tokenizer reads them so.)
std::vector<int32_t> marker_tokens(const Tokenizer& tok, ToolCallSyntax tools, ReasoningSyntax reasoning);

}  // namespace quill::chat
