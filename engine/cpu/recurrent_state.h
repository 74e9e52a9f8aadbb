// The recurrent state of a hybrid model's recurrent layers (qwen35's gated delta nets, lfm2's short convs) for the
// CPU backend: per layer and slot the conv's window of recent inputs and the delta net's state matrix (none for a
// short conv), beside the KV cache that its attention layers keep, and the position each slot's state stands at.
#pragma once

#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"

#include <cstdint>
#include <vector>

namespace quill::cpu {

class RecurrentState {
public:
    RecurrentState() = default;
    // States for the recurrent layers among `layers` of the model, n_slots each, zero (none without such layers).
    RecurrentState(const ModelConfig& config, LayerRange layers, int64_t n_slots);

    // Layer `layer`'s (a recurrent one among those held) state of slot `slot`.
    float* conv(int64_t layer, int64_t slot);  // [ssm_conv_channels, ssm_conv - 1] each channel's last inputs
    float* ssm(int64_t layer, int64_t slot);   // [ssm_n_v_heads, ssm_head_v, ssm_head_k] S of each value head
    int64_t conv_floats() const { return conv_n_; }
    int64_t ssm_floats() const { return ssm_n_; }
    // Checks that each token of the batch continues its slot's state and moves each slot's position past its last
    // token (advance_recurrent_positions). (The layers zero a slot's state at its position 0.)
    void advance(const Batch& batch);
    size_t bytes() const { return (conv_.size() + ssm_.size()) * sizeof(float); }

private:
    int64_t n_slots_ = 0, conv_n_ = 0, ssm_n_ = 0;
    std::vector<int64_t> index_;  // [n_layer] a held recurrent layer's index among them, else -1
    std::vector<float> conv_;     // [recurrent layers, n_slots, conv_n_]
    std::vector<float> ssm_;      // [recurrent layers, n_slots, ssm_n_]
    std::vector<int64_t> pos_;    // [n_slots] one past each slot's last position
};

}  // namespace quill::cpu
