// The activations' int8 form on AVX2, eight blocks at a time (the same bytes and floats as the generic
// quantizer), and its lane layout (QuantizedActs::lanes).
#include "engine/cpu/x86/avx2/common.h"

#ifdef QUILL_AVX2_BUILT

namespace quill::cpu::avx2 {

float quantize_block(const float* x, int8_t* q, int32_t* sums) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int c = 0; c < 4; ++c) {
        v[c] = _mm256_loadu_ps(x + 8 * c);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[c]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127.0f;
    const __m256 inv = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    const __m256 below_half = _mm256_set1_ps(0.49999997f);  // the float just below 1/2
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i iv[4];
    for (int c = 0; c < 4; ++c) {
        // clamped to -127..127 with NaN as 0, as generic::quantize_block (inputs that are not finite, tiny scales)
        const __m256 raw = _mm256_mul_ps(v[c], inv);
        const __m256 y = _mm256_and_ps(_mm256_min_ps(_mm256_max_ps(raw, lo), hi), _mm256_cmp_ps(raw, raw, _CMP_ORD_Q));
        // round half away from zero, exactly: y + (the float below 1/2, with y's sign), truncated. The sum rounds up
        // to the next integer exactly when y's fraction is 1/2 or more (at 1/2 itself the exact sum lies halfway
        // between two floats and rounds to the even one, the integer); below 1/2 it stays below.
        const __m256 nudge = _mm256_or_ps(_mm256_and_ps(y, sign), below_half);
        iv[c] = _mm256_cvttps_epi32(_mm256_add_ps(y, nudge));
    }
    __m128i half_sums[2];
    for (int h = 0; h < 2; ++h) {
        const __m256i s8 = _mm256_add_epi32(iv[2 * h], iv[2 * h + 1]);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_hadd_epi32(s4, s4);
        half_sums[h] = _mm_hadd_epi32(s4, s4);
    }
    // One 8-byte store: the caller reads both sums at once, and two 4-byte stores would not forward to that load.
    _mm_storel_epi64(reinterpret_cast<__m128i*>(sums), _mm_unpacklo_epi32(half_sums[0], half_sums[1]));
    // packs interleave the 128-bit lanes; the permutation puts the 32 bytes back in order
    const __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    const __m256i ordered = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
    return d;
}

