#include "engine/cpu/recurrent_state.h"

#include "engine/error.h"

#include <algorithm>
#include <cmath>

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

void causal_conv_silu(ThreadPool& pool, RecurrentState& state, const Batch& batch, int64_t layer, const float* x,
                      int64_t x_stride, const float* w, const float* bias, int64_t nch, int64_t taps, float* out) {
    const auto n = static_cast<int64_t>(batch.tokens.size());
    pool.run([&](int ith, int nth) {
        const Range r = split_range(nch, ith, nth, 16);
        for (int64_t t = 0; t < n; ++t) {
            const BatchToken& bt = batch.tokens[static_cast<size_t>(t)];
            float* window = state.conv(layer, bt.slot);  // [nch, taps - 1]
            const float* xt = x + t * x_stride;
            for (int64_t ch = r.begin; ch < r.end; ++ch) {
                float* win = window + ch * (taps - 1);
                if (bt.pos == 0) std::fill_n(win, taps - 1, 0.0f);
                const float* tap = w + ch * taps;
                float s = 0.0f;
                for (int64_t i = 0; i < taps - 1; ++i) s += win[i] * tap[i];
                s += xt[ch] * tap[taps - 1];
                if (bias) s += bias[ch];
                out[t * nch + ch] = s / (1.0f + std::exp(-s));
                for (int64_t i = 0; i + 1 < taps - 1; ++i) win[i] = win[i + 1];
                if (taps > 1) win[taps - 2] = xt[ch];
            }
        }
    });
}

}  // namespace quill::cpu
