// The activations' int8 form on AVX-512, sixteen blocks at a time: the same bytes and floats as the generic
// quantizer.
#include "engine/cpu/x86/avx512/common.h"

#ifdef QUILL_AVX512_BUILT

namespace quill::cpu::QUILL_AVX512_NS {

namespace {

// Index vectors for folding pairs of vectors that each hold 16 / P blocks of P partial maxima (block j's in lanes
// [j * P, (j + 1) * P)) into one vector of twice the blocks with half the partials, blocks in order: lo gathers each
// block's first P / 2 partials (the first vector's blocks, then the second's), hi the other P / 2.
struct FoldIndex {
    __m512i lo[4], hi[4];  // for P = 16, 8, 4, 2
    FoldIndex() {
        for (int s = 0; s < 4; ++s) {
            const int p = 16 >> s;
            alignas(64) int32_t l[16], h[16];
            for (int lane = 0; lane < 16; ++lane) {
                const int j = lane % 8 / (p / 2), k = lane % 8 % (p / 2);
                l[lane] = (lane >= 8 ? 16 : 0) + j * p + k;
                h[lane] = l[lane] + p / 2;
            }
            lo[s] = _mm512_load_si512(l);
            hi[s] = _mm512_load_si512(h);
        }
    }
};

// Lane i: the largest lane of m[i] (max is exact, so the folding order does not matter).
inline __m512 lane_max16(__m512* m, const FoldIndex& f) {
    for (int s = 0, n = 16; s < 4; ++s, n /= 2)
        for (int i = 0; i < n / 2; ++i)
            m[i] = _mm512_max_ps(_mm512_permutex2var_ps(m[2 * i], f.lo[s], m[2 * i + 1]),
                                 _mm512_permutex2var_ps(m[2 * i], f.hi[s], m[2 * i + 1]));
    return m[0];
}

// generic::quantize_block's q for sixteen values: x * inv clamped to -127..127 (NaN to 0), rounded half away from
// zero (truncate, then a step away from zero when the rest is at least 1/2), as int32 (|y| <= 127: all exact).
inline __m512i quantize16(__m512 x, __m512 inv) {
    const __m512 raw = _mm512_mul_ps(x, inv);
    const __m512 y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(raw, raw, _CMP_ORD_Q),
                                         _mm512_min_ps(_mm512_max_ps(raw, _mm512_set1_ps(-127.0f)),
                                                       _mm512_set1_ps(127.0f)));
    const __m512i ti = _mm512_cvttps_epi32(y);
    const __m512 rest = _mm512_abs_ps(_mm512_sub_ps(y, _mm512_cvtepi32_ps(ti)));
    const __mmask16 up = _mm512_cmp_ps_mask(rest, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __mmask16 neg = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_add_epi32(ti, up, ti, _mm512_mask_blend_epi32(neg, _mm512_set1_epi32(1), _mm512_set1_epi32(-1)));
}

// Blocks [b0, b0 + n) of token t's row xr (n <= 16), as quantize_activations writes them.
inline void quantize_group(const float* xr, int64_t t, int64_t b0, int n, const QuantizedActs& out,
                           const FoldIndex& fold) {
    __m512 m[16];
    for (int i = 0; i < 16; ++i) {
        m[i] = i < n ? _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xr + 32 * (b0 + i))),
                                     _mm512_abs_ps(_mm512_loadu_ps(xr + 32 * (b0 + i) + 16)))
                     : _mm512_setzero_ps();
    }
    const __m512 d = _mm512_div_ps(lane_max16(m, fold), _mm512_set1_ps(127.0f));
    const __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ),
                                           _mm512_set1_ps(1.0f), d);
    // The scale kept is rounded to fp16 (to nearest even, as fp32_to_fp16).
    const __m512 scale = _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    alignas(64) float inv_l[16];
    _mm512_store_ps(inv_l, inv);
    // h16[k] lane 2j + h: half h of block 8k + j as the sum of its q + 128 (vpsadbw), less 16 * 128 at the end.
    __m512i h16[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    const __m512i from_halves = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const bool rows = out.qs != nullptr;  // else the tile layout alone
    int8_t* qr = rows ? out.qs + t * out.qs_stride + 32 * b0 : nullptr;
    uint8_t* ur = rows && out.qs_u != nullptr ? out.qs_u + t * out.qs_stride + 32 * b0 : nullptr;
    for (int i = 0; i < n; ++i) {
        const float* xb = xr + 32 * (b0 + i);
        const __m512 vi = _mm512_set1_ps(inv_l[i]);
        const __m256i q = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm512_cvtsepi32_epi8(quantize16(_mm512_loadu_ps(xb), vi))),
            _mm512_cvtsepi32_epi8(quantize16(_mm512_loadu_ps(xb + 16), vi)), 1);
        const __m256i u = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
        if (rows) _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + 32 * i), q);
        if (ur != nullptr) _mm256_storeu_si256(reinterpret_cast<__m256i*>(ur + 32 * i), u);
        if (out.tile_qs != nullptr)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.tile_qs + 32 * tile_entry(out, t, b0 + i)), q);
        // The sums of the four 8-byte runs, added in pairs: dword 0 holds half 0, dword 4 half 1.
        const __m256i runs = _mm256_sad_epu8(u, _mm256_setzero_si256());
        const __m512i halves = _mm512_castsi256_si512(
            _mm256_add_epi64(runs, _mm256_shuffle_epi32(runs, _MM_PERM_BADC)));
        const auto lanes = static_cast<__mmask16>(3u << (2 * (i % 8)));
        if (i < 8) {
            h16[0] = _mm512_mask_permutexvar_epi32(h16[0], lanes, from_halves, halves);
        } else {
            h16[1] = _mm512_mask_permutexvar_epi32(h16[1], lanes, from_halves, halves);
        }
    }
    for (__m512i& h : h16) h = _mm512_sub_epi32(h, _mm512_set1_epi32(16 * 128));
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i isum = _mm512_add_epi32(_mm512_permutex2var_epi32(h16[0], even, h16[1]),
                                          _mm512_permutex2var_epi32(h16[0], _mm512_add_epi32(even, _mm512_set1_epi32(1)),
                                                                    h16[1]));
    const __m512 ds = _mm512_mul_ps(scale, _mm512_cvtepi32_ps(isum));
    const __m512i pair = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512 ds16_lo = _mm512_mul_ps(_mm512_permutexvar_ps(pair, scale), _mm512_cvtepi32_ps(h16[0]));
    const __m512 ds16_hi = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_add_epi32(pair, _mm512_set1_epi32(8)), scale),
                                         _mm512_cvtepi32_ps(h16[1]));
    if (rows) {
        const auto mask = static_cast<__mmask16>((1u << n) - 1);
        const int64_t at = t * out.blk_stride + b0;
        _mm512_mask_storeu_ps(out.d + at, mask, scale);
        _mm512_mask_storeu_ps(out.ds + at, mask, ds);
        _mm512_mask_storeu_epi32(out.isum + at, mask, isum);
        _mm512_mask_storeu_ps(out.ds16 + 2 * at, static_cast<__mmask16>((1u << min64(2 * n, 16)) - 1), ds16_lo);
        if (n > 8)
            _mm512_mask_storeu_ps(out.ds16 + 2 * at + 16, static_cast<__mmask16>((1u << (2 * n - 16)) - 1), ds16_hi);
    }
    if (out.tile_qs != nullptr) {
        alignas(64) float sl[16], dsl[16];
        alignas(64) int32_t il[16];
        _mm512_store_ps(sl, scale);
        _mm512_store_ps(dsl, ds);
        _mm512_store_si512(il, isum);
        write_tile_scales(out, t, b0, n, sl, dsl, il);
    }
}

}  // namespace

bool quantize_blocks(const float* x, int64_t n_in, int64_t t0, int64_t t1, int64_t b0, int64_t b1,
                     const QuantizedActs& out) {
    const FoldIndex fold;
    for (int64_t t = t0; t < t1; ++t) {
        const float* xr = x + t * n_in;
        for (int64_t b = b0; b < b1; b += 16) quantize_group(xr, t, b, static_cast<int>(min64(16, b1 - b)), out, fold);
    }
    return true;
}

bool quantize_rows(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out) {
    return quantize_rows_by_blocks(quantize_blocks, x, n_in, t0, t1, out);
}

}  // namespace quill::cpu::QUILL_AVX512_NS

#endif