namespace {

// Blocks [b0, b0 + n) of token t's row xr (n <= 8), as quantize_activation_blocks writes them with quantize_block,
// eight blocks at a time: each block's maximum, scale and sums go through vectors of eight blocks (quantize_block
// spent most of its time in one block's chain of reductions, divisions and conversions). The same operations on
// every block's numbers, so the same bytes and floats: each lane's maximum is quantize_block's
// max(max(max(l0, l4), max(l2, l6)), max(max(l1, l5), max(l3, l7))) with the same operand order (which matters only
// for NaN), the division, the fp16 rounding of the scale (vcvtps2ph, to nearest even, as fp32_to_fp16) and the
// products of the sums are IEEE operations, and the sums are exact.
void quantize_group8(const float* xr, int64_t t, int64_t b0, int n, const QuantizedActs& out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
        m[i] = _mm256_setzero_ps();
        if (i < n)
            for (int c = 0; c < 4; ++c)
                m[i] = _mm256_max_ps(m[i], _mm256_andnot_ps(sign, _mm256_loadu_ps(xr + 32 * (b0 + i) + 8 * c)));
    }
    // h: max(lanes 0-3, lanes 4-7) of blocks 2k (low half) and 2k + 1 (high half)
    __m256 h[4];
    for (int k = 0; k < 4; ++k)
        h[k] = _mm256_max_ps(_mm256_permute2f128_ps(m[2 * k], m[2 * k + 1], 0x20),
                             _mm256_permute2f128_ps(m[2 * k], m[2 * k + 1], 0x31));
    // g: max(lanes 0-1, lanes 2-3) of each block's four: blocks 4k and 4k + 2 (low), 4k + 1 and 4k + 3 (high)
    __m256 g[2];
    for (int k = 0; k < 2; ++k)
        g[k] = _mm256_max_ps(_mm256_shuffle_ps(h[2 * k], h[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(h[2 * k], h[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // max(lane 0, lane 1) of each: blocks 0, 2, 4, 6 (low), 1, 3, 5, 7 (high), then in order
    const __m256 amax = _mm256_permutevar8x32_ps(
        _mm256_max_ps(_mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1))),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m256 d = _mm256_div_ps(amax, _mm256_set1_ps(127.0f));
    const __m256 inv = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), d),
                                     _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_UQ));  // (d != 0: NaN too)
    const __m256 scale = _mm256_cvtph_ps(_mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    alignas(32) float inv_l[8];
    _mm256_store_ps(inv_l, inv);
    const __m256 below_half = _mm256_set1_ps(0.49999997f), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    int8_t* qr = out.qs + t * out.qs_stride + 32 * b0;
    uint8_t* ur = out.qs_u != nullptr ? out.qs_u + t * out.qs_stride + 32 * b0 : nullptr;
    __m256i runs[8];  // each block's vpsadbw of q + 128: the sums of its four runs of eight bytes, in 64-bit lanes
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
        if (i >= n) {
            runs[i] = _mm256_setzero_si256();
            continue;
        }
        const float* xb = xr + 32 * (b0 + i);
        const __m256 vi = _mm256_broadcast_ss(inv_l + i);
        __m256i iv[4];
        for (int c = 0; c < 4; ++c) {  // quantize_block's operations
            const __m256 raw = _mm256_mul_ps(_mm256_loadu_ps(xb + 8 * c), vi);
            const __m256 y =
                _mm256_and_ps(_mm256_min_ps(_mm256_max_ps(raw, lo), hi), _mm256_cmp_ps(raw, raw, _CMP_ORD_Q));
            iv[c] = _mm256_cvttps_epi32(_mm256_add_ps(y, _mm256_or_ps(_mm256_and_ps(y, sign), below_half)));
        }
        const __m256i q = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3])),
            _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        const __m256i u = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));  // q + 128
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + 32 * i), q);
        if (ur != nullptr) _mm256_storeu_si256(reinterpret_cast<__m256i*>(ur + 32 * i), u);
        if (out.tile_qs != nullptr)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.tile_qs + 32 * tile_entry(out, t, b0 + i)), q);
        runs[i] = _mm256_sad_epu8(u, _mm256_setzero_si256());
    }
    // Each half's sum of q + 128, less 16 * 128, for the eight blocks, in registers: the sums' scalar stores, read
    // back as a vector, failed to forward (and their array's zeroing was a rep stos): half of this function's time
    // in a 16-sequence decode step. With runs r_i = [a_i, b_i | c_i, d_i] (64-bit lanes; a + b half 0, c + d half 1),
    // each pair [a_i, a_i+1, b_i, b_i+1 | c_i, c_i+1, d_i, d_i+1] as 32-bit lanes (each run's sum is below 2^11).
    const auto pair = [&](int i) { return _mm256_or_si256(runs[i], _mm256_slli_epi64(runs[i + 1], 32)); };
    const auto quad = [&](int i) {  // [half 0 of blocks i .. i + 3 | half 1 of them]
        const __m256i lo = pair(i), hi = pair(i + 2);
        return _mm256_add_epi32(_mm256_unpacklo_epi64(lo, hi), _mm256_unpackhi_epi64(lo, hi));
    };
    const __m256i q0 = quad(0), q4 = quad(4), bias = _mm256_set1_epi32(16 * 128);
    const __m256i s0 = _mm256_sub_epi32(_mm256_permute2x128_si256(q0, q4, 0x20), bias);
    const __m256i s1 = _mm256_sub_epi32(_mm256_permute2x128_si256(q0, q4, 0x31), bias);
    const __m256i isum = _mm256_add_epi32(s0, s1);
    const __m256 ds = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(isum));
    const __m256 ds0 = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(s0)), ds1 = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(s1));
    const __m256 pairs_lo = _mm256_unpacklo_ps(ds0, ds1), pairs_hi = _mm256_unpackhi_ps(ds0, ds1);
    const __m256 ds16[2] = {_mm256_permute2f128_ps(pairs_lo, pairs_hi, 0x20),   // blocks 0-3, each half 0 then 1
                            _mm256_permute2f128_ps(pairs_lo, pairs_hi, 0x31)};  // blocks 4-7
    const int64_t at = t * out.blk_stride + b0;
    if (n == 8) {  // (plain stores: a masked store can be about twenty micro-ops, and this is the common case)
        _mm256_storeu_ps(out.d + at, scale);
        _mm256_storeu_ps(out.ds + at, ds);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.isum + at), isum);
        _mm256_storeu_ps(out.ds16 + 2 * at, ds16[0]);
        _mm256_storeu_ps(out.ds16 + 2 * at + 8, ds16[1]);
    } else {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const auto first = [&](int k) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), lane); };  // lanes below k
        _mm256_maskstore_ps(out.d + at, first(n), scale);
        _mm256_maskstore_ps(out.ds + at, first(n), ds);
        _mm256_maskstore_epi32(out.isum + at, first(n), isum);
        _mm256_maskstore_ps(out.ds16 + 2 * at, first(2 * n), ds16[0]);
        if (n > 4) _mm256_maskstore_ps(out.ds16 + 2 * at + 8, first(2 * n - 8), ds16[1]);
    }
    if (out.tile_qs != nullptr) {
        alignas(32) float sl[8], dsl[8];
        alignas(32) int32_t il[8];
        _mm256_store_ps(sl, scale);
        _mm256_store_ps(dsl, ds);
        _mm256_store_si256(reinterpret_cast<__m256i*>(il), isum);
        write_tile_scales(out, t, b0, n, sl, dsl, il);
    }
}

}  // namespace

