// DeepSeek Sparse Attention's lightning indexer on the CPU backend (deepseek32: ModelConfig::dsa): which of its
// slot's positions each token's MLA attends to, the indexer's keys cached after the latent and the RoPE key in the
// same K row, as llama.cpp's lightning indexer computes them (its fused CPU op: per key a float sum over the heads of
// ReLU'd dot products times the pre-scaled weights).
#include "engine/cpu/cpu_backend.h"

#include "engine/cpu/kernels.h"
#include "engine/cpu/layer_norm.h"
#include "engine/error.h"
#include "engine/format/quant.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace quill::cpu {

namespace {

// x = H x for the orthonormal Walsh-Hadamard matrix H of d (a power of two) in Sylvester's order, H[i][j] =
// (-1)^popcount(i & j) / sqrt(d): butterflies, then the scale llama.cpp's matrix holds.
void hadamard(float* x, int64_t d) {
    for (int64_t len = 1; len < d; len *= 2)
        for (int64_t i = 0; i < d; i += 2 * len)
            for (int64_t j = i; j < i + len; ++j) {
                const float u = x[j], v = x[j + len];
                x[j] = u + v;
                x[j + len] = u - v;
            }
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<float>(d)));
    for (int64_t i = 0; i < d; ++i) x[i] *= scale;
}

}  // namespace

// The indexer's RoPE of each head's first n_rot dims of x [n_heads, head_dim] by token t's angles: NEOX pairs
// (i, i + n_rot / 2) whatever the model's own pairs (deepseek32), from the angle table rope_angles made (for adjacent
// pairs pair i's cosine at 2i and its sine at 2i + 1); glm-dsa's adjacent pairs as rope() turns them.
void CpuBackend::rope_indexer(float* x, int64_t n_heads, int64_t head_dim, int64_t t) const {
    const int64_t n_rot = config_.n_rot, half = n_rot / 2;
    if (!config_.indexer_neox) return rope(x, n_heads, head_dim, n_rot, t, false);
    const bool neox = config_.rope == ModelConfig::Rope::neox;
    const float* c = rope_cs_.data() + t * n_rot * 2;
    const float* s = c + n_rot;
    for (int64_t h = 0; h < n_heads; ++h) {
        float* lo = x + h * head_dim;
        float* hi = lo + half;
        for (int64_t i = 0; i < half; ++i) {
            const float ci = neox ? c[i] : c[2 * i], si = neox ? s[i] : s[2 * i + 1];
            const float x0 = lo[i], x1 = hi[i];
            lo[i] = x0 * ci - x1 * si;
            hi[i] = x0 * si + x1 * ci;
        }
    }
}

