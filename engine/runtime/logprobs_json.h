// Log-probabilities as JSON, in the shapes OpenAI's API gives them, for `run --json` and batch records.
#pragma once

#include "engine/runtime/sampler.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <span>

namespace quill {

// One object per generated token: {"token": its text, "logprob", "bytes": [its bytes], "top_logprobs": [{"token",
// "logprob", "bytes"}, ...]}, with "id" (the token id) first in each object when with_ids. A token's text is its
// bytes, which may be part of a UTF-8 character (the JSON writer replaces what is not UTF-8; "bytes" is exact).
// This is chat completions' choices[].logprobs.content.
// The control tokens in `shown` (sorted: GenerationParams::shown_tokens, a chat format's markers) have their text
// (shown_bytes), as the answer printed them.
nlohmann::ordered_json logprobs_content(const Tokenizer& tok, std::span<const TokenLogprobs> lps, bool with_ids,
                                        std::span<const int32_t> shown = {});

// The legacy completions' choices[].logprobs: {"tokens": [texts], "token_logprobs": [...], "top_logprobs":
// [{text: logprob, ...}, ...], "text_offset": [byte offset of each token in the text]}.
nlohmann::ordered_json completion_logprobs(const Tokenizer& tok, std::span<const TokenLogprobs> lps,
                                           std::span<const int32_t> shown = {});

}  // namespace quill
