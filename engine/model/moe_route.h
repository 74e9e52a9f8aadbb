// DeepSeek-style choice of a token's experts (ModelConfig::moe_routing_general: glm4moe, lfm2moe, deepseek2), as
// llama.cpp's build_moe_ffn makes it: the one rule both backends route by.
#pragma once

#include "engine/model/model_config.h"

#include <cstdint>
#include <vector>

namespace quill {

// From a token's router logits [n_expert] and the layer's selection bias (nullptr: none) [n_expert]: its
// n_expert_used experts in increasing order into chosen, and their weights into weight.
//   p_e = sigmoid(l_e) (moe_gating_sigmoid), else softmax_e(l);  s_e = p_e + bias_e (llama4's moe_weight_input: l_e)
//   with moe_n_group > 1 groups (equal runs of experts): only the experts of the moe_n_group_used groups whose two
//   largest s sum highest stay candidates
//   chosen: the n_expert_used candidates of the largest s (a tie goes to the lower expert)
//   weight_e = p_e (/ max(sum of the chosen p, 2^-14) when moe_norm_weights) * moe_weights_scale
// scratch: reused between calls.
void route_experts(const ModelConfig& c, const double* logits, const float* bias, int32_t* chosen, double* weight,
                   std::vector<double>& scratch);

}  // namespace quill
