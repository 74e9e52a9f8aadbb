// deepseek2's Multi-head Latent Attention on the CPU backend (ModelConfig::kv_lora_rank): the latent and the RoPE key
// cached per position, Wk_b absorbed into each head's query and Wv_b into its output, as llama.cpp's MLA runs it.
#include "engine/cpu/cpu_backend.h"

#include "engine/cpu/kernels.h"
#include "engine/error.h"
#include "engine/format/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace quill::cpu {

// proj = Wo [Wv_b[h] o_h for each head h], o_h = sum_j softmax_j(score_hj) c_j over the slot's positions j, with
//   q = Wq xn, or Wq_b (rms_norm(Wq_a xn) * q_a_norm) (per head: q_nope_h, then q_pe_h)
//   [c, k_pe] = Wkv_a xn, c = rms_norm(c) * kv_a_norm; q_pe_h, k_pe rotated; cache[pos] = [c, k_pe]
//   score_hj = ((Wk_b[h] q_nope_h) . c_j + q_pe_h . k_pe_j) * attn_temp(pos) * attn_scale
// and xn = rms_norm(x) * attn_norm, x the residual stream with the block before's proj added (residual_norm).
void CpuBackend::mla_block(const Batch& batch, const LayerWeights& L, int64_t layer) {
    const auto& c = config_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t hd = c.head_dim, nope = c.mla_nope(), n_rot = c.n_rot, r = c.kv_lora_rank, row = c.mla_row();
    const int64_t nh = c.n_head, hv = c.head_dim_v;
    mla_q_.resize(static_cast<size_t>(n * nh * hd));
    mla_kv_.resize(static_cast<size_t>(n * row));
    const bool low_rank = L.wq_a.data != nullptr;
    if (low_rank) mla_qa_.resize(static_cast<size_t>(n * c.q_lora_rank));
    const MatmulJob in[] = {{matrix(low_rank ? L.wq_a : L.wq), low_rank ? mla_qa_.data() : mla_q_.data()},
                            {matrix(L.wkv_a), mla_kv_.data()}};
    const bool ready = layer == layers_.begin
                           ? norm(x_.data(), L.attn_norm.data(), xn_.data(), n, &in[0].w, n_decode_)
                           : residual_norm(layer - 1, L.attn_norm.data(), &in[0].w, n, out_scale(layer - 1));
    mm(in, xn_.data(), n, c.n_embd, n_decode_, ready);
    if (low_rank) {
        kv_ops_.rms_norm(mla_qa_.data(), L.attn_q_a_norm.data(), mla_qa_.data(), n, c.q_lora_rank, c.rms_eps);
        const MatmulJob qb[] = {{matrix(L.wq_b), mla_q_.data()}};
        mm(qb, mla_qa_.data(), n, c.q_lora_rank, n_decode_);
        // (deepseek32: the positions each token attends to; glm-dsa's layers without an indexer keep the last one's)
        if (c.dsa() && c.layer_indexer(layer)) dsa_select(batch, L, layer, mla_qa_.data());
    }
    // The latent normed, q_pe and k_pe rotated, [c, k_pe] stored: every token's before any attends.
    const auto row_elems = static_cast<int64_t>(kv_.shape().row_elems());
    const bool f16 = kv_.shape().type == KvType::f16;
    for (int64_t t = 0; t < n; ++t) {
        float* kv = mla_kv_.data() + t * row;
        kv_ops_.rms_norm(kv, L.attn_kv_a_norm.data(), kv, 1, r, c.rms_eps);
        rope(kv + r, 1, n_rot, n_rot, t, false);
        rope(mla_q_.data() + t * nh * hd + nope, nh, hd, n_rot, t, false);
        const BatchToken& bt = batch.tokens[t];
        uint8_t* k = kv_.k(layer, bt.slot);
        const size_t k0 = k_cache_offset(kv_.row(layer, bt.pos), 0, row_elems);
        if (f16) {
            auto* kh = reinterpret_cast<uint16_t*>(k) + k0;
            uint16_t h16[64];
            for (int64_t e0 = 0; e0 < row; e0 += 64) {
                const int64_t m = std::min<int64_t>(64, row - e0);
                kv_ops_.to_f16(kv + e0, h16, static_cast<int>(m));
                for (int64_t e = 0; e < m; ++e) kh[8 * (e0 + e)] = h16[e];
            }
        } else {
            auto* kf = reinterpret_cast<float*>(k) + k0;
            for (int64_t e = 0; e < row; ++e) kf[8 * e] = kv[e];
        }
    }
    // qabs[t, h] = [Wk_b[h] q_nope_h, q_pe_h] * temp(pos_t), a head's product over the batch's rows at once (temp:
    // Mistral Large 3's Llama 4 attention temperature, ModelConfig::attn_temp; 1 without)
    mla_qabs_.resize(static_cast<size_t>(n * nh * row));
    mla_in_.resize(static_cast<size_t>(n * std::max(hd, r)));
    mla_out_.resize(static_cast<size_t>(n * std::max(r, hv)));
    for (int64_t h = 0; h < nh; ++h) {
        for (int64_t t = 0; t < n; ++t) std::copy_n(mla_q_.data() + (t * nh + h) * hd, nope, mla_in_.data() + t * nope);
        const MatmulJob kb[] = {{matrix(L.wk_b_heads[static_cast<size_t>(h)]), mla_out_.data()}};
        mm(kb, mla_in_.data(), n, nope, n_decode_);
        for (int64_t t = 0; t < n; ++t) {
            float* q = mla_qabs_.data() + (t * nh + h) * row;
            std::copy_n(mla_out_.data() + t * r, r, q);
            std::copy_n(mla_q_.data() + (t * nh + h) * hd + nope, n_rot, q + r);
            if (c.attn_temp_scale != 0.0f) {
                const auto temp = static_cast<float>(c.attn_temp(batch.tokens[static_cast<size_t>(t)].pos));
                for (int64_t e = 0; e < row; ++e) q[e] *= temp;
            }
        }
    }
    mla_lat_.resize(static_cast<size_t>(n * nh * r));
    mla_attend(batch, layer, mla_qabs_.data(), mla_lat_.data());
    // att[t, h] = Wv_b[h] lat[t, h]; proj = Wo att
    att_.resize(std::max(att_.size(), static_cast<size_t>(n * nh * hv)));
    for (int64_t h = 0; h < nh; ++h) {
        for (int64_t t = 0; t < n; ++t) std::copy_n(mla_lat_.data() + (t * nh + h) * r, r, mla_in_.data() + t * r);
        const MatmulJob vb[] = {{matrix(L.wv_b_heads[static_cast<size_t>(h)]), mla_out_.data()}};
        mm(vb, mla_in_.data(), n, r, n_decode_);
        for (int64_t t = 0; t < n; ++t) std::copy_n(mla_out_.data() + t * hv, hv, att_.data() + (t * nh + h) * hv);
    }
    const MatmulJob o[] = {{matrix(L.wo), proj_.data()}};
    mm(o, att_.data(), n, nh * hv, n_decode_);
}

