// Mixture-of-experts routing for the CPU backend: which experts each token of a batch uses, with what weights, and
// the batch's tokens grouped by expert so that each expert's weights are read once per step.
#pragma once

#include "engine/model/model_config.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace quill::cpu {

// How a layer's router logits become each token's experts and their weights (ModelConfig's moe_* fields).
struct MoeGating {
    const float* logit_bias = nullptr;      // [n_expert] added to the logits (gpt-oss's router bias), or nullptr
    const float* selection_bias = nullptr;  // [n_expert] added to the probabilities to choose (moe_selection_bias)
    bool sigmoid = false;                   // probabilities sigmoid(logit), not the softmax (moe_gating_sigmoid)
    bool normalize = true;                  // the chosen weights divided by their sum (moe_norm_weights)
    float scale = 1.0f;                     // then multiplied by this (moe_weights_scale)
};

// A batch's routing through one layer's experts. Everything a token gets depends on its router logits alone, and
// each expert's tokens keep the batch's order, so the leading decode steps stay first in every group.
class MoeRouting {
public:
    // From router logits [n, n_expert]: each token's n_used experts of the largest logits, or with a selection bias of
    // the largest probabilities plus it (a tie goes to the lower expert). Softmax gating weights them by the softmax
    // over their logits (the same as the softmax over all of them renormalized over the chosen), or without
    // `normalize` by their shares of the softmax over all n_expert logits; sigmoid gating by sigmoid(logit), divided
    // by the chosen ones' sum (at least 2^-14) with `normalize`. Every weight is then multiplied by `scale`.
    void route(const float* logits, int64_t n, int64_t n_expert, int64_t n_used, const MoeGating& gating = {});

    // deepseek2's routing (ModelConfig::moe_routing_general): each token's experts and weights by route_experts,
    // with the layer's selection bias (nullptr: none).
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
    std::vector<double> probs_;         // [n_expert] one token's logits (sigmoid gating: its probabilities)
    std::vector<double> keys_;          // [n_expert] what chooses its experts: probs_ (+ the selection bias)
    std::vector<int32_t> order_;        // [n_expert] experts by decreasing logit
    std::vector<double> logits_, weight_, scratch_;  // route_general's: one token's logits and weights
};

}  // namespace quill::cpu
