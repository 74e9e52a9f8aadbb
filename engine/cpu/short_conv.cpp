// The CPU backend's short gated convolution (lfm2's recurrent layers): the block that stands where attention_block
// stands.
#include "engine/cpu/cpu_backend.h"

#include <algorithm>

namespace quill::cpu {

// proj = W_out (c * conv(b * x)), [b, c, x] = W_in xn, with xn = rms_norm(x) * attn_norm and conv each channel's
// ssm_conv taps over its last ssm_conv - 1 values of b * x in the token's sequence and the token's own (the last
// tap's), a float sum from the first tap on (ggml's ssm_conv's order); a sequence at position 0 starts from zeros
// (ReferenceBackend::short_conv_token has the math). The conv runs by channel, each token's in batch order: the
// same operations whatever its batch.
void CpuBackend::short_conv_block(const Batch& batch, const LayerWeights& L, int64_t layer) {
    const auto& c = config_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t d = c.n_embd, taps = c.ssm_conv;
    ssm_qkv_.resize(n * 3 * d);
    ssm_conv_.resize(n * d);
    const MatmulJob in[] = {{matrix(L.ssm_in), ssm_qkv_.data()}};
    const bool ready = layer == layers_.begin
                           ? norm(x_.data(), L.attn_norm.data(), xn_.data(), n, &in[0].w, n_decode_)
                           : residual_norm(layer - 1, L.attn_norm.data(), &in[0].w, n, out_scale(layer - 1));
    mm(in, xn_.data(), n, d, n_decode_, ready);

    // y[t, ch] = c * sum_i window[i] w[ch, i], the window then moved on by b * x
    pool_.run([&](int ith, int nth) {
        const Range r = split_range(d, ith, nth, 16);
        for (int64_t t = 0; t < n; ++t) {
            const BatchToken& bt = batch.tokens[static_cast<size_t>(t)];
            float* window = recurrent_.conv(layer, bt.slot);  // [n_embd, taps - 1]
            const float* bcx = ssm_qkv_.data() + t * 3 * d;  // [3, n_embd] b, c, x
            for (int64_t ch = r.begin; ch < r.end; ++ch) {
                float* w = window + ch * (taps - 1);
                if (bt.pos == 0) std::fill_n(w, taps - 1, 0.0f);
                const float* tap = L.ssm_conv1d.data() + ch * taps;
                const float bx = bcx[ch] * bcx[2 * d + ch];
                float s = 0.0f;
                for (int64_t i = 0; i < taps - 1; ++i) s += w[i] * tap[i];
                s += bx * tap[taps - 1];
                ssm_conv_[t * d + ch] = bcx[d + ch] * s;
                for (int64_t i = 0; i + 1 < taps - 1; ++i) w[i] = w[i + 1];
                w[taps - 2] = bx;
            }
        }
    });
    const MatmulJob out[] = {{matrix(L.ssm_out), proj_.data()}};
    mm(out, ssm_conv_.data(), n, d, n_decode_);
}

}  // namespace quill::cpu
