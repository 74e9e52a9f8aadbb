#include "engine/cpu/kv_ops_avx2.h"

#include "engine/format/quant.h"

#include <immintrin.h>

#include <cmath>

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

// e^x for 8 floats, within 2 ulp of expf for x in [-87, 88] (x below gives e^-87, NaN stays NaN): x = n ln2 + r
// with |r| <= ln2 / 2, e^r by the minimax polynomial of Cephes' expf, times 2^n through the exponent bits.
__m256 exp8(__m256 x) {
    // max/min return their second operand when one is NaN: x second keeps a NaN.
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Eight vectors' horizontal sums as one vector: lane k = the sum of a[k]'s lanes, ((0+1)+(2+3))+((4+5)+(6+7)),
// the same operations for every k.
__m256 hsum8(const __m256* a) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    // u0 = [a0 a1 a2 a3 (lanes 0-3 sums) | a0 a1 a2 a3 (lanes 4-7 sums)], u1 likewise for a4..a7
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

constexpr int kMaxDim = 512;

// scores[g][j] = (q[g] . k_j) * scale: per key and head one fma chain over the row (8 elements a step), then
// eight keys' chains reduced together by hsum8. The G heads share each converted K vector, and KP keys go side by
// side so that enough chains are in flight (interleaving changes no chain).
template <int G, class T>
void group_scores(const float (*q)[kMaxDim], const T* k, size_t stride, int hd, int n_kv, float scale,
                  float* scores, int n_kv_stride) {
    constexpr int KP = G == 1 ? 4 : G <= 3 ? 2 : 1;
    alignas(32) __m256 part[G][8];
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int j0 = 0; j0 < n_kv; j0 += 8) {
        const int nk = n_kv - j0 < 8 ? n_kv - j0 : 8;
        for (int kk = 0; kk < 8; kk += KP) {
            __m256 acc[KP][G];
            for (int x = 0; x < KP; ++x)
                for (int g = 0; g < G; ++g) acc[x][g] = _mm256_setzero_ps();
            const T* kj[KP];
            for (int x = 0; x < KP; ++x)  // a key past the end reads row j0 (in range) and is never stored
                kj[x] = k + static_cast<size_t>(kk + x < nk ? j0 + kk + x : j0) * stride;
            for (int i = 0; i < hd; i += 8) {
                for (int x = 0; x < KP; ++x) {
                    const __m256 kv = load8(kj[x] + i);
                    for (int g = 0; g < G; ++g) acc[x][g] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q[g] + i), acc[x][g]);
                }
            }
            for (int x = 0; x < KP; ++x)
                for (int g = 0; g < G; ++g) part[g][kk + x] = kk + x < nk ? acc[x][g] : _mm256_setzero_ps();
        }
        for (int g = 0; g < G; ++g) {
            const __m256 sc = _mm256_mul_ps(hsum8(part[g]), vscale);
            float* dst = scores + static_cast<size_t>(g) * n_kv_stride + j0;
            if (nk == 8) {
                _mm256_storeu_ps(dst, sc);
            } else {
                alignas(32) float tmp[8];
                _mm256_store_ps(tmp, sc);
                for (int kk = 0; kk < nk; ++kk) dst[kk] = tmp[kk];
            }
        }
    }
}

// p = softmax(s) in place over n values (the max subtracted first), rounded to fp16 when `round`.
void softmax(float* s, int n, bool round) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float mx = lanes[0];
    for (int i = 1; i < 8; ++i) mx = mx > lanes[i] ? mx : lanes[i];
    for (int i = j; i < n; ++i) mx = mx > s[i] ? mx : s[i];
    const __m256 m = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
        _mm256_storeu_ps(s + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    if (j < n) {  // the tail through the same exp8 (lane by lane), the padding left out of the sum
        alignas(32) float t[8];
        for (int i = 0; i < 8; ++i) t[i] = j + i < n ? s[j + i] - mx : 0.0f;
        _mm256_store_ps(t, exp8(_mm256_load_ps(t)));
        alignas(32) float keep[8];
        for (int i = 0; i < 8; ++i) keep[i] = j + i < n ? t[i] : 0.0f;
        for (int i = 0; j + i < n; ++i) s[j + i] = t[i];
        vsum = _mm256_add_ps(vsum, _mm256_load_ps(keep));
    }
    const __m256 inv = _mm256_set1_ps(1.0f / hsum(vsum));
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(s + j), inv);
        if (round) p = _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_ps(s + j, p);
    }
    for (; j < n; ++j) {
        const float p = s[j] * _mm256_cvtss_f32(inv);
        s[j] = round ? fp16_to_fp32(fp32_to_fp16(p)) : p;
    }
}

