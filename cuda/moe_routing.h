// The routing of a mixture-of-experts layer for the CUDA backend, computed on the host from the router's logits:
// each token's experts and weights as the CPU backend picks them (engine/cpu/moe.h), and the batch's assignments
// grouped by expert for the device's products. Header-only and free of CUDA includes, so that
// tests/unit/cuda/host/ checks it in every build.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace quill::cuda {

class ExpertGroups {
public:
    // From router logits [n, n_expert] (plus bias [n_expert] when not null, in float, as the CPU backend adds
    // gpt-oss's): each token's n_used experts of the largest softmax probabilities (computed
    // in double; a tie goes to the lower expert, a NaN ranks last), in increasing expert order, weighted by those
    // probabilities over their sum. The first n_lead tokens are the batch's decode steps (lead counts them per
    // expert); each expert's tokens keep the batch's order, so that they lead its group too.
    void route(const float* logits, int64_t n, int64_t n_expert, int64_t n_used, int64_t n_lead,
               const float* bias = nullptr) {
        const auto k = static_cast<size_t>(n_used), ne = static_cast<size_t>(n_expert);
        n_used_ = n_used;
        experts_.resize(static_cast<size_t>(n) * k);
        weights_.resize(experts_.size());
        slots_.resize(experts_.size());
        rows_.resize(experts_.size());
        offsets_.assign(ne + 1, 0);
        leads_.assign(ne, 0);
        probs_.resize(ne);
        order_.resize(ne);
        biased_.resize(ne);
        for (int64_t t = 0; t < n; ++t) {
            const float* l = logits + t * n_expert;
            if (bias != nullptr) {
                for (size_t e = 0; e < ne; ++e) biased_[e] = l[e] + bias[e];
                l = biased_.data();
            }
            float top = -INFINITY;
            for (size_t e = 0; e < ne; ++e) top = std::max(top, l[e]);
            double sum = 0.0;
            for (size_t e = 0; e < ne; ++e) sum += probs_[e] = std::exp(static_cast<double>(l[e]) - top);
            for (double& p : probs_) p /= sum;
            std::iota(order_.begin(), order_.end(), 0);
            auto rank = [&](int32_t e) { return std::isnan(probs_[e]) ? -1.0 : probs_[e]; };
            std::partial_sort(order_.begin(), order_.begin() + n_used, order_.end(), [&](int32_t a, int32_t b) {
                return rank(a) > rank(b) || (rank(a) == rank(b) && a < b);
            });
            std::sort(order_.begin(), order_.begin() + n_used);
            double chosen = 0.0;
            for (size_t i = 0; i < k; ++i) chosen += probs_[order_[i]];
            for (size_t i = 0; i < k; ++i) {
                const int32_t e = order_[i];
                experts_[t * k + i] = e;
                weights_[t * k + i] = static_cast<float>(probs_[e] / chosen);
                ++offsets_[static_cast<size_t>(e) + 1];
                if (t < n_lead) ++leads_[static_cast<size_t>(e)];
            }
        }
        std::partial_sum(offsets_.begin(), offsets_.end(), offsets_.begin());
        std::vector<int32_t> next(offsets_.begin(), offsets_.end() - 1);
        for (int64_t t = 0; t < n; ++t)
            for (size_t i = 0; i < k; ++i) {
                const int32_t at = next[static_cast<size_t>(experts_[t * k + i])]++;
                rows_[static_cast<size_t>(at)] = static_cast<int32_t>(t);
                slots_[t * k + i] = at;
            }
        owners_.resize(rows_.size());
        for (size_t e = 0; e < ne; ++e)
            std::fill(owners_.begin() + offsets_[e], owners_.begin() + offsets_[e + 1], static_cast<int32_t>(e));
    }

    int64_t n_used() const { return n_used_; }
    // Expert e's assignments are [begin(e), end(e)) of rows(); lead(e) of them are decode steps (they come first).
    int64_t begin(int64_t e) const { return offsets_[static_cast<size_t>(e)]; }
    int64_t end(int64_t e) const { return offsets_[static_cast<size_t>(e) + 1]; }
    int64_t lead(int64_t e) const { return leads_[static_cast<size_t>(e)]; }
    // [n * n_used] the token of each assignment, grouped by expert, in batch order within an expert
    const std::vector<int32_t>& rows() const { return rows_; }
    // [n * n_used] the expert of each assignment (index into rows()): whose biases its products take
    const std::vector<int32_t>& owners() const { return owners_; }
    // [n, n_used] token t's experts in increasing order, their weights, and the assignment (index into rows()) of
    // each: the order in which a token's expert outputs are summed
    const std::vector<int32_t>& experts() const { return experts_; }
    const std::vector<float>& weights() const { return weights_; }
    const std::vector<int32_t>& slots() const { return slots_; }

private:
    int64_t n_used_ = 0;
    std::vector<int32_t> experts_, slots_, rows_, owners_, offsets_, leads_;
    std::vector<float> weights_;
    std::vector<double> probs_;   // [n_expert] one token's softmax
    std::vector<float> biased_;   // [n_expert] one token's biased logits
    std::vector<int32_t> order_;  // [n_expert] experts by decreasing probability
};

}  // namespace quill::cuda
