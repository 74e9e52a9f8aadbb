#include "engine/cpu/recurrent_state.h"

#include "engine/error.h"

namespace quill::cpu {

RecurrentState::RecurrentState(const ModelConfig& c, LayerRange layers, int64_t n_slots)
    : n_slots_(n_slots),
      conv_n_(c.ssm_conv_channels() * (c.ssm_conv - 1)),
      ssm_n_(c.ssm_n_v_heads * c.ssm_head_v * c.ssm_head_k),
      index_(static_cast<size_t>(c.n_layer), -1),
      pos_(static_cast<size_t>(n_slots), 0) {
    int64_t n = 0;
    for (int64_t l = layers.begin; l < layers.end; ++l)
        if (c.layer_is_recurrent(l)) index_[static_cast<size_t>(l)] = n++;
    conv_.assign(static_cast<size_t>(n * n_slots * conv_n_), 0.0f);
    ssm_.assign(static_cast<size_t>(n * n_slots * ssm_n_), 0.0f);
}

float* RecurrentState::conv(int64_t layer, int64_t slot) {
    const int64_t i = index_.at(static_cast<size_t>(layer));
    QUILL_CHECK(i >= 0 && slot >= 0 && slot < n_slots_, "recurrent state of layer {}, slot {}", layer, slot);
    return conv_.data() + (i * n_slots_ + slot) * conv_n_;
}

float* RecurrentState::ssm(int64_t layer, int64_t slot) {
    const int64_t i = index_.at(static_cast<size_t>(layer));
    QUILL_CHECK(i >= 0 && slot >= 0 && slot < n_slots_, "recurrent state of layer {}, slot {}", layer, slot);
    return ssm_.data() + (i * n_slots_ + slot) * ssm_n_;
}

void RecurrentState::advance(const Batch& batch) { advance_recurrent_positions(batch, pos_); }

}  // namespace quill::cpu
