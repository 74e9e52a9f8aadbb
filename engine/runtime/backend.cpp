#include "engine/runtime/backend.h"

#include "engine/error.h"
#include "engine/runtime/kv_size.h"
#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>

namespace quill {

void check_kv_size(int64_t n_ctx, int64_t n_slots) {
    if (n_ctx < 1) throw UsageError(fmt::format("context size must be at least 1, got {}", n_ctx));
    if (n_slots < 1) throw UsageError(fmt::format("slot count must be at least 1, got {}", n_slots));
}

BackendInfo Backend::describe() const {
    return {std::string(name()), 0, "", fmt::format("{} backend", name())};
}

int Batch::n_logits() const {
    return static_cast<int>(std::count_if(tokens.begin(), tokens.end(), [](const BatchToken& t) { return t.logits; }));
}

size_t shared_prefix(std::span<const int32_t> cached, std::span<const int32_t> prompt) {
    size_t n = 0;
    while (n < cached.size() && n + 1 < prompt.size() && cached[n] == prompt[n]) ++n;
    return n;
}

size_t Backend::reusable_prefix(std::span<const int32_t> cached, int64_t written, std::span<const int32_t> prompt,
                                int32_t slot) const {
    const size_t n = shared_prefix(cached, prompt);
    if (written - static_cast<int64_t>(n) <= max_rewind()) return n;
    return slot >= 0 ? std::min(n, static_cast<size_t>(resume_position(slot, static_cast<int64_t>(n)))) : 0;
}

void advance_recurrent_positions(const Batch& batch, std::vector<int64_t>& state_pos) {
    std::vector<int64_t> next = state_pos;
    for (const BatchToken& t : batch.tokens) {
        int64_t& at = next.at(static_cast<size_t>(t.slot));
        if (t.pos != 0 && t.pos != at)
            throw UsageError(fmt::format("slot {}: position {} on a recurrent model whose state stands at position {} "
                                         "(its sequence continues only from there, or starts again at 0)",
                                         t.slot, t.pos, at));
        at = t.pos + 1;
    }
    state_pos = std::move(next);
}

void Backend::copy_kv(int32_t, int32_t, int64_t, int64_t) {
    QUILL_CHECK(false, "the {} backend cannot copy K and V between slots", name());
}

namespace {
[[noreturn]] void no_split(std::string_view backend) {
    throw UsageError(fmt::format("the {} backend cannot run part of a model's layers (--devices)", backend));
}
}  // namespace

void Backend::embed_tokens(const Batch&, std::span<float>) { no_split(name()); }
void Backend::forward_layers(const Batch&, std::span<float>) { no_split(name()); }
void Backend::output_logits(const Batch&, std::span<const float>, std::span<float>) { no_split(name()); }

void Backend::forward_sample(const Batch& batch, std::span<Sampler* const> samplers, int64_t n_token_ids,
                             std::span<int32_t> tokens) {
    forward_sample_on_host(batch, samplers, n_token_ids, tokens);
}

void Backend::forward_sample_on_host(const Batch& batch, std::span<Sampler* const> samplers, int64_t n_token_ids,
                                     std::span<int32_t> tokens) {
    const size_t m = static_cast<size_t>(batch.n_logits());
    const size_t n_vocab = static_cast<size_t>(config().n_vocab);
    QUILL_CHECK(samplers.size() == m && tokens.size() >= m, "{} samplers and room for {} tokens for {} logit rows",
                samplers.size(), tokens.size(), m);
    QUILL_CHECK(n_token_ids > 0 && static_cast<size_t>(n_token_ids) <= n_vocab, "n_token_ids {} outside 1..{}",
                n_token_ids, n_vocab);
    sample_logits_.resize(std::max<size_t>(1, m) * n_vocab);
    forward(batch, sample_logits_);
    for (size_t r = 0; r < m; ++r) {
        const std::span<float> row(sample_logits_.data() + r * n_vocab, n_vocab);
        std::fill(row.begin() + n_token_ids, row.end(), -INFINITY);
        tokens[r] = samplers[r]->sample(row);
    }
}

std::string_view kv_type_name(KvType t) { return t == KvType::f16 ? "f16" : "f32"; }

void check_batch(const Batch& batch, const ModelConfig& config, const KvCacheShape& kv, std::span<const float> logits) {
    check_batch(batch, config, kv);
    const size_t need = static_cast<size_t>(batch.n_logits()) * config.n_vocab;
    QUILL_CHECK(logits.size() >= need, "logits buffer has {} floats, the batch needs {}", logits.size(), need);
}

void check_batch(const Batch& batch, const ModelConfig& config, const KvCacheShape& kv) {
    if (batch.tokens.empty()) throw UsageError("empty batch");
    for (const auto& t : batch.tokens) {
        if (t.token < 0 || t.token >= config.n_vocab)
            throw UsageError(fmt::format("token id {} is outside the vocabulary (0..{})", t.token, config.n_vocab - 1));
        if (t.pos < 0 || t.pos >= kv.n_ctx)
            throw UsageError(fmt::format("position {} is outside the context of {} tokens", t.pos, kv.n_ctx));
        if (t.slot < 0 || t.slot >= kv.n_slots)
            throw UsageError(fmt::format("slot {} is outside 0..{}", t.slot, kv.n_slots - 1));
    }
    for (size_t i = 1; i < batch.tokens.size(); ++i) {
        if (batch.tokens[i].decode && !batch.tokens[i - 1].decode)
            throw UsageError(
                fmt::format("batch token {} is a decode step after a prompt token: decode steps come first", i));
    }
    // Two tokens at one (slot, pos) would write the same cache row, and which one wins is a race.
    std::vector<std::pair<int32_t, int32_t>> at;  // [n_tokens] (slot, pos)
    at.reserve(batch.tokens.size());
    for (const auto& t : batch.tokens) at.emplace_back(t.slot, t.pos);
    std::sort(at.begin(), at.end());
    if (auto dup = std::adjacent_find(at.begin(), at.end()); dup != at.end())
        throw UsageError(fmt::format("the batch holds two tokens at slot {} position {}", dup->first, dup->second));
}

void check_copy(const KvCacheShape& kv, int32_t src, int32_t dst, int64_t begin, int64_t end) {
    for (int32_t slot : {src, dst})
        if (slot < 0 || slot >= kv.n_slots)
            throw UsageError(fmt::format("slot {} is outside 0..{}", slot, kv.n_slots - 1));
    if (src == dst) throw UsageError(fmt::format("copying slot {} onto itself", src));
    if (begin < 0 || begin > end || end > kv.n_ctx)
        throw UsageError(fmt::format("positions [{}, {}) are not a range inside the context of {} tokens", begin, end,
                                     kv.n_ctx));
}

int64_t kv_cache_layers(const ModelConfig& config, LayerRange layers) {
    for (int64_t l = layers.begin; l < layers.end; ++l)
        if (config.kv_layer(l) < layers.begin)
            throw UsageError(fmt::format("layers {}-{} of a split forward: layer {} attends over the KV cache of layer "
                                         "{}, which another range holds (split this model after layer {} or before "
                                         "layer {})", layers.begin, layers.end - 1, l, config.kv_layer(l),
                                         config.n_layer - 1, config.n_layer - config.n_kv_shared - 2));
    return config.kv_layers_before(layers.end) - config.kv_layers_before(layers.begin);
}

}  // namespace quill
