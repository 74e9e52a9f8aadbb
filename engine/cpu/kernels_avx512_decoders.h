// Weight decoders of the AVX-512 kernels. Included by kernels_avx512.cpp only, which alone is compiled with the
// AVX-512 flags; everything here has internal linkage.
//
// A decoder reads four weight rows at once, 64 elements (two 32-blocks, four 16-element quarters) per step, and
// interleaves them so that one vpdpbusd multiplies all four rows with a token's quarter broadcast to every lane:
// u[q] holds in its 128-bit lane r the 16 weights of quarter q of row r, as unsigned bytes in the unified form of
// kernels.h (w = ws * (u - c) + wm).
#pragma once

#ifndef QUILL_AVX512_EMULATED
#include <immintrin.h>
#endif

#include <cstddef>

#include "engine/cpu/kernels.h"

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

struct Step4 {
    __m512i u[4];  // quarter q, lane r: row r
    __m512 ws[4];  // scale of quarter q, lane 4r + g: row r (laid out like a vpdpbusd result)
    __m128 wc[2];  // kHasMin only: the minimum of 32-block j, element r: row r
};

using Rows = const uint8_t* const*;  // the 4 rows

inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Lane r = the 16 bytes at rows[r] + off.
inline __m512i load_4x16(Rows rows, size_t off) {
    __m512i v = _mm512_castsi128_si512(load128(rows[0] + off));
    v = _mm512_inserti32x4(v, load128(rows[1] + off), 1);
    v = _mm512_inserti32x4(v, load128(rows[2] + off), 2);
    return _mm512_inserti32x4(v, load128(rows[3] + off), 3);
}

// The 32 bytes at rows[r] + off as two quarter vectors: lo gets bytes 0..15 of each row, hi bytes 16..31.
inline void load_4x32(Rows rows, size_t off, __m512i& lo, __m512i& hi) {
    const __m512i r01 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(rows[0] + off)), load256(rows[1] + off), 1);
    const __m512i r23 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(rows[2] + off)), load256(rows[3] + off), 1);
    lo = _mm512_shuffle_i64x2(r01, r23, 0x88);
    hi = _mm512_shuffle_i64x2(r01, r23, 0xDD);
}

// The fp16 values at rows[r] + off as floats, element r.
inline __m128 half_4(Rows rows, size_t off) {
    uint64_t bits = 0;
    for (int r = 0; r < 4; ++r) bits |= uint64_t{load_unaligned<uint16_t>(rows[r] + off)} << (16 * r);
    return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(bits)));
}

inline __m512i low_nibbles(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
inline __m512i high_nibbles(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }

// Adds 16 where the fifth bit of a Q5 block is set: bit l of row r's 32-bit qh is element l's; quarter `half`
// covers elements 16 half .. 16 half + 15.
inline __m512i add_q5_high(__m512i u, Rows rows, size_t qh_off, int half) {
    uint64_t mask = 0;
    for (int r = 0; r < 4; ++r) {
        const uint32_t qh = load_unaligned<uint32_t>(rows[r] + qh_off);
        mask |= uint64_t{(qh >> (16 * half)) & 0xFFFF} << (16 * r);
    }
    return _mm512_mask_add_epi8(u, _cvtu64_mask64(mask), u, _mm512_set1_epi8(16));
}

// Lane 4r + g takes element r of a 4-float vector.
inline __m512 expand_rows(__m128 v) {
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(v));
}

// Per-row values v[r][j] (j < 8) of 4 rows, held as [rows 0, 1] and [rows 2, 3] so that one permute picks column j
// for all rows.
struct RowColumns {
    __m512 r01, r23;

    void set(const __m256 (&v)[4]) {
        r01 = _mm512_insertf32x8(_mm512_castps256_ps512(v[0]), v[1], 1);
        r23 = _mm512_insertf32x8(_mm512_castps256_ps512(v[2]), v[3], 1);
    }
    // Lane 4r + g = v[r][j].
    __m512 expanded(int j) const {
        const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(24, 24, 24, 24, 16, 16, 16, 16, 8, 8, 8, 8, 0, 0, 0, 0),
                                             _mm512_set1_epi32(j));
        return _mm512_permutex2var_ps(r01, idx, r23);
    }
    // Element r = v[r][j].
    __m128 column(int j) const {
        const __m512i idx =
            _mm512_add_epi32(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24, 16, 8, 0), _mm512_set1_epi32(j));
        return _mm512_castps512_ps128(_mm512_permutex2var_ps(r01, idx, r23));
    }
};

// ---- the decoders ----
//   kOffset            c of the unified form
//   kHasMin            blocks have a float minimum (Step4::wm)
//   kQuartersPerScale  quarters sharing one scale: 2 (a 32-block), 1 for Q6_K
//   kGroupSteps        steps per group (a super-block for the k-quants), whose per-row data load_group reads
//   kGroupBytes        bytes of a group in a row

