// The CPU backend's Mamba-1 layer (mamba's, falcon-mamba's recurrent layers): the block that stands where
// attention_block stands.
#include "engine/cpu/cpu_backend.h"

#include "engine/cpu/kernels.h"

#include <algorithm>
#include <cmath>

namespace quill::cpu {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

// proj = W_out (y * silu(z)) * residual_scale, with [x, z] = W_in xn, xn = rms_norm(x) * attn_norm, x = silu(conv(x)
// + bias) and y the selective scan of each channel over [dt, B, C] = W_x x (dt, B and C rms-normed where
// ModelConfig::ssm_dt_b_c_rms says), each sequence's tokens in position order from its state
// (ReferenceBackend::mamba1_token has the math). Every step is a token's own, in the same order whatever its batch:
// the conv and the scan by channel, the norms by token.
void CpuBackend::mamba1_block(const Batch& batch, const LayerWeights& L, int64_t layer) {
    const auto& c = config_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t inner = c.ssm_d_inner(), taps = c.ssm_conv, ds = c.ssm_head_k, rank = c.ssm_dt_rank;
    const int64_t n_dbc = rank + 2 * ds;  // dt, B, C
    ssm_qkv_.resize(n * 2 * inner);
    ssm_conv_.resize(n * inner);
    ssm_dbc_.resize(n * n_dbc);
    ssm_dt_in_.resize(n * rank);
    ssm_dt_.resize(n * inner);
    ssm_o_.resize(n * inner);
    const MatmulJob in[] = {{matrix(L.ssm_in), ssm_qkv_.data()}};
    const bool ready = layer == layers_.begin
                           ? norm(x_.data(), L.attn_norm.data(), xn_.data(), n, &in[0].w, n_decode_)
                           : residual_norm(layer - 1, L.attn_norm.data(), &in[0].w, n, out_scale(layer - 1));
    mm(in, xn_.data(), n, c.n_embd, n_decode_, ready);

    // x[t, ch] = silu(sum_i window[i] w[ch, i] + b[ch]) over the channel's last taps - 1 inputs of the token's
    // sequence and its own (the last tap's), the window then moved on by it; a sequence at position 0 starts from zeros
    causal_conv_silu(pool_, recurrent_, batch, layer, ssm_qkv_.data(), 2 * inner, L.ssm_conv1d.data(),
                     L.ssm_conv1d_b.empty() ? nullptr : L.ssm_conv1d_b.data(), inner, taps, ssm_conv_.data());
    // [dt, B, C] = W_x x; each rms-normed (times its weight where the layer has one) where the file says
    const MatmulJob dbc[] = {{matrix(L.ssm_x), ssm_dbc_.data()}};
    mm(dbc, ssm_conv_.data(), n, inner, n_decode_);
    if (c.ssm_dt_b_c_rms) {
        ones_.assign(static_cast<size_t>(std::max(rank, ds)), 1.0f);
        auto weight = [&](const std::vector<float>& w) { return w.empty() ? ones_.data() : w.data(); };
        pool_.run([&](int ith, int nth) {
            const Range r = split_range(n, ith, nth);
            for (int64_t t = r.begin; t < r.end; ++t) {
                float* row = ssm_dbc_.data() + t * n_dbc;
                kv_ops_.rms_norm(row, weight(L.ssm_dt_norm), row, 1, rank, c.rms_eps);
                kv_ops_.rms_norm(row + rank, weight(L.ssm_b_norm), row + rank, 1, ds, c.rms_eps);
                kv_ops_.rms_norm(row + rank + ds, weight(L.ssm_c_norm), row + rank + ds, 1, ds, c.rms_eps);
            }
        });
    }
    for (int64_t t = 0; t < n; ++t) std::copy_n(ssm_dbc_.data() + t * n_dbc, rank, ssm_dt_in_.data() + t * rank);
    // dt = W_dt dt (its bias added in the scan)
    const MatmulJob dt[] = {{matrix(L.ssm_dt_proj), ssm_dt_.data()}};
    mm(dt, ssm_dt_in_.data(), n, rank, n_decode_);
    // channel i: d = softplus(dt_i + dt_bias_i), S_i = S_i exp(d A_i) + d x_i B, y_i = (S_i . C + D_i x_i) silu(z_i)
    pool_.run([&](int ith, int nth) {
        const Range r = split_range(inner, ith, nth, 16);
        for (int64_t t = 0; t < n; ++t) {
            const BatchToken& bt = batch.tokens[static_cast<size_t>(t)];
            const float* B = ssm_dbc_.data() + t * n_dbc + rank;
            const float* C = B + ds;
            for (int64_t i = r.begin; i < r.end; ++i) {
                float* S = recurrent_.ssm(layer, bt.slot) + i * ds;  // [ds]
                if (bt.pos == 0) std::fill_n(S, ds, 0.0f);
                const float a = ssm_dt_[t * inner + i] + L.ssm_dt[i];
                const float d = a > 20.0f ? a : std::log1p(std::exp(a));
                const float x = ssm_conv_[t * inner + i], xd = x * d;
                const float* A = L.ssm_a.data() + i * ds;
                float sum = 0.0f;
                for (int64_t s = 0; s < ds; ++s) {
                    S[s] = S[s] * std::exp(d * A[s]) + B[s] * xd;
                    sum += S[s] * C[s];
                }
                ssm_o_[t * inner + i] = (sum + x * L.ssm_d[i]) * silu(ssm_qkv_[t * 2 * inner + inner + i]);
            }
        }
    });
    const MatmulJob out[] = {{matrix(L.ssm_out), proj_.data()}};
    mm(out, ssm_o_.data(), n, inner, n_decode_);
    scale_residual(n);
}

}  // namespace quill::cpu
