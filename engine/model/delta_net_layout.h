// qwen3next's fused delta-net projections (ModelConfig::ssm_grouped), grouped by key head, put in qwen35's order:
// one token's W_ba xn into beta and alpha (one a value head), and its older files' W_in xn into the conv's q, k, v
// and the output gate z. Both backends' forwards read their products through these.
#pragma once

#include <algorithm>
#include <cstdint>

namespace quill {

// ba [n_k, 2, group] (each key head's group of betas, then their alphas) -> beta, alpha [n_k * group], value head
// g * group + i at g * group + i (group = n_v_heads / n_k_heads).
template <class T>
void ungroup_ba(const T* ba, int64_t n_k, int64_t group, T* beta, T* alpha) {
    for (int64_t g = 0; g < n_k; ++g) {
        std::copy_n(ba + 2 * g * group, group, beta + g * group);
        std::copy_n(ba + (2 * g + 1) * group, group, alpha + g * group);
    }
}

// qkvz [n_k, 2 head_k + 2 group_v] (each key head's q, k, then its group's v heads and their z, group_v = group *
// head_v values each) -> qkv [q: n_k * head_k, k: n_k * head_k, v: n_k * group_v], z [n_k * group_v].
template <class T>
void ungroup_qkvz(const T* qkvz, int64_t n_k, int64_t head_k, int64_t group_v, T* qkv, T* z) {
    const int64_t width = 2 * head_k + 2 * group_v;
    for (int64_t g = 0; g < n_k; ++g) {
        const T* s = qkvz + g * width;
        std::copy_n(s, head_k, qkv + g * head_k);
        std::copy_n(s + head_k, head_k, qkv + (n_k + g) * head_k);
        std::copy_n(s + 2 * head_k, group_v, qkv + 2 * n_k * head_k + g * group_v);
        std::copy_n(s + 2 * head_k + group_v, group_v, z + g * group_v);
    }
}

}  // namespace quill
