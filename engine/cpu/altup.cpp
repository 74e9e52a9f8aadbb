// The CPU backend's pieces of gemma3n (Gemma 3n): AltUp's hidden streams around each layer, Laurel's low-rank branch
// beside the attention, and the FFN gate's activation sparsity (ModelConfig::altup has the math;
// ReferenceBackend::altup_* the plain form). Every step is per token, in the same order whatever its batch.
#include "engine/cpu/cpu_backend.h"

#include "engine/cpu/kernels.h"

#include <algorithm>
#include <cmath>

namespace quill::cpu {

namespace {

// |v|: the square root of its sum of squares, summed in double
float magnitude(const float* v, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(v[i]) * v[i];
    return static_cast<float>(std::sqrt(s));
}

// sum_i a[i] b[i] in double, as float
float dot(const float* a, const float* b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
    return static_cast<float>(s);
}

}  // namespace

// y[t] = W x[t] rescaled to |target[t]| for the n rows: W x * |target| / |W x|
void CpuBackend::altup_project(const TensorView& w, const float* x, const float* target, int64_t n, float* y) {
    const int64_t d = config_.n_embd;
    const MatmulJob job[] = {{matrix(w), y}};
    mm(job, x, n, d, n_decode_);
    for (int64_t t = 0; t < n; ++t) {
        float* row = y + t * d;
        const float scale = magnitude(target + t * d, d), m = magnitude(row, d);
        for (int64_t i = 0; i < d; ++i) row[i] = row[i] * scale / m;
    }
}

// streams [n_altup, n, n_embd]: stream 0 the embeddings x_, stream k > 0 W_altup_proj[k-1] x_ rescaled to |x_|
void CpuBackend::altup_embed(int64_t n) {
    const auto& c = config_;
    const int64_t d = c.n_embd;
    altup_streams_.resize(c.n_altup * n * d);
    std::copy_n(x_.data(), n * d, altup_streams_.data());
    for (int64_t k = 1; k < c.n_altup; ++k)
        altup_project(weights_.altup_proj_k[static_cast<size_t>(k - 1)], x_.data(), x_.data(), n,
                      altup_streams_.data() + k * n * d);
}

// r[t] = tanh(W_router (rms_norm(v[t]) * router_norm / n_embd)) [n, n_altup]
void CpuBackend::altup_router(const LayerWeights& L, const float* v, int64_t n) {
    const auto& c = config_;
    const int64_t d = c.n_embd;
    altup_r_.resize(n * c.n_altup);
    altup_tmp_.resize(n * d);
    kv_ops_.rms_norm(v, L.altup_router_norm.data(), altup_tmp_.data(), n, d, c.rms_eps);
    const float inv = 1.0f / static_cast<float>(d);
    for (int64_t i = 0; i < n * d; ++i) altup_tmp_[i] *= inv;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < c.n_altup; ++j)
            altup_r_[t * c.n_altup + j] = std::tanh(dot(L.altup_router.data() + j * d, altup_tmp_.data() + t * d, d));
}

// pred [n_altup, n, n_embd]: p_j = s_j + sum_k (W_predict r(s_act))[j * n_altup + k] s_k; x_ = p_act, proj_ = 0
// (the attention's residual_norm adds nothing); laurel_ = xn + rms_norm(W_r W_l xn) * laurel_post_norm, xn =
// rms_norm(p_act) * attn_norm, the attention's input
void CpuBackend::altup_predict(const LayerWeights& L, int64_t n) {
    const auto& c = config_;
    const int64_t d = c.n_embd, a = c.n_altup, act = c.altup_active;
    altup_router(L, altup_streams_.data() + act * n * d, n);
    altup_pred_ = altup_streams_;
    std::vector<float> coef(static_cast<size_t>(a * a));
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t jk = 0; jk < a * a; ++jk)
            coef[jk] = dot(L.altup_predict_coef.data() + jk * a, altup_r_.data() + t * a, a);
        for (int64_t j = 0; j < a; ++j) {
            float* p = altup_pred_.data() + (j * n + t) * d;
            for (int64_t k = 0; k < a; ++k) {
                const float* s = altup_streams_.data() + (k * n + t) * d;
                for (int64_t i = 0; i < d; ++i) p[i] += coef[j * a + k] * s[i];
            }
        }
    }
    std::copy_n(altup_pred_.data() + act * n * d, n * d, x_.data());
    std::fill_n(proj_.data(), n * d, 0.0f);
    // Laurel over the attention's input (where the layer has it)
    if (!L.laurel_l.data) return;
    const int64_t rank = L.laurel_l.ne[1];
    laurel_.resize(n * d);
    laurel_low_.resize(n * rank);
    norm(x_.data(), L.attn_norm.data(), xn_.data(), n);
    const MatmulJob low[] = {{matrix(L.laurel_l), laurel_low_.data()}};
    mm(low, xn_.data(), n, d, n_decode_);
    const MatmulJob high[] = {{matrix(L.laurel_r), laurel_.data()}};
    mm(high, laurel_low_.data(), n, rank, n_decode_);
    norm(laurel_.data(), L.laurel_post_norm.data(), laurel_.data(), n);
    for (int64_t i = 0; i < n * d; ++i) laurel_[i] += xn_[i];
}