// For layer `layer` over the batch (qa: the normed low-rank queries [n, q_lora_rank]; xn_ the layer's normed input):
//   q_h = H RoPE(Wiq_b qa)_h, k = H RoPE(LayerNorm(Wik xn) * k_norm + k_norm_b), NEOX pairs of the first n_rot
//   dims of a head (glm-dsa: adjacent pairs), H the Walsh-Hadamard rotation; k stored after the latent and the RoPE
//   key of the K row
//   w_h = (Wproj xn)_h / sqrt(indexer_head_dim * indexer_n_head)
//   score_j = sum_h max(q_h . k_j, 0) w_h over the slot's positions j <= pos, in float (a chain over the head's
//   dims, then one over the heads), and token t keeps the indexer_top_k highest (of equal ones the earlier position):
//   dsa_sel_ [n, indexer_top_k] their positions in ascending order, dsa_n_sel_[t] their count (0: every position,
//   while pos < indexer_top_k).
void CpuBackend::dsa_select(const Batch& batch, const LayerWeights& L, int64_t layer, const float* qa) {
    const auto& c = config_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size()), nh = c.indexer_n_head, d = c.indexer_head_dim;
    const int64_t top_k = c.indexer_top_k;
    dsa_q_.resize(static_cast<size_t>(n * nh * d));
    dsa_k_.resize(static_cast<size_t>(n * d));
    dsa_w_.resize(static_cast<size_t>(n * nh));
    const MatmulJob qb[] = {{matrix(L.idx_wq_b), dsa_q_.data()}};
    mm(qb, qa, n, c.q_lora_rank, n_decode_);
    const MatmulJob kw[] = {{matrix(L.idx_wk), dsa_k_.data()}};
    mm(kw, xn_.data(), n, c.n_embd, n_decode_);
    const MatmulJob pw[] = {{matrix(L.idx_proj), dsa_w_.data()}};
    mm(pw, xn_.data(), n, c.n_embd, n_decode_);
    const auto row_elems = static_cast<int64_t>(kv_.shape().row_elems());
    const bool f16 = kv_.shape().type == KvType::f16;
    const auto w_scale = 1.0f / std::sqrt(static_cast<float>(d * nh));
    for (int64_t t = 0; t < n; ++t) {  // every token's key stored before any scores
        float* q = dsa_q_.data() + t * nh * d;
        rope_indexer(q, nh, d, t);
        for (int64_t h = 0; h < nh; ++h) hadamard(q + h * d, d);
        float* k = dsa_k_.data() + t * d;
        layer_norm(k, L.idx_k_norm.data(), k, 1, d, ModelConfig::kIndexerNormEps);
        for (int64_t i = 0; i < d; ++i) k[i] += L.idx_k_norm_b[i];
        rope_indexer(k, 1, d, t);
        hadamard(k, d);
        for (int64_t h = 0; h < nh; ++h) dsa_w_[t * nh + h] *= w_scale;
        const BatchToken& bt = batch.tokens[static_cast<size_t>(t)];
        uint8_t* kc = kv_.k(layer, bt.slot);
        const int64_t row = kv_.row(layer, bt.pos);
        for (int64_t i = 0; i < d; ++i) {
            const size_t off = k_cache_offset(row, c.mla_row() + i, row_elems);
            if (f16)
                reinterpret_cast<uint16_t*>(kc)[off] = fp32_to_fp16(k[i]);
            else
                reinterpret_cast<float*>(kc)[off] = k[i];
        }
    }
    dsa_sel_.resize(static_cast<size_t>(n * top_k));
    dsa_n_sel_.assign(static_cast<size_t>(n), 0);
    const int64_t ctx = kv_.shape().n_ctx;
    const int64_t per_thread = d + ctx;
    dsa_scratch_.resize(static_cast<size_t>(pool_.size() * per_thread));
    pool_.run([&](int ith, int nth) {
        float* kj = dsa_scratch_.data() + ith * per_thread;  // [d] key j in float
        float* score = kj + d;                                // [ctx]
        std::vector<int32_t> order;                           // [n_kv] the positions in the scores' order
        const Range tokens = split_range(n, ith, nth, 1);
        for (int64_t t = tokens.begin; t < tokens.end; ++t) {
            const BatchToken& bt = batch.tokens[static_cast<size_t>(t)];
            const int64_t n_kv = bt.pos + 1;
            if (n_kv <= top_k) continue;
            const uint8_t* kc = kv_.k(layer, bt.slot);
            const float* q = dsa_q_.data() + t * nh * d;
            const float* w = dsa_w_.data() + t * nh;
            for (int64_t j = 0; j < n_kv; ++j) {
                for (int64_t i = 0; i < d; ++i) {
                    const size_t off = k_cache_offset(kv_.row(layer, j), c.mla_row() + i, row_elems);
                    kj[i] = f16 ? fp16_to_fp32(reinterpret_cast<const uint16_t*>(kc)[off])
                                : reinterpret_cast<const float*>(kc)[off];
                }
                float s = 0.0f;
                for (int64_t h = 0; h < nh; ++h) {
                    float qk = 0.0f;
                    for (int64_t i = 0; i < d; ++i) qk += q[h * d + i] * kj[i];
                    s += std::max(qk, 0.0f) * w[h];
                }
                score[j] = s;
            }
            order.resize(static_cast<size_t>(n_kv));
            std::iota(order.begin(), order.end(), 0);
            std::nth_element(order.begin(), order.begin() + top_k - 1, order.end(), [&](int32_t a, int32_t b) {
                return score[a] > score[b] || (score[a] == score[b] && a < b);
            });
            std::sort(order.begin(), order.begin() + top_k);
            std::copy_n(order.begin(), top_k, dsa_sel_.data() + t * top_k);
            dsa_n_sel_[static_cast<size_t>(t)] = top_k;
        }
    });
}

// s [n_kv] = -inf at the positions token t's MLA does not attend to (dsa_select's choice; none without one).
void CpuBackend::dsa_mask(int64_t t, float* s, int64_t n_kv) const {
    if (!config_.dsa() || dsa_n_sel_[static_cast<size_t>(t)] == 0) return;
    const int64_t m = dsa_n_sel_[static_cast<size_t>(t)];
    const int32_t* sel = dsa_sel_.data() + t * config_.indexer_top_k;
    int64_t i = 0;
    for (int64_t j = 0; j < n_kv; ++j) {
        if (i < m && sel[i] == j)
            ++i;
        else
            s[j] = -INFINITY;
    }
}

}  // namespace quill::cpu
