#include "engine/cpu/recurrent_state.h"

#include "engine/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace quill::cpu {

size_t recurrent_layer_bytes(const ModelConfig& c, int64_t n_slots, int64_t n_snapshots, int64_t layer) {
    if (!c.layer_is_recurrent(layer)) return 0;
    const int64_t floats = c.ssm_conv_channels() * (c.ssm_conv - 1) + c.ssm_n_v_heads * c.ssm_head_v * c.ssm_head_k;
    return static_cast<size_t>(floats * std::max<int64_t>(1, n_slots) * (1 + n_snapshots)) * sizeof(float);
}

size_t recurrent_state_bytes(const ModelConfig& c, int64_t n_slots, int64_t n_snapshots) {
    size_t bytes = 0;
    for (int64_t l = 0; l < c.n_layer; ++l) bytes += recurrent_layer_bytes(c, n_slots, n_snapshots, l);
    return bytes;
}

RecurrentState::RecurrentState(const ModelConfig& c, LayerRange layers, int64_t n_slots, int64_t n_snapshots)
    : n_slots_(n_slots),
      n_snap_(n_snapshots),
      conv_n_(c.ssm_conv_channels() * (c.ssm_conv - 1)),
      ssm_n_(c.ssm_n_v_heads * c.ssm_head_v * c.ssm_head_k),
      index_(static_cast<size_t>(c.n_layer), -1),
      pos_(static_cast<size_t>(n_slots), 0),
      kept_pos_(static_cast<size_t>(n_slots * n_snapshots), -1),
      want_(static_cast<size_t>(n_slots)) {
    for (int64_t l = layers.begin; l < layers.end; ++l)
        if (c.layer_is_recurrent(l)) index_[static_cast<size_t>(l)] = n_held_++;
    conv_.assign(static_cast<size_t>((1 + n_snap_) * n_held_ * n_slots * conv_n_), 0.0f);
    ssm_.assign(static_cast<size_t>((1 + n_snap_) * n_held_ * n_slots * ssm_n_), 0.0f);
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

void RecurrentState::copy_state(int32_t slot, int64_t kept, bool restore) {
    for (auto [data, n] : {std::pair{conv_.data(), conv_n_}, std::pair{ssm_.data(), ssm_n_}}) {
        if (n == 0) continue;  // (lfm2's short convs: no state matrix, and no buffer to copy)
        for (int64_t i = 0; i < n_held_; ++i) {
            float* live = data + (i * n_slots_ + slot) * n;
            float* copy = data + (((1 + kept) * n_held_ + i) * n_slots_ + slot) * n;
            std::memcpy(restore ? live : copy, restore ? copy : live, static_cast<size_t>(n) * sizeof(float));
        }
    }
}

int64_t RecurrentState::snapshot_at(int32_t slot, int64_t pos) const {
    for (int64_t k = 0; k < n_snap_; ++k)
        if (kept_pos_[static_cast<size_t>(slot * n_snap_ + k)] == pos) return k;
    return -1;
}

void RecurrentState::advance(const Batch& batch) {
    // Where each slot's sequence continues: where its state stands, or a snapshot's position (restored below once
    // the whole batch is known to be valid, so that a refused batch changes nothing)
    std::vector<int64_t> from = pos_;
    std::vector<int64_t> restore(static_cast<size_t>(n_slots_), -1);  // [n_slots] the snapshot to restore
    std::vector<bool> seen(static_cast<size_t>(n_slots_), false);
    for (const BatchToken& t : batch.tokens) {
        const auto s = static_cast<size_t>(t.slot);
        if (s >= seen.size() || seen[s]) continue;
        seen[s] = true;
        if (t.pos == 0 || t.pos == pos_[s]) continue;
        if (const int64_t k = snapshot_at(t.slot, t.pos); k >= 0) from[s] = t.pos, restore[s] = k;
    }
    std::vector<int64_t> next = from;
    advance_recurrent_positions(batch, next);
    for (int32_t s = 0; s < n_slots_; ++s)
        if (restore[static_cast<size_t>(s)] >= 0) copy_state(s, restore[static_cast<size_t>(s)], true);
    pos_ = std::move(next);
    // A token at position p changes every state past p: the slot's snapshots there are gone
    for (const BatchToken& t : batch.tokens) {
        for (int64_t k = 0; k < n_snap_; ++k) {
            int64_t& at = kept_pos_[static_cast<size_t>(t.slot * n_snap_ + k)];
            if (at > t.pos) at = -1;
        }
    }
}

bool RecurrentState::wanted(int32_t slot, int64_t pos) const {
    const auto& w = want_[static_cast<size_t>(slot)];
    return std::find(w.begin(), w.end(), pos) != w.end();
}

void RecurrentState::take_wanted() {
    for (int32_t s = 0; s < n_slots_; ++s) {
        auto& w = want_[static_cast<size_t>(s)];
        const int64_t at = pos_[static_cast<size_t>(s)];
        if (std::find(w.begin(), w.end(), at) == w.end()) continue;
        std::erase(w, at);
        if (snapshot_at(s, at) >= 0) continue;
        // the place of the slot's lowest snapshot (an empty place first)
        int64_t k = 0;
        for (int64_t j = 1; j < n_snap_; ++j)
            if (kept_pos_[static_cast<size_t>(s * n_snap_ + j)] < kept_pos_[static_cast<size_t>(s * n_snap_ + k)])
                k = j;
        copy_state(s, k, false);
        kept_pos_[static_cast<size_t>(s * n_snap_ + k)] = at;
    }
}

void RecurrentState::keep_at(int32_t slot, int64_t pos) {
    QUILL_CHECK(slot >= 0 && slot < n_slots_, "snapshot of slot {} of {}", slot, n_slots_);
    if (n_snap_ == 0 || pos <= 0) return;
    auto& w = want_[static_cast<size_t>(slot)];
    if (std::find(w.begin(), w.end(), pos) == w.end()) w.push_back(pos);
    while (w.size() > static_cast<size_t>(n_snap_)) w.erase(w.begin());  // (the oldest asks go first)
    take_wanted();
}

int64_t RecurrentState::resume_position(int32_t slot, int64_t n) const {
    if (slot < 0 || slot >= n_slots_) return 0;
    int64_t best = pos_[static_cast<size_t>(slot)] <= n ? pos_[static_cast<size_t>(slot)] : 0;
    for (int64_t k = 0; k < n_snap_; ++k) {
        const int64_t at = kept_pos_[static_cast<size_t>(slot * n_snap_ + k)];
        if (at <= n) best = std::max(best, at);
    }
    return best;
}

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
