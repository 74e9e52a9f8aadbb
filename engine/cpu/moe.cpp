#include "engine/cpu/moe.h"

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/kernels.h"
#include "engine/error.h"

#include <algorithm>
#include <cmath>

namespace quill::cpu {

void MoeRouting::route(const float* logits, int64_t n, int64_t n_expert, int64_t n_used) {
    QUILL_CHECK(n_used >= 1 && n_used <= n_expert, "{} of {} experts", n_used, n_expert);
    n_used_ = n_used;
    const auto k = static_cast<size_t>(n_used);
    chosen_.resize(static_cast<size_t>(n) * k);
    chosen_weight_.resize(chosen_.size());
    probs_.resize(static_cast<size_t>(n_expert));
    order_.resize(static_cast<size_t>(n_expert));
    offsets_.assign(static_cast<size_t>(n_expert) + 2, 0);
    for (int64_t t = 0; t < n; ++t) {
        // p = softmax(logits[t])
        const float* l = logits + t * n_expert;
        const float top = *std::max_element(l, l + n_expert);
        double sum = 0.0;
        for (int64_t e = 0; e < n_expert; ++e) sum += probs_[e] = std::exp(static_cast<double>(l[e]) - top);
        for (double& p : probs_) p /= sum;
        // the n_used largest, then in increasing expert order, each weighted by p_e / (sum of theirs)
        for (size_t e = 0; e < order_.size(); ++e) order_[e] = static_cast<int32_t>(e);
        std::partial_sort(order_.begin(), order_.begin() + n_used, order_.end(), [&](int32_t a, int32_t b) {
            return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
        });
        std::sort(order_.begin(), order_.begin() + n_used);
        double chosen_sum = 0.0;
        for (size_t i = 0; i < k; ++i) chosen_sum += probs_[order_[i]];
        for (size_t i = 0; i < k; ++i) {
            chosen_[t * k + i] = order_[i];
            chosen_weight_[t * k + i] = static_cast<float>(probs_[order_[i]] / chosen_sum);
            ++offsets_[static_cast<size_t>(order_[i]) + 2];
        }
    }
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

// proj = sum over the routed experts e of each token of weight_e * W2_e (silu(W1_e xn) * W3_e xn), xn = rms_norm(x +
// the attention's proj) * ffn_norm. Expert by expert in increasing order, each over the rows of its tokens gathered
// (all of xn's when every token uses it), and added to each token's sum as it comes: a token's sum runs over its
// experts in the same order, with the same products, whatever else is in the batch.
void CpuBackend::moe_block(const LayerWeights& L, int64_t layer, int64_t n) {
    const auto& c = config_;
    const int64_t d = c.n_embd, f = c.n_ff_exp;
    moe_logits_.resize(static_cast<size_t>(n * c.n_expert));
    const MatmulJob router[] = {{matrix(L.ffn_gate_inp), moe_logits_.data()}};
    const bool ready = residual_norm(layer, L.ffn_norm.data(), &router[0].w, n);
    mm(router, xn_.data(), n, d, n_decode_, ready);
    moe_routing_.route(moe_logits_.data(), n, c.n_expert, c.n_expert_used);

    moe_x_.resize(static_cast<size_t>(n * d));
    moe_gate_.resize(static_cast<size_t>(n * f));
    moe_up_.resize(static_cast<size_t>(n * f));
    moe_down_.resize(static_cast<size_t>(n * d));
    std::fill_n(proj_.begin(), n * d, 0.0f);
    bool xn_in_act = !reference_;  // act_ holds xn_ (the router's product set it), with the conversions made of it
    for (int64_t e = 0; e < c.n_expert; ++e) {
        const int64_t b = moe_routing_.begin(e), m = moe_routing_.end(e) - b;
        if (m == 0) continue;
        const float* x = xn_.data();
        int64_t m_decode = n_decode_;
        if (m < n) {  // its tokens' rows, in batch order (the decode steps, which lead the batch, first)
            m_decode = 0;
            for (int64_t i = 0; i < m; ++i) {
                const int64_t t = moe_routing_.token(b + i);
                std::copy_n(xn_.data() + t * d, d, moe_x_.data() + i * d);
                if (t < n_decode_) ++m_decode;
            }
            x = moe_x_.data();
        }
        const ExpertWeights& E = L.experts[static_cast<size_t>(e)];
        const MatmulJob gate_up[] = {{matrix(E.gate), moe_gate_.data()}, {matrix(E.up), moe_up_.data()}};
        mm(gate_up, x, m, d, m_decode, m == n && xn_in_act);
        xn_in_act = m == n && !reference_;
        // gate = silu(gate) * up
        if (m * f < 16384) {
            kv_ops_.swiglu(moe_gate_.data(), moe_up_.data(), m * f);
        } else {
            pool_.run([&](int ith, int nth) {
                const Range r = split_range(m * f, ith, nth, 64);
                kv_ops_.swiglu(moe_gate_.data() + r.begin, moe_up_.data() + r.begin, r.end - r.begin);
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
        for (int64_t i = 0; i < m; ++i) {
            float* y = proj_.data() + moe_routing_.token(b + i) * d;
            const float* o = moe_down_.data() + i * d;
            const float w = moe_routing_.weight(b + i);
            for (int64_t j = 0; j < d; ++j) y[j] += w * o[j];
        }
    }
}

}  // namespace quill::cpu