// After the attention (its output in proj_): x = ((x + proj) + laurel) / sqrt(2), proj = 0
void CpuBackend::laurel_join(int64_t n) {
    const int64_t d = config_.n_embd;
    const float s = 1.0f / std::sqrt(2.0f);
    for (int64_t i = 0; i < n * d; ++i) x_[i] = ((x_[i] + proj_[i]) + laurel_[i]) * s;
    std::fill_n(proj_.data(), n * d, 0.0f);
}

// With the layer's output o = x + proj: s_j = p_j + (o - p_act) ((W_correct r(o))_j + 1); then
// s_k += rms_norm(W_proj (gelu(W_gate (s_act * correct_scale)) * ple[layer])) * post_norm for k > 0; proj_ = 0
void CpuBackend::altup_correct(const LayerWeights& L, int64_t layer, int64_t n) {
    const auto& c = config_;
    const int64_t d = c.n_embd, a = c.n_altup, act = c.altup_active, dp = c.n_embd_per_layer;
    for (int64_t i = 0; i < n * d; ++i) x_[i] += proj_[i];
    std::fill_n(proj_.data(), n * d, 0.0f);
    altup_router(L, x_.data(), n);
    altup_streams_ = altup_pred_;
    for (int64_t t = 0; t < n; ++t) {
        const float* o = x_.data() + t * d;
        const float* pa = altup_pred_.data() + (act * n + t) * d;
        for (int64_t j = 0; j < a; ++j) {
            const float coef = dot(L.altup_correct_coef.data() + j * a, altup_r_.data() + t * a, a) + 1.0f;
            float* s = altup_streams_.data() + (j * n + t) * d;
            for (int64_t i = 0; i < d; ++i) s[i] += (o[i] - pa[i]) * coef;
        }
    }
    // the per-layer input's block, from the corrected active stream
    const float* active = altup_streams_.data() + act * n * d;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < d; ++i) altup_tmp_[t * d + i] = active[t * d + i] * L.altup_correct_scale[i];
    const MatmulJob gate[] = {{matrix(L.per_layer_inp_gate), ple_gate_.data()}};
    mm(gate, altup_tmp_.data(), n, d, n_decode_);
    const int64_t width = layers_.size() * dp;
    for (int64_t t = 0; t < n; ++t)
        kv_ops_.geglu(ple_gate_.data() + t * dp, ple_.data() + t * width + (layer - layers_.begin) * dp, dp);
    const MatmulJob proj[] = {{matrix(L.per_layer_proj), altup_tmp_.data()}};
    mm(proj, ple_gate_.data(), n, dp, n_decode_);
    norm(altup_tmp_.data(), L.per_layer_post_norm.data(), altup_tmp_.data(), n);
    for (int64_t k = 1; k < a; ++k) {
        float* s = altup_streams_.data() + k * n * d;
        for (int64_t i = 0; i < n * d; ++i) s[i] += altup_tmp_[i];
    }
}

// x_ = (s_0 + sum_{k>0} W_unembd[k-1] s_k rescaled to |s_act|) / n_altup, proj_ = 0
void CpuBackend::altup_merge(int64_t n) {
    const auto& c = config_;
    const int64_t d = c.n_embd;
    altup_tmp_.resize(n * d);
    std::copy_n(altup_streams_.data(), n * d, x_.data());
    const float* target = altup_streams_.data() + c.altup_active * n * d;
    for (int64_t k = 1; k < c.n_altup; ++k) {
        altup_project(weights_.altup_unembd_k[static_cast<size_t>(k - 1)], altup_streams_.data() + k * n * d, target,
                      n, altup_tmp_.data());
        for (int64_t i = 0; i < n * d; ++i) x_[i] += altup_tmp_[i];
    }
    const float inv = 1.0f / static_cast<float>(c.n_altup);
    for (int64_t i = 0; i < n * d; ++i) x_[i] *= inv;
    std::fill_n(proj_.data(), n * d, 0.0f);
}

// gate [n, n_ff]: g = max(g - (mean(g) + sparsity_std_mul * std(g)), 0) in each row, the sums in double, the
// standard deviation over n_ff - 1
void CpuBackend::sparsify_gate(int64_t n, int64_t n_ff) {
    const float mul = config_.sparsity_std_mul;
    pool_.run([&](int ith, int nth) {
        const Range r = split_range(n, ith, nth, 1);
        for (int64_t t = r.begin; t < r.end; ++t) {
            float* g = gate_.data() + t * n_ff;
            double sum = 0.0;
            for (int64_t i = 0; i < n_ff; ++i) sum += g[i];
            const auto mean = static_cast<float>(sum / static_cast<double>(n_ff));
            double ss = 0.0;
            for (int64_t i = 0; i < n_ff; ++i) ss += static_cast<double>(g[i] - mean) * (g[i] - mean);
            const auto sd = static_cast<float>(std::sqrt(ss / static_cast<double>(n_ff - 1)));
            const float cutoff = mean + sd * mul;
            for (int64_t i = 0; i < n_ff; ++i) g[i] = std::max(g[i] - cutoff, 0.0f);
        }
    });
}

}  // namespace quill::cpu
