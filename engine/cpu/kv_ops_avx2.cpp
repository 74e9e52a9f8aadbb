#include "engine/cpu/kv_ops_avx2.h"

#include "engine/format/quant.h"

#include <immintrin.h>

namespace quill::cpu::avx2 {

namespace {

float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
__m256 load8(const float* p) { return _mm256_loadu_ps(p); }
float load1(const uint16_t* p) { return fp16_to_fp32(*p); }
float load1(const float* p) { return *p; }

template <class T>
void scores(const T* k, size_t stride, const float* q, int head_dim, int n_kv, float* out) {
    for (int j = 0; j < n_kv; ++j) {
        const T* kj = k + j * stride;  // [head_dim]
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        int i = 0;
        for (; i + 16 <= head_dim; i += 16) {
            acc0 = _mm256_fmadd_ps(load8(kj + i), _mm256_loadu_ps(q + i), acc0);
            acc1 = _mm256_fmadd_ps(load8(kj + i + 8), _mm256_loadu_ps(q + i + 8), acc1);
        }
        for (; i + 8 <= head_dim; i += 8) acc0 = _mm256_fmadd_ps(load8(kj + i), _mm256_loadu_ps(q + i), acc0);
        float s = hsum(_mm256_add_ps(acc0, acc1));
        for (; i < head_dim; ++i) s += load1(kj + i) * q[i];
        out[j] = s;
    }
}

// out = sum_j p[j] v_j, 32 columns at a time so the accumulators stay in registers across all positions.
template <class T>
void mix(const float* p, const T* v, size_t stride, int head_dim, int n_kv, float* out) {
    int i0 = 0;
    for (; i0 + 8 <= head_dim; i0 += 32) {
        const int nvec = head_dim - i0 >= 32 ? 4 : (head_dim - i0) / 8;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int j = 0; j < n_kv; ++j) {
            const __m256 pj = _mm256_set1_ps(p[j]);
            const T* vj = v + j * stride + i0;
            for (int c = 0; c < nvec; ++c) acc[c] = _mm256_fmadd_ps(pj, load8(vj + 8 * c), acc[c]);
        }
        for (int c = 0; c < nvec; ++c) _mm256_storeu_ps(out + i0 + 8 * c, acc[c]);
        if (nvec < 4) {
            i0 += 8 * nvec;
            break;
        }
    }
    for (int i = i0; i < head_dim; ++i) {
        float s = 0.0f;
        for (int j = 0; j < n_kv; ++j) s += p[j] * load1(v + j * stride + i);
        out[i] = s;
    }
}

}  // namespace

void scores_f16(const uint16_t* k, size_t stride, const float* q, int head_dim, int n_kv, float* s) {
    scores(k, stride, q, head_dim, n_kv, s);
}
void scores_f32(const float* k, size_t stride, const float* q, int head_dim, int n_kv, float* s) {
    scores(k, stride, q, head_dim, n_kv, s);
}
void mix_f16(const float* p, const uint16_t* v, size_t stride, int head_dim, int n_kv, float* out) {
    mix(p, v, stride, head_dim, n_kv, out);
}
void mix_f32(const float* p, const float* v, size_t stride, int head_dim, int n_kv, float* out) {
    mix(p, v, stride, head_dim, n_kv, out);
}

void round_f16(float* x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

void to_f16(const float* x, uint16_t* y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

}  // namespace quill::cpu::avx2