// out[g][c..c+8V) = sum_j p[g][j] v_j over all positions, V vectors per head; the G heads share each converted V
// vector. Each output element is one fma chain over j in order, whatever V and G are.
template <int G, int V, class T>
void mix_columns(const float* p, int n_kv_stride, const T* v, size_t stride, int c, int n_kv, float* const* out) {
    __m256 acc[G][V];
    for (int g = 0; g < G; ++g)
        for (int x = 0; x < V; ++x) acc[g][x] = _mm256_setzero_ps();
    for (int j = 0; j < n_kv; ++j) {
        const T* vj = v + static_cast<size_t>(j) * stride + c;
        __m256 vv[V];
        for (int x = 0; x < V; ++x) vv[x] = load8(vj + 8 * x);
        for (int g = 0; g < G; ++g) {
            const __m256 pj = _mm256_broadcast_ss(p + static_cast<size_t>(g) * n_kv_stride + j);
            for (int x = 0; x < V; ++x) acc[g][x] = _mm256_fmadd_ps(pj, vv[x], acc[g][x]);
        }
    }
    for (int g = 0; g < G; ++g)
        for (int x = 0; x < V; ++x) _mm256_storeu_ps(out[g] + c + 8 * x, acc[g][x]);
}

// Enough accumulators in flight for one head, few enough for eight to stay in registers.
template <int G, class T>
void group_mix(const float* p, int n_kv_stride, const T* v, size_t stride, int hd, int n_kv, float* const* out) {
    constexpr int V = G == 1 ? 4 : G <= 3 ? 2 : 1;
    int c = 0;
    for (; c + 8 * V <= hd; c += 8 * V) mix_columns<G, V>(p, n_kv_stride, v, stride, c, n_kv, out);
    for (; c < hd; c += 8) mix_columns<G, 1>(p, n_kv_stride, v, stride, c, n_kv, out);
}

template <int G, class T>
void attend_group(const float* const* q, const T* k, const T* v, size_t stride, int hd, int n_kv, float scale,
                  float* scores, float* const* out) {
    constexpr bool f16 = sizeof(T) == 2;
    alignas(32) float qr[G][kMaxDim];
    for (int g = 0; g < G; ++g) {
        for (int i = 0; i < hd; ++i) qr[g][i] = q[g][i];
        if (f16) round_f16(qr[g], hd);
    }
    group_scores<G>(qr, k, stride, hd, n_kv, scale, scores, n_kv);
    for (int g = 0; g < G; ++g) softmax(scores + static_cast<size_t>(g) * n_kv, n_kv, f16);
    group_mix<G>(scores, n_kv, v, stride, hd, n_kv, out);
}

template <class T>
void attend_heads(const float* const* q, int n_q, const T* k, const T* v, size_t stride, int hd, int n_kv,
                  float scale, float* scores, float* const* out) {
    switch (n_q) {
        case 1: return attend_group<1>(q, k, v, stride, hd, n_kv, scale, scores, out);
        case 2: return attend_group<2>(q, k, v, stride, hd, n_kv, scale, scores, out);
        case 3: return attend_group<3>(q, k, v, stride, hd, n_kv, scale, scores, out);
        case 4: return attend_group<4>(q, k, v, stride, hd, n_kv, scale, scores, out);
        case 5: return attend_group<5>(q, k, v, stride, hd, n_kv, scale, scores, out);
        case 6: return attend_group<6>(q, k, v, stride, hd, n_kv, scale, scores, out);
        case 7: return attend_group<7>(q, k, v, stride, hd, n_kv, scale, scores, out);
        default: return attend_group<8>(q, k, v, stride, hd, n_kv, scale, scores, out);
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

void attend_heads_f16(const float* const* q, int n_q, const uint16_t* k, const uint16_t* v, size_t stride,
                      int head_dim, int n_kv, float scale, float* scores, float* const* out) {
    attend_heads(q, n_q, k, v, stride, head_dim, n_kv, scale, scores, out);
}

void attend_heads_f32(const float* const* q, int n_q, const float* k, const float* v, size_t stride, int head_dim,
                      int n_kv, float scale, float* scores, float* const* out) {
    attend_heads(q, n_q, k, v, stride, head_dim, n_kv, scale, scores, out);
}

namespace {

// gate = gate * sigmoid(z(gate)) * up: z(g) = g is SiLU; z(g) = 2 sqrt(2/pi) (g + 0.044715 g^3) is GELU's tanh form
// (0.5 g (1 + tanh(u)) = g sigmoid(2u)).
template <bool kGelu>
__m256 gated8(__m256 g, __m256 u) {
    __m256 z = g;
    if constexpr (kGelu) {
        const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
        z = _mm256_mul_ps(_mm256_set1_ps(1.5957691216057308f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g));
    }
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), z));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

template <bool kGelu>
void gated(float* gate, const float* up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, gated8<kGelu>(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {  // the tail through the same vector operations, lane by lane
        alignas(32) float g[8] = {}, u[8] = {};
        for (int64_t k = i; k < n; ++k) {
            g[k - i] = gate[k];
            u[k - i] = up[k];
        }
        _mm256_store_ps(g, gated8<kGelu>(_mm256_load_ps(g), _mm256_load_ps(u)));
        for (int64_t k = i; k < n; ++k) gate[k] = g[k - i];
    }
}

}  // namespace

void swiglu(float* gate, const float* up, int64_t n) { gated<false>(gate, up, n); }

void geglu(float* gate, const float* up, int64_t n) { gated<true>(gate, up, n); }

void to_f16(const float* x, uint16_t* y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

}  // namespace quill::cpu::avx2
