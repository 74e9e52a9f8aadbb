#include "engine/cpu/moe.h"

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/kernels.h"
#include "engine/error.h"
#include "engine/model/moe_route.h"

#include <algorithm>
#include <cmath>

namespace quill::cpu {

void MoeRouting::route(const float* logits, int64_t n, int64_t n_expert, int64_t n_used, const float* bias,
                       bool renormalize) {
    QUILL_CHECK(n_used >= 1 && n_used <= n_expert, "{} of {} experts", n_used, n_expert);
    n_used_ = n_used;
    const auto k = static_cast<size_t>(n_used);
    chosen_.resize(static_cast<size_t>(n) * k);
    chosen_weight_.resize(chosen_.size());
    probs_.resize(static_cast<size_t>(n_expert));
    order_.resize(static_cast<size_t>(n_expert));
    offsets_.assign(static_cast<size_t>(n_expert) + 2, 0);
    for (int64_t t = 0; t < n; ++t) {
        // l = logits[t] (+ bias)
        const float* l = logits + t * n_expert;
        for (int64_t e = 0; e < n_expert; ++e) probs_[e] = bias ? l[e] + bias[e] : l[e];
        // the n_used largest, then in increasing expert order, each weighted by exp(l_e) / (sum of theirs, or of all)
        for (size_t e = 0; e < order_.size(); ++e) order_[e] = static_cast<int32_t>(e);
        std::partial_sort(order_.begin(), order_.begin() + n_used, order_.end(), [&](int32_t a, int32_t b) {
            return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
        });
        const double top = probs_[order_[0]];
        std::sort(order_.begin(), order_.begin() + n_used);
        double chosen_sum = 0.0;
        const size_t summed = renormalize ? k : order_.size();
        for (size_t i = 0; i < summed; ++i) chosen_sum += std::exp(probs_[order_[i]] - top);
        for (size_t i = 0; i < k; ++i) {
            chosen_[t * k + i] = order_[i];
            chosen_weight_[t * k + i] = static_cast<float>(std::exp(probs_[order_[i]] - top) / chosen_sum);
            ++offsets_[static_cast<size_t>(order_[i]) + 2];
        }
    }
    group(n);
}

void MoeRouting::route_general(const float* logits, int64_t n, const ModelConfig& c, const float* bias) {
    const int64_t k = c.n_expert_used;
    n_used_ = k;
    chosen_.resize(static_cast<size_t>(n * k));
    chosen_weight_.resize(chosen_.size());
    offsets_.assign(static_cast<size_t>(c.n_expert) + 2, 0);
    logits_.resize(static_cast<size_t>(c.n_expert));
    weight_.resize(static_cast<size_t>(k));
    for (int64_t t = 0; t < n; ++t) {
        std::copy_n(logits + t * c.n_expert, c.n_expert, logits_.begin());
        route_experts(c, logits_.data(), bias, chosen_.data() + t * k, weight_.data(), scratch_);
        for (int64_t i = 0; i < k; ++i) {
            chosen_weight_[static_cast<size_t>(t * k + i)] = static_cast<float>(weight_[static_cast<size_t>(i)]);
            ++offsets_[static_cast<size_t>(chosen_[static_cast<size_t>(t * k + i)]) + 2];
        }
    }
    group(n);
}

void MoeRouting::group(int64_t n) {
    const auto k = static_cast<size_t>(n_used_);
    // Counting sort by expert: offsets_[e + 1] is where expert e's assignments start while they are placed.
    for (size_t e = 2; e < offsets_.size(); ++e) offsets_[e] += offsets_[e - 1];
    tokens_.resize(chosen_.size());
    weights_.resize(chosen_.size());
    for (int64_t t = 0; t < n; ++t)
        for (size_t i = 0; i < k; ++i) {
            const auto at = static_cast<size_t>(offsets_[static_cast<size_t>(chosen_[t * k + i]) + 1]++);
            tokens_[at] = static_cast<int32_t>(t);
            weights_[at] = chosen_weight_[t * k + i];
        }
    offsets_.pop_back();
}

namespace {

// Expert e's part [e * n, (e + 1) * n) of a layer's expert biases, or nullptr when it has none.
const float* bias_of(const std::vector<float>& b, int64_t e, int64_t n) {
    return b.empty() ? nullptr : b.data() + e * n;
}

// gate[i] = g' / (1 + e^(-alpha g')) * (u' + 1) for i in [begin, end), g' = min(gate[i] + b1[i % f], limit), u' =
// clamp(up[i] + b3[i % f], -limit, limit): gpt-oss's clamped SwiGLU over rows of f features (biases where not
// null).
void swiglu_oai(float* gate, const float* up, int64_t begin, int64_t end, int64_t f, const float* b1, const float* b3,
                float alpha, float limit) {
    for (int64_t i = begin; i < end; ++i) {
        const float g = std::min(b1 ? gate[i] + b1[i % f] : gate[i], limit);
        const float u = std::clamp(b3 ? up[i] + b3[i % f] : up[i], -limit, limit);
        gate[i] = g / (1.0f + std::exp(alpha * -g)) * (u + 1.0f);
    }
}

}  // namespace

void swiglu_clamped(float* gate, const float* up, int64_t n, float limit) {
    for (int64_t i = 0; i < n; ++i)
        gate[i] = std::min(gate[i] / (1.0f + std::exp(-gate[i])), limit) * std::clamp(up[i], -limit, limit);
}

// proj = sum over the routed experts e of each token of weight_e * W2_e (silu(W1_e xn) * W3_e xn), xn = rms_norm(x +
// the attention's proj) * ffn_norm (gpt-oss: the router's logits and each product biased, the clamped SwiGLU; llama4:
// W2_e (silu(W1_e (weight_e xn)) * W3_e (weight_e xn)), the weight on the input).
// gemma4 (`summed`, x already the sum): the router reads rms_norm(x) / sqrt(n_embd) * its scale, the experts
// xn = rms_norm(x) * pre_norm_2, act GELU, and expert e's output is scaled by down_scale_e.
// Expert by expert in increasing order, each over the rows of its tokens gathered (all of xn's when every token
// uses it), and added to each token's sum as it comes: a token's sum runs over its
// experts in the same order, with the same products, whatever else is in the batch.
void CpuBackend::moe_block(const LayerWeights& L, int64_t layer, int64_t n, bool summed, bool xn_ready) {
    const auto& c = config_;
    const int64_t d = c.n_embd, f = c.n_ff_exp;
    const float clamp = ModelConfig::layer_clamp(c.swiglu_clamp_exp, layer);  // (step35's SwiGLU clamp; 0: none)
    moe_logits_.resize(static_cast<size_t>(n * c.n_expert));
    const MatmulJob router[] = {{matrix(L.ffn_gate_inp), moe_logits_.data()}};
    if (summed) {
        norm(x_.data(), L.ffn_gate_inp_s.data(), xn_.data(), n);
        const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
        for (int64_t i = 0; i < n * d; ++i) xn_[i] *= scale;
        mm(router, xn_.data(), n, d, n_decode_);
        norm(x_.data(), L.ffn_pre_norm_2.data(), xn_.data(), n);
    } else if (xn_ready) {
        mm(router, xn_.data(), n, d, n_decode_);
    } else {
        const bool ready = residual_norm(layer, L.ffn_norm.data(), &router[0].w, n);
        mm(router, xn_.data(), n, d, n_decode_, ready);
    }
    const float* router_bias = L.ffn_gate_inp_b.empty() ? nullptr : L.ffn_gate_inp_b.data();
    if (c.moe_routing_general())
        moe_routing_.route_general(moe_logits_.data(), n, c,
                                   L.ffn_exp_probs_b.empty() ? nullptr : L.ffn_exp_probs_b.data());
    else
        moe_routing_.route(moe_logits_.data(), n, c.n_expert, c.n_expert_used, router_bias, c.moe_norm_weights);

    moe_x_.resize(static_cast<size_t>(n * d));
    moe_gate_.resize(static_cast<size_t>(n * f));
    moe_up_.resize(static_cast<size_t>(n * f));
    moe_down_.resize(static_cast<size_t>(n * d));
    std::fill_n(proj_.begin(), n * d, 0.0f);
    // act_ holds xn_ (the router's product set it), with the conversions made of it (not gemma4's: its experts' xn_
    // is another norm)
    // (llama4's weighted inputs: never xn_ itself)
    const bool weighted_in = c.moe_weight_input;
    bool xn_in_act = !reference_ && !summed && !weighted_in;
    for (int64_t e = 0; e < c.n_expert; ++e) {
        const int64_t b = moe_routing_.begin(e), m = moe_routing_.end(e) - b;
        if (m == 0) continue;
        const float* x = xn_.data();
        int64_t m_decode = n_decode_;
        if (m < n || weighted_in) {  // its tokens' rows, in batch order (the decode steps, which lead the batch, first)
            m_decode = 0;
            for (int64_t i = 0; i < m; ++i) {
                const int64_t t = moe_routing_.token(b + i);
                if (weighted_in) {  // (llama4: the expert reads its weight times xn)
                    const float w = moe_routing_.weight(b + i);
                    for (int64_t j = 0; j < d; ++j) moe_x_[i * d + j] = xn_[t * d + j] * w;
                } else {
                    std::copy_n(xn_.data() + t * d, d, moe_x_.data() + i * d);
                }
                if (t < n_decode_) ++m_decode;
            }
            x = moe_x_.data();
        }
        const ExpertWeights& E = L.experts[static_cast<size_t>(e)];
        const bool gated = E.gate.data != nullptr;  // (nemotron_h_moe: up alone, into moe_gate_)
        const MatmulJob gate_up[] = {{matrix(gated ? E.gate : E.up), moe_gate_.data()}, {matrix(E.up), moe_up_.data()}};
        mm(std::span<const MatmulJob>(gate_up, gated ? 2 : 1), x, m, d, m_decode, m == n && xn_in_act);
        xn_in_act = m == n && !reference_ && !weighted_in;
        // gate = act(gate (+ b1), up (+ b3)): silu(gate) * up, or gpt-oss's clamped form with its biases, or
        // (nemotron_h_moe) relu_sqr(up) = max(up, 0)^2
        auto act = [&](int64_t begin, int64_t end) {
            if (!gated) {
                for (int64_t i = begin; i < end; ++i) {
                    const float u = std::max(moe_gate_[i], 0.0f);
                    moe_gate_[i] = u * u;
                }
                return;
            }
            if (c.ffn_act == ModelConfig::Activation::gelu_tanh)
                return kv_ops_.geglu(moe_gate_.data() + begin, moe_up_.data() + begin, end - begin);
            if (clamp > 0.0f)  // (step35)
                return swiglu_clamped(moe_gate_.data() + begin, moe_up_.data() + begin, end - begin, clamp);
            if (c.ffn_act != ModelConfig::Activation::swiglu_oai)
                return kv_ops_.swiglu(moe_gate_.data() + begin, moe_up_.data() + begin, end - begin);
            swiglu_oai(moe_gate_.data(), moe_up_.data(), begin, end, f, bias_of(L.ffn_gate_exps_b, e, f),
                       bias_of(L.ffn_up_exps_b, e, f), c.swiglu_alpha, c.swiglu_limit);
        };
        if (m * f < 16384) {
            act(0, m * f);
        } else {
            pool_.run([&](int ith, int nth) {
                const Range r = split_range(m * f, ith, nth, 64);
                act(r.begin, r.end);
            });
        }
        // (the fast path's input in ffn_act_, so that act_ keeps xn_'s conversions for the next expert)
        const MatmulJob down[] = {{matrix(E.down), moe_down_.data()}};
        if (reference_) {
            mm(down, moe_gate_.data(), m, f, m_decode);
        } else {
            ffn_act_.set(moe_gate_.data(), m, f, m_decode);
            matmul(down, ffn_act_, pool_, isa_);
        }
        const float* b2 = bias_of(L.ffn_down_exps_b, e, d);  // (gpt-oss: y += w * (o + b2))
        const float s = L.ffn_down_exps_s.empty() ? 1.0f : L.ffn_down_exps_s[static_cast<size_t>(e)];  // (gemma4)
        for (int64_t i = 0; i < m; ++i) {
            float* y = proj_.data() + moe_routing_.token(b + i) * d;
            const float* o = moe_down_.data() + i * d;
            const float w = (weighted_in ? 1.0f : moe_routing_.weight(b + i)) * s;
            if (b2)
                for (int64_t j = 0; j < d; ++j) y[j] += w * (o[j] + b2[j]);
            else
                for (int64_t j = 0; j < d; ++j) y[j] += w * o[j];
        }
    }
}

// proj += sigmoid(g . xn) * W2 (silu(W1 xn) * W3 xn) for each token, the shared expert beside the routed ones
// (qwen2moe, qwen35moe; nemotron_h_moe's W2 relu_sqr(W3 xn), dense_ffn's), xn the experts' input that moe_block left
// in xn_; the factor 1 without a gate vector g. Over all n rows as a dense FFN, and added after the experts' sum: a
// token's output is the same in any batch.
void CpuBackend::shared_expert(const LayerWeights& L, int64_t layer, int64_t n) {
    const int64_t d = config_.n_embd;
    dense_ffn(L, layer, n, xn_.data(), false, shared_.data());
    const std::vector<float>& g = L.ffn_gate_inp_shexp;
    for (int64_t t = 0; t < n; ++t) {
        const float* x = xn_.data() + t * d;
        double z = 0.0;
        for (int64_t j = 0; j < static_cast<int64_t>(g.size()); ++j) z += static_cast<double>(g[j]) * x[j];
        const auto gate = static_cast<float>(g.empty() ? 1.0 : 1.0 / (1.0 + std::exp(-z)));
        float* y = proj_.data() + t * d;
        const float* s = shared_.data() + t * d;
        for (int64_t j = 0; j < d; ++j) y[j] += gate * s[j];
    }
    const float scale = config_.moe_shared_scale;  // (cohere2moe: the average of the two)
    if (scale != 1.0f)
        for (int64_t i = 0; i < n * d; ++i) proj_[i] *= scale;
}

}  // namespace quill::cpu
