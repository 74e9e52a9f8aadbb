#include "engine/runtime/perplexity.h"

#include "engine/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace quill {

double log_softmax_at(std::span<const float> logits, int32_t token) {
    QUILL_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(), "token {} outside the logits", token);
    double max = logits[0];
    for (float v : logits) max = std::max(max, static_cast<double>(v));
    double sum = 0;
    for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
    return static_cast<double>(logits[static_cast<size_t>(token)]) - max - std::log(sum);
}

PerplexityResult perplexity(Backend& backend, std::span<const int32_t> tokens, const PerplexityOptions& options,
                            const std::function<void(const PerplexityResult&)>& on_chunk,
                            const std::function<bool()>& stop) {
    const int64_t n_ctx = options.n_ctx;
    if (n_ctx < 4) throw UsageError(fmt::format("perplexity needs a context of at least 4 tokens, not {}", n_ctx));
    if (n_ctx > backend.kv_shape().n_ctx)
        throw UsageError(fmt::format("a context of {} tokens is more than the backend holds ({})", n_ctx,
                                     backend.kv_shape().n_ctx));
    if (static_cast<int64_t>(tokens.size()) < 2 * n_ctx)
        throw UsageError(fmt::format("the text is {} tokens; perplexity with a context of {} needs at least {}",
                                     tokens.size(), n_ctx, 2 * n_ctx));
    const int64_t n_batch = std::max<int64_t>(1, options.n_batch);
    int64_t n_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
    if (options.max_chunks > 0) n_chunks = std::min(n_chunks, options.max_chunks);
    const int64_t first = n_ctx / 2;  // the first position whose prediction is scored
    const int64_t n_vocab = backend.config().n_vocab;

    PerplexityResult result;
    double sum_nll = 0, sum_nll2 = 0;
    std::vector<float> logits;
    Batch batch;
    for (int64_t c = 0; c < n_chunks; ++c) {
        const std::span<const int32_t> chunk = tokens.subspan(static_cast<size_t>(c * n_ctx), static_cast<size_t>(n_ctx));
        // Positions 0..n_ctx-1 are written again from 0, in order: each chunk sees only itself.
        for (int64_t b = 0; b < n_ctx; b += n_batch) {
            if (stop && stop()) return result;
            const int64_t end = std::min(n_ctx, b + n_batch);
            batch.tokens.clear();
            for (int64_t p = b; p < end; ++p) {
                const int32_t tok = p == 0 && options.bos >= 0 ? options.bos : chunk[static_cast<size_t>(p)];
                batch.add(tok, static_cast<int32_t>(p), 0, p >= first && p + 1 < n_ctx);
            }
            const int n_rows = batch.n_logits();
            logits.resize(static_cast<size_t>(n_rows * n_vocab));
            backend.forward(batch, logits);
            int row = 0;
            for (const BatchToken& t : batch.tokens) {
                if (!t.logits) continue;
                const std::span<const float> r(logits.data() + static_cast<size_t>(row++ * n_vocab),
                                               static_cast<size_t>(n_vocab));
                const double nll = -log_softmax_at(r, chunk[static_cast<size_t>(t.pos) + 1]);
                sum_nll += nll;
                sum_nll2 += nll * nll;
                ++result.n_scored;
            }
        }
        ++result.n_chunks;
        result.mean_nll = sum_nll / static_cast<double>(result.n_scored);
        result.ppl = std::exp(result.mean_nll);
        const double var = sum_nll2 / static_cast<double>(result.n_scored) - result.mean_nll * result.mean_nll;
        result.ppl_error = var > 0 && result.n_scored > 1
                               ? std::sqrt(var / static_cast<double>(result.n_scored - 1)) * result.ppl
                               : 0.0;
        result.chunk_ppl.push_back(result.ppl);
        if (on_chunk) on_chunk(result);
    }
    return result;
}

}  // namespace quill
