// The recurrent state of a hybrid model's linear-attention layers (qwen35's gated delta nets, granitehybrid's Mamba-2
// layers in the same sizes: ModelConfig::mamba2) for the CPU backend: per layer and slot the conv's window of recent
// inputs and the state matrices, beside the KV cache that its attention layers keep, and the position each slot's
// state stands at.
#pragma once

#include "engine/cpu/thread_pool.h"
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

// The causal conv of a recurrent layer (qwen35's delta nets, granitehybrid's Mamba-2) over the batch, by channel on
// the pool, each sequence's tokens in position order: out[t, ch] = silu(sum_i window[i] w[ch, i] + x[t, ch]
// w[ch, taps - 1] + bias[ch]) over the channel's last taps - 1 inputs of the token's sequence (zeros at position 0)
// and its own, the window then moved on by it. x [n_tokens, x_stride] (the first nch of a row), w [nch, taps],
// bias [nch] or nullptr, out [n_tokens, nch].
void causal_conv_silu(ThreadPool& pool, RecurrentState& state, const Batch& batch, int64_t layer, const float* x,
                      int64_t x_stride, const float* w, const float* bias, int64_t nch, int64_t taps, float* out);

}  // namespace quill::cpu
