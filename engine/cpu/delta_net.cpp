// The CPU backend's gated delta net (qwen35's recurrent layers): the block that stands where attention_block stands.
#include "engine/cpu/cpu_backend.h"

#include "engine/cpu/kernels.h"
#include "engine/model/delta_net_layout.h"

#include <algorithm>
#include <cmath>

namespace quill::cpu {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

// proj = W_out (rms_norm(o_h) * ssm_norm * silu(z_h) for each value head h), z = W_z xn, with xn = rms_norm(x) *
// attn_norm and o the delta net's output over the conv of W_in xn, each sequence's tokens in position order from
// its state (ReferenceBackend::delta_net_token has the math). Every step is a token's own, in the same order
// whatever its batch: the conv by channel, the norms of q and k by token, the recurrence by value head.
void CpuBackend::delta_net_block(const Batch& batch, const LayerWeights& L, int64_t layer) {
    const auto& c = config_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t nch = c.ssm_conv_channels(), taps = c.ssm_conv, hk = c.ssm_head_k, hv = c.ssm_head_v;
    const int64_t n_v = c.ssm_n_v_heads, inner = c.ssm_d_inner(), nk = c.ssm_n_k_heads * hk;
    ssm_qkv_.resize(n * nch);
    ssm_conv_.resize(n * nch);
    ssm_z_.resize(n * inner);
    ssm_beta_.resize(n * n_v);
    ssm_alpha_.resize(n * n_v);
    ssm_o_.resize(n * inner);
    // (qwen3next: q, k, v and z in one product where its older files have them so, beta and alpha in one; each
    // grouped by key head, put in order below)
    const bool fused_qkvz = !L.ssm_z.data, fused_ba = !L.ssm_alpha.data;
    const int64_t group = n_v / c.ssm_n_k_heads;
    if (fused_qkvz) ssm_qkvz_.resize(n * (nch + inner));
    if (fused_ba) ssm_ba_.resize(n * 2 * n_v);
    MatmulJob in[4] = {{matrix(L.ssm_in), fused_qkvz ? ssm_qkvz_.data() : ssm_qkv_.data()}};
    size_t n_in = 1;
    if (!fused_qkvz) in[n_in++] = {matrix(L.ssm_z), ssm_z_.data()};
    in[n_in++] = {matrix(L.ssm_beta), fused_ba ? ssm_ba_.data() : ssm_beta_.data()};
    if (!fused_ba) in[n_in++] = {matrix(L.ssm_alpha), ssm_alpha_.data()};
    const bool ready = layer == layers_.begin
                           ? norm(x_.data(), L.attn_norm.data(), xn_.data(), n, &in[0].w, n_decode_)
                           : residual_norm(layer - 1, L.attn_norm.data(), &in[0].w, n, out_scale(layer - 1));
    mm(std::span<const MatmulJob>(in, n_in), xn_.data(), n, c.n_embd, n_decode_, ready);
    for (int64_t t = 0; t < n; ++t) {
        if (fused_qkvz)
            ungroup_qkvz(ssm_qkvz_.data() + t * (nch + inner), c.ssm_n_k_heads, hk, group * hv,
                         ssm_qkv_.data() + t * nch, ssm_z_.data() + t * inner);
        if (fused_ba)
            ungroup_ba(ssm_ba_.data() + t * 2 * n_v, c.ssm_n_k_heads, group, ssm_beta_.data() + t * n_v,
                       ssm_alpha_.data() + t * n_v);
    }

    // conv[t, ch] = silu(sum_i window[i] w[ch, i]) over the channel's last taps - 1 inputs of the token's sequence
    // and its own (the last tap's), the window then moved on by it; a sequence at position 0 starts from zeros
    causal_conv_silu(pool_, recurrent_, batch, layer, ssm_qkv_.data(), nch, L.ssm_conv1d.data(), nullptr, nch, taps,
                     ssm_conv_.data());
    // q and k of each key head divided by sqrt(sum x^2 + eps)
    pool_.run([&](int ith, int nth) {
        const Range r = split_range(n, ith, nth);
        for (int64_t t = r.begin; t < r.end; ++t)
            for (int64_t h = 0; h < 2 * c.ssm_n_k_heads; ++h) {
                float* x = ssm_conv_.data() + t * nch + h * hk;
                float ss = 0.0f;
                for (int64_t i = 0; i < hk; ++i) ss += x[i] * x[i];
                const float inv = 1.0f / std::sqrt(ss + c.rms_eps);
                for (int64_t i = 0; i < hk; ++i) x[i] *= inv;
            }
    });
    // value head h, key head ssm_k_head(h): S = S g; S += (beta (v - S k)) k^T; o = S q / sqrt(head_k), then
    // o = rms_norm(o) * ssm_norm * silu(z)
    const float scale = 1.0f / std::sqrt(static_cast<float>(hk));
    pool_.run([&](int ith, int nth) {
        const Range r = split_range(n_v, ith, nth);
        for (int64_t h = r.begin; h < r.end; ++h) {
            for (int64_t t = 0; t < n; ++t) {
                const BatchToken& bt = batch.tokens[static_cast<size_t>(t)];
                float* S = recurrent_.ssm(layer, bt.slot) + h * hv * hk;  // [hv, hk]
                if (bt.pos == 0) std::fill_n(S, hv * hk, 0.0f);
                const float* q = ssm_conv_.data() + t * nch + c.ssm_k_head(h) * hk;
                const float* k = q + nk;
                const float* v = ssm_conv_.data() + t * nch + 2 * nk + h * hv;
                const float a = ssm_alpha_[t * n_v + h] + L.ssm_dt[h];
                const float g = std::exp((a > 20.0f ? a : std::log1p(std::exp(a))) * L.ssm_a[h]);
                const float beta = 1.0f / (1.0f + std::exp(-ssm_beta_[t * n_v + h]));
                float* o = ssm_o_.data() + t * inner + h * hv;
                for (int64_t j = 0; j < hv; ++j) {
                    float* Sj = S + j * hk;
                    float kv = 0.0f;
                    for (int64_t i = 0; i < hk; ++i) {
                        Sj[i] *= g;
                        kv += Sj[i] * k[i];
                    }
                    const float d = (v[j] - kv) * beta;
                    float oj = 0.0f;
                    for (int64_t i = 0; i < hk; ++i) {
                        Sj[i] += k[i] * d;
                        oj += Sj[i] * q[i];
                    }
                    o[j] = oj * scale;
                }
                kv_ops_.rms_norm(o, L.ssm_norm.data(), o, 1, hv, c.rms_eps);
                const float* z = ssm_z_.data() + t * inner + h * hv;
                for (int64_t j = 0; j < hv; ++j) o[j] *= silu(z[j]);
            }
        }
    });
    const MatmulJob out[] = {{matrix(L.ssm_out), proj_.data()}};
    mm(out, ssm_o_.data(), n, inner, n_decode_);
}

}  // namespace quill::cpu
