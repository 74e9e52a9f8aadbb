// The recurrent state of a hybrid model's recurrent layers (qwen35's gated delta nets, granitehybrid's Mamba-2 layers
// in the same sizes: ModelConfig::mamba2, lfm2's short convs) for the CPU backend: per layer and slot the conv's window
// of recent inputs and the state matrices (none for a short conv), beside the KV cache that its attending layers keep,
// the position each slot's state stands at, and a few copies of each slot's state taken at positions a caller asked
// for (snapshots), from which a sequence can continue again.
#pragma once

#include "engine/cpu/thread_pool.h"
#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"

#include <cstdint>
#include <vector>

namespace quill::cpu {

// The bytes of the recurrent state of n_slots slots, each with n_snapshots copies besides its own (0 for a layer
// that is not recurrent): of one layer, and of the whole model.
size_t recurrent_layer_bytes(const ModelConfig& config, int64_t n_slots, int64_t n_snapshots, int64_t layer);
size_t recurrent_state_bytes(const ModelConfig& config, int64_t n_slots, int64_t n_snapshots);

class RecurrentState {
public:
    RecurrentState() = default;
    // States for the recurrent layers among `layers` of the model, n_slots each and n_snapshots copies of each slot's,
    // zero (none without such layers).
    RecurrentState(const ModelConfig& config, LayerRange layers, int64_t n_slots, int64_t n_snapshots = 0);

    // Layer `layer`'s (a recurrent one among those held) state of slot `slot`.
    float* conv(int64_t layer, int64_t slot);  // [ssm_conv_channels, ssm_conv - 1] each channel's last inputs
    float* ssm(int64_t layer, int64_t slot);   // [ssm_n_v_heads, ssm_head_v, ssm_head_k] S of each value head
    int64_t conv_floats() const { return conv_n_; }
    int64_t ssm_floats() const { return ssm_n_; }
    // Checks that each token of the batch continues its slot's state (or a snapshot of it: then the slot's state is
    // that snapshot's) and moves each slot's position past its last token (advance_recurrent_positions); drops the
    // snapshots the batch's tokens overwrite (those past the position of a token of their slot). (The layers zero a
    // slot's state at its position 0.)
    void advance(const Batch& batch);
    // Whether the slot's state should be copied once it stands at pos (keep_at asked for it, not yet taken).
    bool wanted(int32_t slot, int64_t pos) const;
    // The slots' states that stand where keep_at asked become snapshots, in place of each slot's lowest one.
    void take_wanted();
    // Backend::keep_state and Backend::resume_position.
    void keep_at(int32_t slot, int64_t pos);
    int64_t resume_position(int32_t slot, int64_t n) const;
    int64_t n_snapshots() const { return n_snap_; }
    size_t bytes() const { return (conv_.size() + ssm_.size()) * sizeof(float); }

private:
    // Copies slot's live state (kept >= 0: into its snapshot `kept`) or back from snapshot `kept` (restore).
    void copy_state(int32_t slot, int64_t kept, bool restore);
    int64_t snapshot_at(int32_t slot, int64_t pos) const;  // the slot's snapshot standing at pos, else -1

    int64_t n_slots_ = 0, n_snap_ = 0, n_held_ = 0, conv_n_ = 0, ssm_n_ = 0;
    std::vector<int64_t> index_;  // [n_layer] a held recurrent layer's index among them, else -1
    // [1 + n_snap_, recurrent layers, n_slots, conv_n_ or ssm_n_]: the live states, then each snapshot place's
    std::vector<float> conv_;
    std::vector<float> ssm_;
    std::vector<int64_t> pos_;               // [n_slots] one past each slot's last position
    std::vector<int64_t> kept_pos_;          // [n_slots, n_snap_] where each snapshot stands, -1: none
    std::vector<std::vector<int64_t>> want_; // [n_slots] positions keep_at asked for, not yet reached
};

// The causal conv of a recurrent layer (qwen35's delta nets, granitehybrid's Mamba-2) over the batch, by channel on
// the pool, each sequence's tokens in position order: out[t, ch] = silu(sum_i window[i] w[ch, i] + x[t, ch]
// w[ch, taps - 1] + bias[ch]) over the channel's last taps - 1 inputs of the token's sequence (zeros at position 0)
// and its own, the window then moved on by it. x [n_tokens, x_stride] (the first nch of a row), w [nch, taps],
// bias [nch] or nullptr, out [n_tokens, nch].
void causal_conv_silu(ThreadPool& pool, RecurrentState& state, const Batch& batch, int64_t layer, const float* x,
                      int64_t x_stride, const float* w, const float* bias, int64_t nch, int64_t taps, float* out);

}  // namespace quill::cpu
