#include "engine/runtime/backend.h"

#include "engine/error.h"

#include <algorithm>

namespace quill {

int Batch::n_logits() const {
    return static_cast<int>(std::count_if(tokens.begin(), tokens.end(), [](const BatchToken& t) { return t.logits; }));
}

std::string_view kv_type_name(KvType t) { return t == KvType::f16 ? "f16" : "f32"; }

void check_batch(const Batch& batch, const ModelConfig& config, const KvCacheShape& kv, std::span<const float> logits) {
    if (batch.tokens.empty()) throw UsageError("empty batch");
    for (const auto& t : batch.tokens) {
        if (t.token < 0 || t.token >= config.n_vocab)
            throw UsageError(fmt::format("token id {} is outside the vocabulary (0..{})", t.token, config.n_vocab - 1));
        if (t.pos < 0 || t.pos >= kv.n_ctx)
            throw UsageError(fmt::format("position {} is outside the context of {} tokens", t.pos, kv.n_ctx));
        if (t.slot < 0 || t.slot >= kv.n_slots)
            throw UsageError(fmt::format("slot {} is outside 0..{}", t.slot, kv.n_slots - 1));
    }
    // Two tokens at one (slot, pos) would write the same cache row, and which one wins is a race.
    std::vector<std::pair<int32_t, int32_t>> at;  // [n_tokens] (slot, pos)
    at.reserve(batch.tokens.size());
    for (const auto& t : batch.tokens) at.emplace_back(t.slot, t.pos);
    std::sort(at.begin(), at.end());
    if (auto dup = std::adjacent_find(at.begin(), at.end()); dup != at.end())
        throw UsageError(fmt::format("the batch holds two tokens at slot {} position {}", dup->first, dup->second));
    const size_t need = static_cast<size_t>(batch.n_logits()) * config.n_vocab;
    QUILL_CHECK(logits.size() >= need, "logits buffer has {} floats, the batch needs {}", logits.size(), need);
}

}  // namespace quill
