#include "engine/cpu/attention.h"

#include "engine/cpu/kv_ops_avx2.h"

#include <algorithm>
#include <cmath>

namespace quill::cpu {

namespace {

float dot_f16_plain(const uint16_t* k, const float* q, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += fp16_to_fp32(k[i]) * q[i];
    return s;
}

void axpy_f16_plain(float a, const uint16_t* v, float* out, int n) {
    for (int i = 0; i < n; ++i) out[i] += a * fp16_to_fp32(v[i]);
}

float dot_f32_plain(const float* k, const float* q, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += k[i] * q[i];
    return s;
}

void axpy_f32_plain(float a, const float* v, float* out, int n) {
    for (int i = 0; i < n; ++i) out[i] += a * v[i];
}

constexpr KvOps kPlain{dot_f16_plain, axpy_f16_plain, dot_f32_plain, axpy_f32_plain};
constexpr KvOps kAvx2{dot_f16_avx2, axpy_f16_avx2, dot_f32_avx2, axpy_f32_avx2};

}  // namespace

const KvOps& kv_ops(Isa isa, bool reference) {
    if (reference || isa == Isa::generic) return kPlain;
    return kAvx2;  // AVX-512 machines run the AVX2 primitives: head_dim rows are short
}

void attend(const AttentionArgs& a, const KvOps& ops, int head_begin, int head_end, float* scores, float* out) {
    const int group = a.n_head / a.n_head_kv;  // query heads per KV head
    const size_t row = static_cast<size_t>(a.n_head_kv) * a.head_dim;
    const bool f16 = a.kv_type == KvType::f16;
    // With an F16 cache both products take F16 inputs with F32 accumulation, as GPU attention kernels (and the
    // reference implementation) do: q and the probabilities are rounded to F16 before they meet K and V.
    auto round16 = [f16](float x) { return f16 ? fp16_to_fp32(fp32_to_fp16(x)) : x; };
    float q16[kMaxHeadDim];
    for (int h = head_begin; h < head_end; ++h) {
        const float* qh = a.q + static_cast<size_t>(h) * a.head_dim;
        for (int i = 0; i < a.head_dim; ++i) q16[i] = round16(qh[i]);
        const size_t kv_off = static_cast<size_t>(h / group) * a.head_dim;
        // scores[j] = q . k_j * scale
        float max_score = -INFINITY;
        for (int j = 0; j < a.n_kv; ++j) {
            float s = f16 ? ops.dot_f16(static_cast<const uint16_t*>(a.k) + j * row + kv_off, q16, a.head_dim)
                          : ops.dot_f32(static_cast<const float*>(a.k) + j * row + kv_off, q16, a.head_dim);
            scores[j] = s * a.scale;
            max_score = std::max(max_score, scores[j]);
        }
        // softmax, shifted by the max so exp never overflows
        float sum = 0.0f;
        for (int j = 0; j < a.n_kv; ++j) {
            scores[j] = std::exp(scores[j] - max_score);
            sum += scores[j];
        }
        const float inv = 1.0f / sum;
        // out_h = sum_j p_j v_j
        float* oh = out + static_cast<size_t>(h) * a.head_dim;
        std::fill(oh, oh + a.head_dim, 0.0f);
        for (int j = 0; j < a.n_kv; ++j) {
            const float p = round16(scores[j] * inv);
            if (f16)
                ops.axpy_f16(p, static_cast<const uint16_t*>(a.v) + j * row + kv_off, oh, a.head_dim);
            else
                ops.axpy_f32(p, static_cast<const float*>(a.v) + j * row + kv_off, oh, a.head_dim);
        }
    }
}

}  // namespace quill::cpu
