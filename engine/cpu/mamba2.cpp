// The CPU backend's Mamba-2 layer (granitehybrid's recurrent layers): the block that stands where attention_block
// stands (falcon-h1's: the block beside it).
#include "engine/cpu/cpu_backend.h"

#include "engine/cpu/kernels.h"

#include <algorithm>
#include <cmath>

namespace quill::cpu {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

// proj = W_out (rms_norm(y * silu(z)) of each group * ssm_norm) * residual_scale, with [z, xBC, dt] = W_in xn,
// xn = rms_norm(x) * attn_norm, and y the selective scan over silu(conv(xBC) + bias), each sequence's tokens in
// position order from its state (ReferenceBackend::mamba2_token has the math). Every step is a token's own, in the
// same order whatever its batch: the conv by channel, the scan by head, the norm by token. The norm where the layer
// has one (falcon-h1's files have none). falcon-h1 (ModelConfig::ssm_beside_attn): attention_block has just run on
// the same xn, and proj = its proj + the mixer's.
void CpuBackend::mamba2_block(const Batch& batch, const LayerWeights& L, int64_t layer) {
    const auto& c = config_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t nch = c.ssm_conv_channels(), taps = c.ssm_conv, ds = c.ssm_head_k, hd = c.ssm_head_v;
    const int64_t n_head = c.ssm_n_v_heads, n_group = c.ssm_n_k_heads, inner = c.ssm_d_inner();
    const int64_t n_in = 2 * inner + 2 * n_group * ds + n_head;  // z [inner], x B C [nch], dt [n_head]
    ssm_qkv_.resize(n * n_in);
    ssm_conv_.resize(n * nch);
    ssm_o_.resize(n * inner);
    const MatmulJob in[] = {{matrix(L.ssm_in), ssm_qkv_.data()}};
    const bool beside = c.ssm_beside_attn;
    if (beside) std::swap(proj_, attn_proj_);  // (the attention's output waits in attn_proj_; xn is ready)
    bool ready = false;
    if (!beside)
        ready = layer == layers_.begin
                    ? norm(x_.data(), L.attn_norm.data(), xn_.data(), n, &in[0].w, n_decode_)
                    : residual_norm(layer - 1, L.attn_norm.data(), &in[0].w, n, out_scale(layer - 1));
    mm(in, xn_.data(), n, c.n_embd, n_decode_, ready);

    // conv[t, ch] = silu(sum_i window[i] w[ch, i] + b[ch]) over the channel's last taps - 1 inputs of the token's
    // sequence and its own (the last tap's), the window then moved on by it; a sequence at position 0 starts from zeros
    causal_conv_silu(pool_, recurrent_, batch, layer, ssm_qkv_.data() + inner, n_in, L.ssm_conv1d.data(),
                     L.ssm_conv1d_b.empty() ? nullptr : L.ssm_conv1d_b.data(), nch, taps, ssm_conv_.data());
    // head h, group g = h / (heads / groups): d = softplus(dt + dt_bias), S = S exp(d a) + d x B^T,
    // y = S C + D x, then y *= silu(z)
    pool_.run([&](int ith, int nth) {
        const Range r = split_range(n_head, ith, nth);
        for (int64_t h = r.begin; h < r.end; ++h) {
            const int64_t g = h / (n_head / n_group);
            for (int64_t t = 0; t < n; ++t) {
                const BatchToken& bt = batch.tokens[static_cast<size_t>(t)];
                float* S = recurrent_.ssm(layer, bt.slot) + h * hd * ds;  // [hd, ds]
                if (bt.pos == 0) std::fill_n(S, hd * ds, 0.0f);
                const float* row = ssm_qkv_.data() + t * n_in;
                const float* x = ssm_conv_.data() + t * nch + h * hd;
                const float* B = ssm_conv_.data() + t * nch + inner + g * ds;
                const float* C = B + n_group * ds;
                const float a = row[inner + nch + h] + L.ssm_dt[h];
                const float d = a > 20.0f ? a : std::log(1.0f + std::exp(a));
                const float decay = std::exp(d * L.ssm_a[h]);
                const float* z = row + h * hd;
                float* y = ssm_o_.data() + t * inner + h * hd;
                for (int64_t j = 0; j < hd; ++j) {
                    float* Sj = S + j * ds;
                    const float xd = x[j] * d;
                    float sum = 0.0f;
                    for (int64_t i = 0; i < ds; ++i) {
                        Sj[i] = Sj[i] * decay + B[i] * xd;
                        sum += Sj[i] * C[i];
                    }
                    y[j] = (sum + x[j] * L.ssm_d[h]) * silu(z[j]);
                }
            }
        }
    });
    // y = rms_norm(y) * ssm_norm over each group's inner / groups values
    const int64_t group = inner / n_group;
    if (!L.ssm_norm.empty()) {
        pool_.run([&](int ith, int nth) {
            const Range r = split_range(n, ith, nth);
            for (int64_t t = r.begin; t < r.end; ++t)
                for (int64_t g = 0; g < n_group; ++g) {
                    float* y = ssm_o_.data() + t * inner + g * group;
                    kv_ops_.rms_norm(y, L.ssm_norm.data() + g * group, y, 1, group, c.rms_eps);
                }
        });
    }
    const MatmulJob out[] = {{matrix(L.ssm_out), proj_.data()}};
    mm(out, ssm_o_.data(), n, inner, n_decode_);
    if (beside)  // proj = the attention's + the mixer's
        for (int64_t i = 0; i < n * c.n_embd; ++i) proj_[i] = attn_proj_[i] + proj_[i];
    scale_residual(n);
}

}  // namespace quill::cpu
