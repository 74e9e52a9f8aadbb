#include "engine/model/moe_route.h"

#include "engine/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace quill {

void route_experts(const ModelConfig& c, const double* logits, const float* bias, int32_t* chosen, double* weight,
                   std::vector<double>& scratch) {
    const int64_t n = c.n_expert, k = c.n_expert_used;
    QUILL_CHECK(k >= 1 && k <= n, "{} of {} experts", k, n);
    scratch.resize(static_cast<size_t>(2 * n));
    double* p = scratch.data();      // [n_expert] the probabilities
    double* s = scratch.data() + n;  // [n_expert] the selection scores
    if (c.moe_gating_sigmoid) {
        for (int64_t e = 0; e < n; ++e) p[e] = 1.0 / (1.0 + std::exp(-logits[e]));
    } else {
        const double m = *std::max_element(logits, logits + n);
        double sum = 0.0;
        for (int64_t e = 0; e < n; ++e) sum += p[e] = std::exp(logits[e] - m);
        for (int64_t e = 0; e < n; ++e) p[e] /= sum;
    }
    // (llama4: chosen by the logits themselves, as llama.cpp ranks them)
    for (int64_t e = 0; e < n; ++e) s[e] = c.moe_weight_input ? logits[e] : p[e] + (bias ? bias[e] : 0.0f);
    auto larger = [&](const double* v) {
        return [v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
    };
    if (c.moe_n_group > 1) {  // (the groups of the largest sums of their two best scores; the others out)
        const int64_t per = n / c.moe_n_group;
        std::vector<double> group(static_cast<size_t>(c.moe_n_group));
        for (int64_t g = 0; g < c.moe_n_group; ++g) {
            double best = -INFINITY, second = -INFINITY;
            for (int64_t e = g * per; e < (g + 1) * per; ++e) {
                if (s[e] > best) {
                    second = best;
                    best = s[e];
                } else if (s[e] > second) {
                    second = s[e];
                }
            }
            group[static_cast<size_t>(g)] = best + (per > 1 ? second : 0.0);
        }
        std::vector<int32_t> order(group.size());
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + c.moe_n_group_used, order.end(), larger(group.data()));
        std::vector<bool> kept(group.size(), false);
        for (int64_t i = 0; i < c.moe_n_group_used; ++i) kept[static_cast<size_t>(order[i])] = true;
        for (int64_t e = 0; e < n; ++e)
            if (!kept[static_cast<size_t>(e / per)]) s[e] = -INFINITY;
    }
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), larger(s));
    std::sort(order.begin(), order.begin() + k);
    double sum = 0.0;
    for (int64_t i = 0; i < k; ++i) sum += p[order[i]];
    const double divisor = c.moe_norm_weights ? std::max(sum, 6.103515625e-5) : 1.0;
    for (int64_t i = 0; i < k; ++i) {
        chosen[i] = order[i];
        weight[i] = p[order[i]] / divisor * c.moe_weights_scale;
    }
}

}  // namespace quill