bool quantize_blocks(const float* x, int64_t n_in, int64_t t0, int64_t t1, int64_t b0, int64_t b1,
                     const QuantizedActs& out) {
    for (int64_t t = t0; t < t1; ++t)
        for (int64_t b = b0; b < b1; b += 8) quantize_group8(x + t * n_in, t, b, static_cast<int>(min64(8, b1 - b)), out);
    return true;
}

bool quantize_rows(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out) {
    return quantize_rows_by_blocks(quantize_blocks, x, n_in, t0, t1, out);
}

void lay_out_lanes(const QuantizedActs& q, int64_t t0, int64_t t1, int64_t b0, int64_t b1) {
    const int64_t nb = q.n_in / 32;
    const __m256i rows = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);  // times blk_stride: eight tokens' scales
    const __m256i scales = _mm256_mullo_epi32(rows, _mm256_set1_epi32(static_cast<int32_t>(q.blk_stride)));
    for (int64_t t = t0; t + kLaneTokens <= t1 && t + kLaneTokens <= q.n_tokens; t += kLaneTokens) {
        for (int64_t b = b0; b < b1; ++b) {
            __m256i r[8], u[8];
            for (int j = 0; j < 8; ++j)
                r[j] = load256(reinterpret_cast<const uint8_t*>(q.qs + (t + j) * q.qs_stride + 32 * b));
            for (int j = 0; j < 8; j += 4) {  // u[j + i]: dwords i and 4 + i of tokens j .. j + 3 (one per lane half)
                const __m256i lo01 = _mm256_unpacklo_epi32(r[j], r[j + 1]);
                const __m256i hi01 = _mm256_unpackhi_epi32(r[j], r[j + 1]);
                const __m256i lo23 = _mm256_unpacklo_epi32(r[j + 2], r[j + 3]);
                const __m256i hi23 = _mm256_unpackhi_epi32(r[j + 2], r[j + 3]);
                u[j] = _mm256_unpacklo_epi64(lo01, lo23);
                u[j + 1] = _mm256_unpackhi_epi64(lo01, lo23);
                u[j + 2] = _mm256_unpacklo_epi64(hi01, hi23);
                u[j + 3] = _mm256_unpackhi_epi64(hi01, hi23);
            }
            auto& out = reinterpret_cast<LaneBlock&>(q.lanes[t / kLaneTokens * nb + b]);
            for (int i = 0; i < 4; ++i) {
                out.qs[i] = low_halves(u[i], u[4 + i]);
                out.qs[4 + i] = high_halves(u[i], u[4 + i]);
            }
            const int64_t first = t * q.blk_stride + b;  // token t's block b
            out.d = _mm256_i32gather_ps(q.d + first, scales, 4);
            out.ds = _mm256_i32gather_ps(q.ds + first, scales, 4);
            out.isum = _mm256_i32gather_epi32(q.isum + first, scales, 4);
        }
    }
}

}  // namespace quill::cpu::avx2

#endif