struct NoState {};

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: a group is one step, two blocks.
template <typename Block, int Offset>
struct Dec32 {
    static constexpr int kOffset = Offset;
    static constexpr bool kHasMin = requires(Block b) { b.m; };
    static constexpr int kQuartersPerScale = 2;
    static constexpr int kGroupSteps = 1;
    static constexpr int64_t kGroupBytes = 2 * sizeof(Block);
    using State = NoState;
    static void load_group(Rows, int64_t, State&) {}

    static Step4 step(Rows rows, int64_t g, int, const State&) {
        Step4 s;
        for (int i = 0; i < 2; ++i) {
            const size_t off = (2 * g + i) * sizeof(Block);
            if constexpr (sizeof(Block::qs) == 32) {  // Q8_0: signed bytes, flipped to unsigned (c = 128)
                load_4x32(rows, off + offsetof(Block, qs), s.u[2 * i], s.u[2 * i + 1]);
                s.u[2 * i] = _mm512_xor_si512(s.u[2 * i], _mm512_set1_epi8(static_cast<char>(0x80)));
                s.u[2 * i + 1] = _mm512_xor_si512(s.u[2 * i + 1], _mm512_set1_epi8(static_cast<char>(0x80)));
            } else {  // nibbles: low ones are elements 0..15, high ones 16..31
                const __m512i v = load_4x16(rows, off + offsetof(Block, qs));
                s.u[2 * i] = low_nibbles(v);
                s.u[2 * i + 1] = high_nibbles(v);
                if constexpr (requires(Block b) { b.qh; }) {
                    s.u[2 * i] = add_q5_high(s.u[2 * i], rows, off + offsetof(Block, qh), 0);
                    s.u[2 * i + 1] = add_q5_high(s.u[2 * i + 1], rows, off + offsetof(Block, qh), 1);
                }
            }
            const __m128 d = half_4(rows, off + offsetof(Block, d));
            s.ws[2 * i] = s.ws[2 * i + 1] = expand_rows(d);
            if constexpr (kHasMin) s.wc[i] = half_4(rows, off + offsetof(Block, m));
        }
        return s;
    }
};

using DecQ4_0 = Dec32<BlockQ4_0, 8>;
using DecQ4_1 = Dec32<BlockQ4_1, 0>;
using DecQ5_0 = Dec32<BlockQ5_0, 16>;
using DecQ5_1 = Dec32<BlockQ5_1, 0>;
using DecQ8_0 = Dec32<BlockQ8_0, 128>;

// Q4_K / Q5_K: sub-block j has scale d * sc_j and minimum -dmin * m_j. Step k holds sub-blocks 2k (the low
// nibbles of qs[32k .. 32k + 32)) and 2k + 1 (the high nibbles); Q5_K's fifth bit of element l of sub-block j is
// bit j of qh[l].
template <typename Block>
struct DecK4 {
    static constexpr bool kHigh = requires(Block b) { b.qh; };
    static constexpr int kOffset = 0;
    static constexpr bool kHasMin = true;
    static constexpr int kQuartersPerScale = 2;
    static constexpr int kGroupSteps = 4;
    static constexpr int64_t kGroupBytes = sizeof(Block);
    struct State {
        RowColumns ws, wm;     // d * sc_j and -dmin * m_j of each row
        __m512i qh_lo, qh_hi;  // Q5_K: qh as quarter vectors
    };

