#include "engine/cpu/attention.h"

#include "engine/cpu/x86/kv_ops.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace quill::cpu {

namespace {

float widen(uint16_t h) { return fp16_to_fp32(h); }
float widen(float f) { return f; }

template <class T>
void scores_plain(const T* k, size_t block_stride, const float* q, int head_dim, int j0, int n_kv, float* scores) {
    for (int j = j0; j < j0 + n_kv; ++j) {
        const T* kj = k + static_cast<size_t>(j / 8) * block_stride + j % 8;  // element i at kj[8 * i]
        float s = 0.0f;
        for (int i = 0; i < head_dim; ++i) s += widen(kj[8 * i]) * q[i];
        scores[j - j0] = s;
    }
}

template <class T>
void mix_plain(const float* p, const T* v, size_t stride, int head_dim, int n_kv, float* out) {
    std::fill(out, out + head_dim, 0.0f);
    for (int j = 0; j < n_kv; ++j)
        for (int i = 0; i < head_dim; ++i) out[i] += p[j] * widen(v[j * stride + i]);
}

void round_f16_plain(float* x, int n) {
    for (int i = 0; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

void to_f16_plain(const float* x, uint16_t* y, int n) {
    for (int i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void swiglu_plain(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void geglu_plain(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = 0.5f * g * (1.0f + std::tanh(0.7978845608028654f * (g + 0.044715f * g * g * g))) * up[i];
    }
}

// The sum of x[i]^2 in double (each square exact), in eight chains (element i in chain i % 8) summed pairwise at the
// end: one chain of d dependent additions made a row's norm take longer than its share of a 16-token matmul. The
// vector builds (engine/cpu/x86/kv_ops_impl.h) keep the chains in lanes.
double sum_squares(const float* x, int64_t d) {
    double c[8] = {};
    int64_t i = 0;
    for (; i + 8 <= d; i += 8)
        for (int j = 0; j < 8; ++j) c[j] += static_cast<double>(x[i + j]) * x[i + j];
    for (int j = 0; i < d; ++i, ++j) c[j] += static_cast<double>(x[i]) * x[i];
    return ((c[0] + c[4]) + (c[2] + c[6])) + ((c[1] + c[5]) + (c[3] + c[7]));
}

void rms_norm_plain(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps) {
    for (int64_t t = 0; t < n; ++t) {
        const float* xr = x + t * d;
        const float scale = static_cast<float>(1.0 / std::sqrt(sum_squares(xr, d) / static_cast<double>(d) + eps));
        float* yr = y + t * d;
        for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * scale * w[i];
    }
}

bool add_norm_plain(float* x, const float* p, const float* w, float* y, int64_t n, int64_t d, float eps) {
    bool finite = true;
    for (int64_t i = 0; i < n * d; ++i) {
        x[i] += p[i];
        finite = finite && std::isfinite(x[i]);
    }
    if (w != nullptr) rms_norm_plain(x, w, y, n, d, eps);
    return finite;
}

constexpr KvOps kPlain{scores_plain<uint16_t>,
                       scores_plain<float>,
                       mix_plain<uint16_t>,
                       mix_plain<float>,
                       round_f16_plain,
                       to_f16_plain,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr,
                       swiglu_plain,
                       geglu_plain,
                       rms_norm_plain,
                       add_norm_plain};
// The AVX2 set: the tiled kernel does the work; the per-row primitives serve only head sizes it does not take.
constexpr KvOps kAvx2{scores_plain<uint16_t>,
                      scores_plain<float>,
                      avx2::mix_f16,
                      avx2::mix_f32,
                      avx2::round_f16,
                      avx2::to_f16,
                      avx2::tile_f16,
                      avx2::tile_f32,
                      avx2::tile_score_floats,
                      avx2::tile_scores_f16,
                      avx2::tile_scores_f32,
                      avx2::tile_softmax,
                      avx2::tile_mix_f16,
                      avx2::tile_mix_f32,
                      avx2::swiglu,
                      avx2::geglu,
                      avx2::rms_norm,
                      avx2::add_norm};

// The same primitives built with AVX-512 (engine/cpu/x86/avx512/kv_ops.cpp): the same results, some loops sixteen lanes wide.
constexpr KvOps kAvx512{scores_plain<uint16_t>,
                        scores_plain<float>,
                        avx512kv::mix_f16,
                        avx512kv::mix_f32,
                        avx512kv::round_f16,
                        avx512kv::to_f16,
                        avx512kv::tile_f16,
                        avx512kv::tile_f32,
                        avx512kv::tile_score_floats,
                        avx512kv::tile_scores_f16,
                        avx512kv::tile_scores_f32,
                        avx512kv::tile_softmax,
                        avx512kv::tile_mix_f16,
                        avx512kv::tile_mix_f32,
                        avx512kv::swiglu,
                        avx512kv::geglu,
                        avx512kv::rms_norm,
                        avx512kv::add_norm};

// One row over its whole range [first, last] at once: scores, softmax, mix (the path without a tiled kernel).
void attend_row_plain(const AttnRow& row, const KvHead& kv, const KvOps& ops, float* scores) {
    const bool f16 = kv.type == KvType::f16;
    const int n_kv = row.last + 1 - row.first;
    const size_t off = static_cast<size_t>(row.first) * kv.v_stride;
    float q16[kMaxHeadDim];
    std::copy_n(row.q, kv.head_dim, q16);
    // scores[j] = q . k_j * scale
    if (f16) {
        ops.round_f16(q16, kv.head_dim);
        ops.scores_f16(static_cast<const uint16_t*>(kv.k), kv.k_block_stride, q16, kv.head_dim, row.first, n_kv,
                       scores);
    } else {
        ops.scores_f32(static_cast<const float*>(kv.k), kv.k_block_stride, q16, kv.head_dim, row.first, n_kv,
                       scores);
    }
    // p = softmax(scores), shifted by the max so exp never overflows; a sink joins the max and the denominator
    float max_score = kv.sinks ? row.sink : -INFINITY;
    for (int j = 0; j < n_kv; ++j) {
        scores[j] *= kv.scale;
        if (kv.softcap > 0.0f) softcap_scores(scores + j, 1, kv.softcap);
        max_score = std::max(max_score, scores[j]);
    }
    float sum = kv.sinks ? std::exp(row.sink - max_score) : 0.0f;
    for (int j = 0; j < n_kv; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        sum += scores[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < n_kv; ++j) scores[j] *= inv;
    // out = sum_j p_j v_j
    if (f16) {
        ops.round_f16(scores, n_kv);
        ops.mix_f16(scores, static_cast<const uint16_t*>(kv.v) + off, kv.v_stride, kv.head_dim, n_kv, row.out);
    } else {
        ops.mix_f32(scores, static_cast<const float*>(kv.v) + off, kv.v_stride, kv.head_dim, n_kv, row.out);
    }
}

}  // namespace

const KvOps& kv_ops(Isa isa, bool reference) {
    if (reference || isa == Isa::generic) return kPlain;
    // (where the AVX-512 kernels are SIMDe's emulation, the CPU lacks AVX-512)
    if (isa >= Isa::avx512 && isa_available(Isa::avx512) && !avx512_emulated()) return kAvx512;
    return kAvx2;
}

size_t attend_scratch_floats(int n_ctx) { return static_cast<size_t>(n_ctx); }

void softcap_scores(float* s, size_t n, float cap) {
    for (size_t i = 0; i < n; ++i) s[i] = cap * std::tanh(s[i] / cap);
}

namespace {

// The rows' fields as the kernels take them.
struct RowArrays {
    const float* q[kMaxTileRows];
    float* out[kMaxTileRows];
    int first[kMaxTileRows], last[kMaxTileRows];
    float sink[kMaxTileRows];

    RowArrays(const AttnRow* rows, int n) {
        for (int r = 0; r < n; ++r) {
            sink[r] = rows[r].sink;
            q[r] = rows[r].q;
            out[r] = rows[r].out;
            first[r] = rows[r].first;
            last[r] = rows[r].last;
        }
    }
};

}  // namespace

std::pair<int, int> visible_span(const AttnRow* rows, int n) {
    int first = rows[0].first, last = rows[0].last;
    for (int r = 1; r < n; ++r) {
        first = std::min(first, rows[r].first);
        last = std::max(last, rows[r].last);
    }
    return {first, last};
}

namespace {

}  // namespace

bool attend_tiled(const KvOps& ops, const KvHead& kv) {
    return (kv.type == KvType::f16 ? ops.tile_f16 != nullptr : ops.tile_f32 != nullptr) && kv.head_dim % 8 == 0;
}

int attend_block_span(const AttnRow* rows, int n, int* b_first) {
    const auto [first, last] = visible_span(rows, n);
    *b_first = first / kKeyBlock;
    return last / kKeyBlock - *b_first + 1;
}

size_t attend_score_floats(const AttnRow* rows, int n, const KvOps& ops) {
    const RowArrays a(rows, n);
    return ops.tile_score_floats(a.first, a.last, n);
}

void attend_split_scores(const AttnRow* rows, int n, const KvHead& kv, const KvOps& ops, int b, float* s) {
    const RowArrays a(rows, n);
    const void* k = (b + 1) * kKeyBlock <= kv.share.positions ? kv.share.k : kv.k;
    if (kv.type == KvType::f16)
        ops.tile_scores_f16(a.q, a.first, a.last, n, static_cast<const uint16_t*>(k), kv.k_block_stride, kv.head_dim,
                            kv.scale, b, s);
    else
        ops.tile_scores_f32(a.q, a.first, a.last, n, static_cast<const float*>(k), kv.k_block_stride, kv.head_dim,
                            kv.scale, b, s);
}

void attend_split_softmax(const AttnRow* rows, int n, const KvHead& kv, const KvOps& ops, float* s) {
    const RowArrays a(rows, n);
    if (kv.softcap > 0.0f) softcap_scores(s, ops.tile_score_floats(a.first, a.last, n), kv.softcap);
    ops.tile_softmax(a.first, a.last, n, kv.type == KvType::f16, kv.sinks ? a.sink : nullptr, s);
}

void attend_split_mix(const AttnRow* rows, int n, const KvHead& kv, const KvOps& ops, int b, const float* s,
                      float* part) {
    const RowArrays a(rows, n);
    float* o[kMaxTileRows];
    for (int r = 0; r < n; ++r) o[r] = part + static_cast<size_t>(r) * kv.head_dim;
    const void* v = (b + 1) * kKeyBlock <= kv.share.positions ? kv.share.v : kv.v;
    if (kv.type == KvType::f16)
        ops.tile_mix_f16(a.first, a.last, n, static_cast<const uint16_t*>(v), kv.v_stride, kv.head_dim, b, s, o);
    else
        ops.tile_mix_f32(a.first, a.last, n, static_cast<const float*>(v), kv.v_stride, kv.head_dim, b, s, o);
}

void attend_split_sum(const AttnRow* rows, int n, int head_dim, const float* parts, int n_blocks) {
    for (int r = 0; r < n; ++r) {
        float* out = rows[r].out;
        std::fill(out, out + head_dim, 0.0f);
        for (int b = 0; b < n_blocks; ++b) {
            const float* p = parts + (static_cast<size_t>(b) * n + r) * head_dim;
            for (int i = 0; i < head_dim; ++i) out[i] = out[i] + p[i];
        }
    }
}

void attend_rows(const AttnRow* rows, int n, const KvHead& kv, const KvOps& ops, float* scratch, KvPrefetch* ahead) {
    const bool f16 = kv.type == KvType::f16;
    if (!attend_tiled(ops, kv)) {
        for (int r = 0; r < n; ++r) attend_row_plain(rows[r], kv, ops, scratch);
        return;
    }
    const RowArrays a(rows, n);
    const float* sinks = kv.sinks ? a.sink : nullptr;
    if (f16)
        ops.tile_f16(a.q, a.first, a.last, n, static_cast<const uint16_t*>(kv.k), kv.k_block_stride,
                     static_cast<const uint16_t*>(kv.v), kv.v_stride, kv.head_dim, kv.scale, kv.softcap, sinks, a.out,
                     kv.share, ahead);
    else
        ops.tile_f32(a.q, a.first, a.last, n, static_cast<const float*>(kv.k), kv.k_block_stride,
                     static_cast<const float*>(kv.v), kv.v_stride, kv.head_dim, kv.scale, kv.softcap, sinks, a.out,
                     kv.share, ahead);
}

}  // namespace quill::cpu