// For each (token t, head h), over t's slot's positions j <= pos (K's layout: eight positions innermost, each row
// [c, k_pe] of kv_lora_rank + n_rot, then deepseek32's indexer key): s_j = q . row_j * attn_scale, p = softmax(s)
// (deepseek32: over the positions dsa_select kept), lat = sum_j p_j c_j. In float,
// each row alone in the same order whatever the batch (scores: a chain over the row's elements a position; lat: a
// chain over the positions in order an element); with an F16 cache the query and the probabilities rounded to fp16
// first, as the reference backend does. The work goes in units of a tile's heads: a tile is a run of up to eight
// tokens of one slot (a prompt's chunk; a decode step is a tile of one), its heads all of them or a share of them
// where the tiles are fewer than the threads. Each key block is converted to float once a pass for the unit's rows.
void CpuBackend::mla_attend(const Batch& batch, int64_t layer, const float* q, float* lat) {
    const auto& c = config_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size()), nh = c.n_head, r = c.kv_lora_rank;
    const int64_t row = c.mla_row(), row_elems = static_cast<int64_t>(kv_.shape().row_elems());
    const bool f16 = kv_.shape().type == KvType::f16;
    const int64_t ctx8 = (kv_.shape().n_ctx + 7) / 8 * 8;
    // Tokens a tile: up to 8, fewer where a thread's scores would pass 2^22 floats (16 MiB) at the longest contexts
    const int64_t tile_max = std::clamp<int64_t>((int64_t{1} << 22) / (nh * ctx8), 1, 8);
    std::vector<int64_t> tiles{0};  // [n_tiles + 1] the tiles' first tokens, then n
    for (int64_t t = 1; t < n; ++t)
        if (batch.tokens[t].slot != batch.tokens[t - 1].slot || t - tiles.back() == tile_max) tiles.push_back(t);
    tiles.push_back(n);
    const int64_t n_tiles = static_cast<int64_t>(tiles.size()) - 1;
    const int64_t parts = std::min<int64_t>(nh, std::max<int64_t>(1, (pool_.size() + n_tiles - 1) / n_tiles));
    const int64_t hc = (nh + parts - 1) / parts;  // heads a unit
    const int64_t rows_max = tile_max * hc;
    const int64_t per_thread = 8 * row + 8 * r + rows_max * (ctx8 + row);
    mla_scores_.resize(static_cast<size_t>(pool_.size() * per_thread));
    const auto scale = static_cast<float>(c.attn_scale);
    pool_.run([&](int ith, int nth) {
        float* blk = mla_scores_.data() + ith * per_thread;  // [row, 8] a key block in float, the cache's layout
        float* lt = blk + 8 * row;                           // [8, r] its latents, a position's contiguous
        float* qs = lt + 8 * r;                              // [rows, row] the unit's queries
        float* ss = qs + rows_max * row;                     // [rows, ctx8] their scores, then probabilities
        const Range units = split_range(n_tiles * parts, ith, nth, 1);
        for (int64_t u = units.begin; u < units.end; ++u) {
            const int64_t tile = u / parts, h0 = (u % parts) * hc, h1 = std::min(nh, h0 + hc);
            if (h0 >= h1) continue;
            const int64_t t0 = tiles[static_cast<size_t>(tile)], t1 = tiles[static_cast<size_t>(tile) + 1];
            const int64_t nhu = h1 - h0;
            const uint8_t* k = kv_.k(layer, batch.tokens[static_cast<size_t>(t0)].slot);
            auto pos = [&](int64_t t) { return batch.tokens[static_cast<size_t>(t)].pos; };
            int64_t blocks = 0;  // the tile's key blocks: its last position's
            for (int64_t t = t0; t < t1; ++t) blocks = std::max<int64_t>(blocks, (pos(t) + 8) / 8);
            auto load = [&](int64_t b) {  // blk = key block b in float (its first `row` of the row's elements)
                const size_t off = static_cast<size_t>(b * row_elems * 8);
                if (f16) {
                    const uint16_t* h = reinterpret_cast<const uint16_t*>(k) + off;
                    for (int64_t i = 0; i < 8 * row; ++i) blk[i] = fp16_to_fp32(h[i]);
                } else {
                    std::memcpy(blk, reinterpret_cast<const float*>(k) + off, static_cast<size_t>(8 * row) * 4);
                }
            };
            for (int64_t t = t0; t < t1; ++t)
                for (int64_t h = h0; h < h1; ++h) {
                    float* qr = qs + ((t - t0) * nhu + h - h0) * row;
                    std::copy_n(q + (t * nh + h) * row, row, qr);
                    if (f16) kv_ops_.round_f16(qr, static_cast<int>(row));
                }
            for (int64_t b = 0; b < blocks; ++b) {
                load(b);
                for (int64_t t = t0; t < t1; ++t) {
                    if (8 * b > pos(t)) continue;
                    for (int64_t x = (t - t0) * nhu; x < (t - t0 + 1) * nhu; ++x) {
                        const float* qr = qs + x * row;
                        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                        for (int64_t e = 0; e < row; ++e)
                            for (int i = 0; i < 8; ++i) acc[i] += qr[e] * blk[e * 8 + i];
                        float* s = ss + x * ctx8;
                        for (int i = 0; i < 8; ++i) s[b * 8 + i] = acc[i] * scale;
                    }
                }
            }
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t n_kv = pos(t) + 1, end = (n_kv + 7) / 8 * 8;
                for (int64_t h = h0; h < h1; ++h) {
                    float* s = ss + ((t - t0) * nhu + h - h0) * ctx8;
                    dsa_mask(t, s, n_kv);  // (deepseek32: the positions it does not attend to at -inf)
                    float m = -INFINITY;
                    for (int64_t j = 0; j < n_kv; ++j) m = std::max(m, s[j]);
                    double sum = 0.0;
                    for (int64_t j = 0; j < n_kv; ++j) sum += s[j] = std::exp(s[j] - m);
                    const auto inv = static_cast<float>(1.0 / sum);
                    for (int64_t j = 0; j < n_kv; ++j) s[j] *= inv;
                    if (f16) kv_ops_.round_f16(s, static_cast<int>(n_kv));
                    for (int64_t j = n_kv; j < end; ++j) s[j] = 0.0f;  // (the last block's positions past pos)
                    std::fill_n(lat + (t * nh + h) * r, r, 0.0f);
                }
            }
            for (int64_t b = 0; b < blocks; ++b) {
                load(b);
                for (int64_t e = 0; e < r; ++e)
                    for (int i = 0; i < 8; ++i) lt[i * r + e] = blk[e * 8 + i];
                for (int64_t t = t0; t < t1; ++t) {
                    if (8 * b > pos(t)) continue;
                    for (int64_t h = h0; h < h1; ++h) {
                        const float* p = ss + ((t - t0) * nhu + h - h0) * ctx8 + b * 8;
                        float* o = lat + (t * nh + h) * r;
                        for (int i = 0; i < 8; ++i) {
                            const float pi = p[i], *li = lt + i * r;
                            for (int64_t e = 0; e < r; ++e) o[e] += pi * li[e];
                        }
                    }
                }
            }
        }
    });
}

}  // namespace quill::cpu
