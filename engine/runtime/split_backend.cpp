#include "engine/runtime/split_backend.h"

#include "engine/error.h"

#include <algorithm>

namespace quill {

SplitBackend::SplitBackend(std::vector<std::unique_ptr<Backend>> ranges, std::string plan_line)
    : ranges_(std::move(ranges)), plan_line_(std::move(plan_line)) {
    QUILL_CHECK(!ranges_.empty(), "a split backend without ranges");
    int64_t next = 0;
    for (const auto& r : ranges_) {
        const LayerRange l = r->layer_range();
        QUILL_CHECK(l.begin == next && l.end > l.begin, "range of layers {}-{} after layer {}", l.begin, l.end - 1,
                    next - 1);
        QUILL_CHECK(r->kv_shape().n_ctx == ranges_[0]->kv_shape().n_ctx &&
                        r->kv_shape().n_slots == ranges_[0]->kv_shape().n_slots,
                    "ranges with different contexts or slot counts");
        next = l.end;
    }
    QUILL_CHECK(next == config().n_layer, "ranges end at layer {} of {}", next, config().n_layer);
    kv_ = ranges_[0]->kv_shape();
    kv_.n_layer = config().n_layer_kv();  // (the layers with a cache of their own)
}

BackendInfo SplitBackend::describe() const {
    BackendInfo info = ranges_[0]->describe();
    info.name = std::string(name());
    info.summary = plan_line_ + "; " + info.summary;
    return info;
}

void SplitBackend::forward(const Batch& batch, std::span<float> logits) {
    check_batch(batch, config(), kv_, logits);
    hidden_.resize(batch.tokens.size() * static_cast<size_t>(config().n_embd));
    ranges_.front()->embed_tokens(batch, hidden_);
    for (const auto& r : ranges_) r->forward_layers(batch, hidden_);
    ranges_.back()->output_logits(batch, hidden_, logits);
}

int64_t SplitBackend::max_rewind() const {
    int64_t m = INT64_MAX;
    for (const auto& r : ranges_) m = std::min(m, r->max_rewind());
    return m;
}

void SplitBackend::keep_state(int32_t slot, int64_t pos) {
    for (const auto& r : ranges_) r->keep_state(slot, pos);
}

int64_t SplitBackend::resume_position(int32_t slot, int64_t n) const {
    int64_t m = n;
    for (const auto& r : ranges_) m = std::min(m, r->resume_position(slot, n));
    return m;
}

bool SplitBackend::can_copy_kv() const {
    return std::all_of(ranges_.begin(), ranges_.end(), [](const auto& r) { return r->can_copy_kv(); });
}

void SplitBackend::copy_kv(int32_t src, int32_t dst, int64_t begin, int64_t end) {
    check_copy(kv_, src, dst, begin, end);
    for (const auto& r : ranges_) r->copy_kv(src, dst, begin, end);
}

}  // namespace quill
