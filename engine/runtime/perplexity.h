// `quill perplexity`: how well a model predicts a text, measured as llama.cpp's llama-perplexity measures it, so that
// the two figures compare on the same model and text.
//
// The text's tokens (BOS added as the tokenizer does) are cut into chunks of n_ctx tokens; each chunk runs from an
// empty cache with its first token replaced by BOS (when the tokenizer adds one), and only the second half of each
// chunk is scored: the log-probability each position from n_ctx/2 to n_ctx - 2 gives the next token, so every scored
// token sees at least n_ctx/2 tokens before it. Perplexity is exp of the mean negative log-probability over all
// scored tokens; its uncertainty is the standard error of that mean carried through exp.
#pragma once

#include "engine/runtime/backend.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace quill {

struct PerplexityOptions {
    int64_t n_ctx = 512;     // tokens per chunk: the backend's context must hold them
    int64_t n_batch = 512;   // tokens per forward pass
    int64_t max_chunks = 0;  // 0: every whole chunk of the text
    int32_t bos = -1;        // the token each chunk starts with instead of its own first token; -1: none
};

struct PerplexityResult {
    int64_t n_chunks = 0;            // chunks scored
    int64_t n_scored = 0;            // tokens scored (n_chunks * (n_ctx - n_ctx/2 - 1))
    double mean_nll = 0;             // mean negative log-probability, nats
    double ppl = 0;                  // exp(mean_nll)
    double ppl_error = 0;            // ppl * standard error of mean_nll
    std::vector<double> chunk_ppl;   // the running estimate after each chunk (llama-perplexity's "[i]ppl" list)
};

// The log-probability, in double precision, that logits [n_vocab] give token `token`: logit - logsumexp(logits).
double log_softmax_at(std::span<const float> logits, int32_t token);

// Scores `tokens` on slot 0 of the backend (whose context must hold n_ctx positions). `on_chunk` is called after
// each chunk with the result so far; `stop` is polled between forward passes and, when it says so, ends the run
// with the chunks scored so far. UsageError when the text has fewer than 2 * n_ctx tokens (llama-perplexity's rule)
// or n_ctx < 4.
PerplexityResult perplexity(Backend& backend, std::span<const int32_t> tokens, const PerplexityOptions& options,
                            const std::function<void(const PerplexityResult&)>& on_chunk = {},
                            const std::function<bool()>& stop = {});

}  // namespace quill
