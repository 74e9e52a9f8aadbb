// Mixture-of-experts routing for the CPU backend: which experts each token of a batch uses, with what weights, and
// the batch's tokens grouped by expert so that each expert's weights are read once per step.
#pragma once

#include "engine/model/model_config.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace quill::cpu {

// A batch's routing through one layer's experts. Everything a token gets depends on its router logits alone, and
// each expert's tokens keep the batch's order, so the leading decode steps stay first in every group.
class MoeRouting {
public:
    // From router logits [n, n_expert] (plus bias [n_expert] when not null: gpt-oss's router bias): each token's
    // n_used experts of the largest logits (a tie goes to the lower expert), weighted by the softmax over their logits
    // (the same as the softmax over all of them renormalized over the chosen), or without `renormalize` by their
    // shares of the softmax over all n_expert logits (qwen2moe).
    void route(const float* logits, int64_t n, int64_t n_expert, int64_t n_used, const float* bias = nullptr,
               bool renormalize = true);

    // DeepSeek-style routing (ModelConfig::moe_routing_general: sigmoid gating, a selection bias, expert groups, a
    // weights scale): each token's experts and weights by route_experts, with the layer's selection bias (nullptr:
    // none).
    void route_general(const float* logits, int64_t n, const ModelConfig& config, const float* bias);

    int64_t n_used() const { return n_used_; }
    // Expert e's assignments [begin(e), end(e)): indices into token() and weight().
    int64_t begin(int64_t e) const { return offsets_[static_cast<size_t>(e)]; }
    int64_t end(int64_t e) const { return offsets_[static_cast<size_t>(e) + 1]; }
    int64_t token(int64_t i) const { return tokens_[static_cast<size_t>(i)]; }
    float weight(int64_t i) const { return weights_[static_cast<size_t>(i)]; }
    // Token t's experts in increasing order [n_used] (the order its expert outputs are summed in).
    const int32_t* experts_of(int64_t t) const { return chosen_.data() + t * n_used_; }

private:
    // The assignments grouped by expert (offsets_, tokens_, weights_) from chosen_ and chosen_weight_ of n tokens;
    // offsets_ holds the count of expert e's assignments at e + 2.
    void group(int64_t n);
    int64_t n_used_ = 0;
    std::vector<int32_t> chosen_;       // [n, n_used] each token's experts, increasing
    std::vector<float> chosen_weight_;  // [n, n_used] their weights
    std::vector<int64_t> offsets_;      // [n_expert + 1]
    std::vector<int32_t> tokens_;       // [n * n_used] the token of each assignment, grouped by expert
    std::vector<float> weights_;        // [n * n_used] its weight
    std::vector<double> probs_;         // [n_expert] one token's logits
    std::vector<int32_t> order_;        // [n_expert] experts by decreasing logit
    std::vector<double> logits_, weight_, scratch_;  // route_general's: one token's logits and weights
};

// gate[i] = min(silu(gate[i]), limit) * clamp(up[i], -limit, limit) for i < n: step35's clamped SwiGLU (of its
// experts and of its dense FFNs and shared expert: ModelConfig::swiglu_clamp_exp, swiglu_clamp_shexp)
void swiglu_clamped(float* gate, const float* up, int64_t n, float limit);

}  // namespace quill::cpu
