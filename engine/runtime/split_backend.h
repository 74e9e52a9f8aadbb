// A model split by layers across several backends (a device plan's ranges): each runs its layers with its own KV
// cache and weights, the hidden states cross from one to the next once per range boundary per forward.
#pragma once

#include "engine/runtime/backend.h"

#include <memory>
#include <string>
#include <vector>

namespace quill {

class SplitBackend final : public Backend {
public:
    // ranges: backends holding consecutive layer ranges (Backend::layer_range) from 0 to n_layer, of one model and
    // one context and slot count; plan_line: the plan as the load line states it (DevicePlan::line).
    SplitBackend(std::vector<std::unique_ptr<Backend>> ranges, std::string plan_line);

    std::string_view name() const override { return "split"; }
    const ModelConfig& config() const override { return ranges_.front()->config(); }
    // The layers with a cache of their own (ModelConfig::n_layer_kv), the context and slots of the ranges.
    const KvCacheShape& kv_shape() const override { return kv_; }
    // The plan line, then the first range's backend.
    BackendInfo describe() const override;
    // embed_tokens on the first range, forward_layers on each, output_logits on the last.
    void forward(const Batch& batch, std::span<float> logits) override;
    int64_t max_rewind() const override;  // the least of the ranges'
    bool can_copy_kv() const override;
    void copy_kv(int32_t src, int32_t dst, int64_t begin, int64_t end) override;  // on every range
    void keep_state(int32_t slot, int64_t pos) override;                         // on every range
    int64_t resume_position(int32_t slot, int64_t n) const override;             // the least of the ranges'

    const Backend& range(size_t i) const { return *ranges_.at(i); }
    size_t n_ranges() const { return ranges_.size(); }

private:
    std::vector<std::unique_ptr<Backend>> ranges_;
    std::string plan_line_;
    KvCacheShape kv_;
    std::vector<float> hidden_;  // [n_tokens, n_embd] the residual stream between ranges
};

}  // namespace quill