    static void load_group(Rows rows, int64_t g, State& st) {
        __m256 sc[4], mn[4];  // [row]
        for (int r = 0; r < 4; ++r) {
            const uint8_t* b = rows[r] + g * sizeof(Block);
            uint8_t s8[8], m8[8];
            unpack_k4_scales(b + offsetof(Block, scales), s8, m8);
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_unaligned<uint16_t>(b + offsetof(Block, d))));
            const __m256 dmin = _mm256_set1_ps(-_cvtsh_ss(load_unaligned<uint16_t>(b + offsetof(Block, dmin))));
            sc[r] = _mm256_mul_ps(d, to_float(s8));
            mn[r] = _mm256_mul_ps(dmin, to_float(m8));
        }
        st.ws.set(sc);
        st.wm.set(mn);
        if constexpr (kHigh) load_4x32(rows, g * sizeof(Block) + offsetof(Block, qh), st.qh_lo, st.qh_hi);
    }

    static Step4 step(Rows rows, int64_t g, int k, const State& st) {
        Step4 s;
        __m512i lo, hi;
        load_4x32(rows, g * sizeof(Block) + offsetof(Block, qs) + 32 * k, lo, hi);
        s.u[0] = low_nibbles(lo);
        s.u[1] = low_nibbles(hi);
        s.u[2] = high_nibbles(lo);
        s.u[3] = high_nibbles(hi);
        if constexpr (kHigh) {
            const __m512i sixteen = _mm512_set1_epi8(16);
            const __m512i bit0 = _mm512_set1_epi8(static_cast<char>(1 << (2 * k)));
            const __m512i bit1 = _mm512_set1_epi8(static_cast<char>(2 << (2 * k)));
            s.u[0] = _mm512_mask_add_epi8(s.u[0], _mm512_test_epi8_mask(st.qh_lo, bit0), s.u[0], sixteen);
            s.u[1] = _mm512_mask_add_epi8(s.u[1], _mm512_test_epi8_mask(st.qh_hi, bit0), s.u[1], sixteen);
            s.u[2] = _mm512_mask_add_epi8(s.u[2], _mm512_test_epi8_mask(st.qh_lo, bit1), s.u[2], sixteen);
            s.u[3] = _mm512_mask_add_epi8(s.u[3], _mm512_test_epi8_mask(st.qh_hi, bit1), s.u[3], sixteen);
        }
        s.ws[0] = s.ws[1] = st.ws.expanded(2 * k);
        s.ws[2] = s.ws[3] = st.ws.expanded(2 * k + 1);
        s.wc[0] = st.wm.column(2 * k);
        s.wc[1] = st.wm.column(2 * k + 1);
        return s;
    }

    static __m256 to_float(const uint8_t* v) {
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v))));
    }
};

using DecQ4_K = DecK4<BlockQ4_K>;
using DecQ5_K = DecK4<BlockQ5_K>;

// Q6_K: w = d * sc_i * (q - 32) with a scale per 16 elements. Step k covers 32-blocks 2k and 2k + 1, both in the
// 128-element half k / 2: block 2k's low nibbles are ql[64 half + l], block 2k + 1's ql[64 half + 32 + l] (high
// nibbles when k is odd), and both take their top two bits from qh[32 half + l], at bit 4 (k % 2) for block 2k and
// 4 (k % 2) + 2 for block 2k + 1 (see engine/format/quant_k.cpp).
struct DecQ6_K {
    static constexpr int kOffset = 32;
    static constexpr bool kHasMin = false;
    static constexpr int kQuartersPerScale = 1;
    static constexpr int kGroupSteps = 4;
    static constexpr int64_t kGroupBytes = sizeof(BlockQ6_K);
    struct State {
        RowColumns ws[2];  // d * sc_i of each row, for sub-blocks i = 8h + j
    };

    static void load_group(Rows rows, int64_t g, State& st) {
        __m256 sc[2][4];  // [half of i][row]
        for (int r = 0; r < 4; ++r) {
            const uint8_t* b = rows[r] + g * sizeof(BlockQ6_K);
            const __m512 d = _mm512_set1_ps(_cvtsh_ss(load_unaligned<uint16_t>(b + offsetof(BlockQ6_K, d))));
            const __m512 s =
                _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(b + offsetof(BlockQ6_K, scales)))));
            sc[0][r] = _mm512_castps512_ps256(s);
            sc[1][r] = _mm512_extractf32x8_ps(s, 1);
        }
        st.ws[0].set(sc[0]);
        st.ws[1].set(sc[1]);
    }

    static Step4 step(Rows rows, int64_t g, int k, const State& st) {
        const size_t b = g * sizeof(BlockQ6_K);
        const int half = k / 2, odd = k % 2;
        __m512i ql[4], qh[2];
        load_4x32(rows, b + offsetof(BlockQ6_K, ql) + 64 * half, ql[0], ql[1]);
        load_4x32(rows, b + offsetof(BlockQ6_K, ql) + 64 * half + 32, ql[2], ql[3]);
        load_4x32(rows, b + offsetof(BlockQ6_K, qh) + 32 * half, qh[0], qh[1]);
        const __m128i nibble_shift = _mm_cvtsi32_si128(4 * odd);
        Step4 s;
        for (int q = 0; q < 4; ++q) {
            const __m512i low = _mm512_and_si512(_mm512_srl_epi16(ql[q], nibble_shift), _mm512_set1_epi8(0x0F));
            const __m128i top_shift = _mm_cvtsi32_si128(4 * odd + 2 * (q / 2));
            const __m512i top = _mm512_and_si512(_mm512_srl_epi16(qh[q % 2], top_shift), _mm512_set1_epi8(3));
            s.u[q] = _mm512_or_si512(low, _mm512_slli_epi16(top, 4));
            const int i = 4 * k + q;  // the 16-element sub-block
            s.ws[q] = st.ws[i / 8].expanded(i % 8);
        }
        return s;
    }
};

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS
