#include "engine/cpu/attention.h"

#include "engine/cpu/kv_ops_avx2.h"

#include <algorithm>
#include <cmath>

namespace quill::cpu {

namespace {

float widen(uint16_t h) { return fp16_to_fp32(h); }
float widen(float f) { return f; }

template <class T>
void scores_plain(const T* k, size_t stride, const float* q, int head_dim, int n_kv, float* scores) {
    for (int j = 0; j < n_kv; ++j) {
        float s = 0.0f;
        for (int i = 0; i < head_dim; ++i) s += widen(k[j * stride + i]) * q[i];
        scores[j] = s;
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

constexpr KvOps kPlain{scores_plain<uint16_t>, scores_plain<float>, mix_plain<uint16_t>, mix_plain<float>,
                       round_f16_plain,        to_f16_plain,        nullptr,            nullptr,
                       swiglu_plain,           geglu_plain};
constexpr KvOps kAvx2{avx2::scores_f16,       avx2::scores_f32,       avx2::mix_f16, avx2::mix_f32, avx2::round_f16,
                      avx2::to_f16,           avx2::attend_heads_f16, avx2::attend_heads_f32, avx2::swiglu,
                      avx2::geglu};

}  // namespace

const KvOps& kv_ops(Isa isa, bool reference) {
    if (reference || isa == Isa::generic) return kPlain;
    return kAvx2;  // AVX-512 machines run the AVX2 primitives: head_dim rows are short
}

void attend(const AttentionArgs& a, const KvOps& ops, int head_begin, int head_end, float* scores, float* out) {
    const int group = a.n_head / a.n_head_kv;  // query heads per KV head
    const size_t stride = static_cast<size_t>(a.n_head_kv) * a.head_dim;
    const bool f16 = a.kv_type == KvType::f16;
    if ((f16 ? ops.attend_heads_f16 != nullptr : ops.attend_heads_f32 != nullptr) && a.head_dim % 8 == 0) {
        // Runs of heads that share a KV head, at most kMaxGroupHeads at a time.
        for (int h0 = head_begin; h0 < head_end;) {
            const int kv_head = h0 / group;
            int h1 = h0 + 1;
            while (h1 < head_end && h1 / group == kv_head && h1 - h0 < kMaxGroupHeads) ++h1;
            const float* q[kMaxGroupHeads];
            float* o[kMaxGroupHeads];
            for (int h = h0; h < h1; ++h) {
                q[h - h0] = a.q + static_cast<size_t>(h) * a.head_dim;
                o[h - h0] = out + static_cast<size_t>(h) * a.head_dim;
            }
            const size_t kv_off = static_cast<size_t>(kv_head) * a.head_dim;
            if (f16)
                ops.attend_heads_f16(q, h1 - h0, static_cast<const uint16_t*>(a.k) + kv_off,
                                     static_cast<const uint16_t*>(a.v) + kv_off, stride, a.head_dim, a.n_kv, a.scale,
                                     scores, o);
            else
                ops.attend_heads_f32(q, h1 - h0, static_cast<const float*>(a.k) + kv_off,
                                     static_cast<const float*>(a.v) + kv_off, stride, a.head_dim, a.n_kv, a.scale,
                                     scores, o);
            h0 = h1;
        }
        return;
    }
    float q16[kMaxHeadDim];
    for (int h = head_begin; h < head_end; ++h) {
        const size_t kv_off = static_cast<size_t>(h / group) * a.head_dim;
        std::copy_n(a.q + static_cast<size_t>(h) * a.head_dim, a.head_dim, q16);
        // scores[j] = q . k_j * scale
        if (f16) {
            ops.round_f16(q16, a.head_dim);
            ops.scores_f16(static_cast<const uint16_t*>(a.k) + kv_off, stride, q16, a.head_dim, a.n_kv, scores);
        } else {
            ops.scores_f32(static_cast<const float*>(a.k) + kv_off, stride, q16, a.head_dim, a.n_kv, scores);
        }
        // p = softmax(scores), shifted by the max so exp never overflows
        float max_score = -INFINITY;
        for (int j = 0; j < a.n_kv; ++j) {
            scores[j] *= a.scale;
            max_score = std::max(max_score, scores[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j < a.n_kv; ++j) {
            scores[j] = std::exp(scores[j] - max_score);
            sum += scores[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < a.n_kv; ++j) scores[j] *= inv;
        // out_h = sum_j p_j v_j
        float* oh = out + static_cast<size_t>(h) * a.head_dim;
        if (f16) {
            ops.round_f16(scores, a.n_kv);
            ops.mix_f16(scores, static_cast<const uint16_t*>(a.v) + kv_off, stride, a.head_dim, a.n_kv, oh);
        } else {
            ops.mix_f32(scores, static_cast<const float*>(a.v) + kv_off, stride, a.head_dim, a.n_kv, oh);
        }
    }
}

}  // namespace quill::cpu
