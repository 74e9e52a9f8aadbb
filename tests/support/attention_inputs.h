// Random attention inputs for the CPU attention tests (engine/cpu/attention.h): a cache of K and V in the cache's
// layouts in F32 and F16, a query per (position, head), optionally a sink per head; the rows of tokens and heads, and
// attend_rows over them in tiles.
#pragma once

#include "engine/cpu/attention.h"
#include "engine/format/quant.h"
#include "tests/support/backend_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace quill::test::attention {

using namespace quill::cpu;

struct Shape {
    int n_head, n_head_kv, head_dim;
};

// A random cache of n_kv positions and a query for every (position, head); the heads' sinks where add_sinks gave them.
struct Inputs {
    Shape s;
    int n_kv;
    std::vector<float> q;     // [n_kv, n_head, head_dim]
    std::vector<float> k, v;  // K in the cache's blocks of 8 positions (k_cache_offset), V [n_kv, n_head_kv, head_dim]
    std::vector<uint16_t> k16, v16;
    std::vector<float> sinks;  // [n_head], or empty: no sinks
};

inline Inputs random_inputs(const Shape& s, int n_kv, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Inputs in{s, n_kv, {}, {}, {}, {}, {}, {}};
    in.q.resize(static_cast<size_t>(n_kv) * s.n_head * s.head_dim);
    for (float& x : in.q) x = 2.0f * normal(rng);  // sharp enough softmaxes to matter
    const int64_t row = static_cast<int64_t>(s.n_head_kv) * s.head_dim;
    in.k.assign(static_cast<size_t>((n_kv + 7) / 8 * 8 * row), NAN);  // the padding of the last block is never read
    in.v.resize(static_cast<size_t>(n_kv * row));
    for (int j = 0; j < n_kv; ++j)
        for (int64_t e = 0; e < row; ++e) in.k[k_cache_offset(j, e, row)] = normal(rng);
    for (float& x : in.v) x = normal(rng);
    for (float x : in.k) in.k16.push_back(fp32_to_fp16(x));
    for (float x : in.v) in.v16.push_back(fp32_to_fp16(x));
    return in;
}

// Gives every head a random sink (gpt-oss). The scores of random_inputs spread ~N(0, 4): over a thousand positions a
// row's denominator is ~e^9, so sinks around 9 take a good share of the rows' weight (from a few percent to most of
// it), some above every score.
inline void add_sinks(Inputs& in, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    in.sinks.clear();
    for (int h = 0; h < in.s.n_head; ++h) in.sinks.push_back(9.0f + 3.0f * normal(rng));
}

inline KvHead kv_head(const Inputs& in, KvType type, int g) {
    const int64_t row = static_cast<int64_t>(in.s.n_head_kv) * in.s.head_dim;
    const size_t koff = k_cache_offset(0, static_cast<int64_t>(g) * in.s.head_dim, row);
    const size_t voff = static_cast<size_t>(g) * in.s.head_dim;
    const bool f16 = type == KvType::f16;
    return KvHead{f16 ? static_cast<const void*>(in.k16.data() + koff) : in.k.data() + koff,
                  f16 ? static_cast<const void*>(in.v16.data() + voff) : in.v.data() + voff,
                  type,
                  static_cast<size_t>(row) * 8,
                  static_cast<size_t>(row),
                  in.s.head_dim,
                  1.0f / std::sqrt(static_cast<float>(in.s.head_dim)),
                  {},
                  0.0f,
                  !in.sinks.empty()};
}

// The rows of tokens [t0, t1) and heads [h0, h1) (one KV head's), each token at its own position t, seeing
// `window` positions (0: all), writing into out [n_kv, n_head, head_dim].
inline std::vector<AttnRow> rows_of(const Inputs& in, int t0, int t1, int h0, int h1, int window,
                                    std::vector<float>& out) {
    std::vector<AttnRow> rows;
    for (int t = t0; t < t1; ++t)
        for (int h = h0; h < h1; ++h) {
            const size_t off = (static_cast<size_t>(t) * in.s.n_head + h) * in.s.head_dim;
            rows.push_back({in.q.data() + off, out.data() + off, window > 0 && t >= window ? t - window + 1 : 0, t,
                            in.sinks.empty() ? -INFINITY : in.sinks[static_cast<size_t>(h)]});
        }
    return rows;
}

// Every row of tokens [t0, t1) through attend_rows, `tile` tokens and all the heads of a KV head per call
// (at most kMaxTileRows rows).
inline std::vector<float> attend_tokens(const Inputs& in, KvType type, const KvOps& ops, int t0, int t1, int tile,
                                        int window) {
    const int group = in.s.n_head / in.s.n_head_kv;
    std::vector<float> out(in.q.size(), NAN);
    std::vector<float> scratch(attend_scratch_floats(in.n_kv));
    for (int g = 0; g < in.s.n_head_kv; ++g)
        for (int t = t0; t < t1; t += tile)
            for (int h = g * group; h < (g + 1) * group; h += kMaxTileRows / tile) {
                const std::vector<AttnRow> rows =
                    rows_of(in, t, std::min(t + tile, t1), h, std::min(h + kMaxTileRows / tile, (g + 1) * group),
                            window, out);
                attend_rows(rows.data(), static_cast<int>(rows.size()), kv_head(in, type, g), ops, scratch.data());
            }
    return out;
}

inline std::vector<float> slice(const std::vector<float>& v, const Inputs& in, int t0, int t1) {
    const size_t w = static_cast<size_t>(in.s.n_head) * in.s.head_dim;
    return std::vector<float>(v.begin() + t0 * w, v.begin() + t1 * w);
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The rows through the split form (attention.h), phase by phase, the scores' blocks in reverse order (any order
// within a phase gives the same bits).
inline void attend_split_all(const std::vector<AttnRow>& rows, const KvHead& head, const KvOps& ops) {
    const int n = static_cast<int>(rows.size());
    int b_first = 0;
    const int n_blocks = attend_block_span(rows.data(), n, &b_first);
    std::vector<float> scores(attend_score_floats(rows.data(), n, ops) + 8);
    float* sc = scores.data() + (8 - reinterpret_cast<uintptr_t>(scores.data()) / 4 % 8) % 8;
    std::vector<float> parts(static_cast<size_t>(n_blocks) * n * head.head_dim);
    for (int i = n_blocks - 1; i >= 0; --i) attend_split_scores(rows.data(), n, head, ops, b_first + i, sc);
    attend_split_softmax(rows.data(), n, head, ops, sc);
    for (int i = 0; i < n_blocks; ++i)
        attend_split_mix(rows.data(), n, head, ops, b_first + i, sc,
                         parts.data() + static_cast<size_t>(i) * n * head.head_dim);
    attend_split_sum(rows.data(), n, head.head_dim, parts.data(), n_blocks);
}

// The tiled kernels of this machine's ISAs, without repeats (AVX-512 machines run the AVX2 attention; the generic
// ISA runs the plain attention itself).
inline std::vector<const KvOps*> tiled_kv_ops() {
    std::vector<const KvOps*> v;
    for (Isa isa : test::available_isas()) {
        const KvOps* ops = &kv_ops(isa, false);
        if (ops->tile_f16 && std::find(v.begin(), v.end(), ops) == v.end()) v.push_back(ops);
    }
    return v;
}

}  // namespace quill::test::attention
