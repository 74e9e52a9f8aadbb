// The KvOps primitives over rows on AVX2 + F16C (and AVX-512 where built so): the gated activations, the RMS norms
// and the fp16 conversion; the rest of the code of engine/cpu/x86/avx2/kv_ops.cpp and x86/avx512/kv_ops.cpp, after
// kv_ops_impl.h's attention, whose lane helpers (Lanes, exp_lanes) it uses.
#pragma once

#include "engine/cpu/x86/kv_ops_impl.h"

namespace quill::cpu::QUILL_KV_NS {

namespace {

// gate = gate * sigmoid(z(gate)) * up: z(g) = g is SiLU; z(g) = 2 sqrt(2/pi) (g + 0.044715 g^3) is GELU's tanh form
// (0.5 g (1 + tanh(u)) = g sigmoid(2u)). W lanes at a time, each lane the same operations whatever W.
template <int W, bool kGelu>
typename Lanes<W>::V gated_lanes(typename Lanes<W>::V g, typename Lanes<W>::V u) {
    using L = Lanes<W>;
    auto z = g;
    if constexpr (kGelu) {
        const auto g3 = L::mul(L::mul(g, g), g);
        z = L::mul(L::set1(1.5957691216057308f), L::fmadd(L::set1(0.044715f), g3, g));
    }
    const auto e = exp_lanes<W>(L::sub(L::zero(), z));
    return L::mul(L::div(g, L::add(L::set1(1.0f), e)), u);
}

// Sixteen lanes at a time in the AVX-512 build (half the instructions of eight lanes), then eight, then the tail
// through the same eight-lane operations, lane by lane.
template <bool kGelu>
void gated(float* gate, const float* up, int64_t n) {
    int64_t i = 0;
#ifdef __AVX512F__
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(gate + i, gated_lanes<16, kGelu>(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
#endif
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, gated_lanes<8, kGelu>(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        alignas(32) float g[8] = {}, u[8] = {};
        for (int64_t k = i; k < n; ++k) {
            g[k - i] = gate[k];
            u[k - i] = up[k];
        }
        _mm256_store_ps(g, gated_lanes<8, kGelu>(_mm256_load_ps(g), _mm256_load_ps(u)));
        for (int64_t k = i; k < n; ++k) gate[k] = g[k - i];
    }
}

}  // namespace

namespace {

// One row's first pass: x += p where kAdd, each x checked for inf and NaN (false then), and *ss the sum of x[i]^2 in
// double in eight chains, element i in chain i % 8, summed pairwise at the end. A float's square is exact in double,
// so an fma adds it as the plain sum does: attention.cpp's scalar loop, to the bit, in either build.
template <bool kAdd>
bool add_squares(float* x, const float* p, int64_t d, double* ss) {
    alignas(64) double c[8];
    int64_t i = 0;
    bool finite = true;
#ifdef __AVX512F__
    const __m512i exponent = _mm512_set1_epi32(0x7f800000);
    __m512d chains = _mm512_setzero_pd();
    __mmask16 bad = 0;
    for (; i + 16 <= d; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        if constexpr (kAdd) {
            v = _mm512_add_ps(v, _mm512_loadu_ps(p + i));
            _mm512_storeu_ps(x + i, v);
        }
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), exponent), exponent);
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
        chains = _mm512_fmadd_pd(hi, hi, _mm512_fmadd_pd(lo, lo, chains));
    }
    for (; i + 8 <= d; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if constexpr (kAdd) {
            v = _mm256_add_ps(v, _mm256_loadu_ps(p + i));
            _mm256_storeu_ps(x + i, v);
        }
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(_mm512_castps256_ps512(v)), exponent),
                                       exponent) & 0xff;
        const __m512d w = _mm512_cvtps_pd(v);
        chains = _mm512_fmadd_pd(w, w, chains);
    }
    _mm512_store_pd(c, chains);
    finite = bad == 0;
#else
    const __m256i exponent = _mm256_set1_epi32(0x7f800000);
    __m256d lo_chains = _mm256_setzero_pd(), hi_chains = _mm256_setzero_pd();
    __m256i bad = _mm256_setzero_si256();
    for (; i + 8 <= d; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if constexpr (kAdd) {
            v = _mm256_add_ps(v, _mm256_loadu_ps(p + i));
            _mm256_storeu_ps(x + i, v);
        }
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exponent), exponent));
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        lo_chains = _mm256_fmadd_pd(lo, lo, lo_chains);
        hi_chains = _mm256_fmadd_pd(hi, hi, hi_chains);
    }
    _mm256_store_pd(c, lo_chains);
    _mm256_store_pd(c + 4, hi_chains);
    finite = _mm256_testz_si256(bad, bad) != 0;
#endif
    for (int j = 0; i < d; ++i, ++j) {
        if constexpr (kAdd) x[i] += p[i];
        finite = finite && std::isfinite(x[i]);
        c[j] += static_cast<double>(x[i]) * x[i];
    }
    *ss = ((c[0] + c[4]) + (c[2] + c[6])) + ((c[1] + c[5]) + (c[3] + c[7]));
    return finite;
}

// y[i] = x[i] * scale * w[i], in that order (the plain loop's), W lanes at a time from i while W fit in d; returns
// where it stopped.
template <int W>
int64_t scale_lanes(const float* x, float scale, const float* w, float* y, int64_t i, int64_t d) {
    using L = Lanes<W>;
    const auto s = L::set1(scale);
    for (; i + W <= d; i += W) L::storeu(y + i, L::mul(L::mul(L::loadu(x + i), s), L::loadu(w + i)));
    return i;
}

// The same for one row of d: sixteen lanes in the AVX-512 build, then eight, then the rest one at a time.
void scale_row(const float* x, float scale, const float* w, float* y, int64_t d) {
    int64_t i = 0;
#ifdef __AVX512F__
    i = scale_lanes<16>(x, scale, w, y, i, d);
#endif
    i = scale_lanes<8>(x, scale, w, y, i, d);
    for (; i < d; ++i) y[i] = x[i] * scale * w[i];
}

template <bool kAdd>
bool norm_rows(float* x, const float* p, const float* w, float* y, int64_t n, int64_t d, float eps) {
    bool finite = true;
    for (int64_t t = 0; t < n; ++t) {
        float* xr = x + t * d;
        double ss = 0.0;
        if (!add_squares<kAdd>(xr, kAdd ? p + t * d : nullptr, d, &ss)) finite = false;
        if (w != nullptr)
            scale_row(xr, static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps)), w, y + t * d, d);
    }
    return finite;
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps) {
    norm_rows<false>(const_cast<float*>(x), nullptr, w, y, n, d, eps);  // (x only read without the sum)
}

bool add_norm(float* x, const float* p, const float* w, float* y, int64_t n, int64_t d, float eps) {
    return norm_rows<true>(x, p, w, y, n, d, eps);
}

void swiglu(float* gate, const float* up, int64_t n) { gated<false>(gate, up, n); }

void geglu(float* gate, const float* up, int64_t n) { gated<true>(gate, up, n); }

void to_f16(const float* x, uint16_t* y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

}  // namespace quill::cpu::QUILL_KV_NS
