// Eight-row decoders of the 3-bit grid types (IQ3_XXS, IQ3_S) for the AVX2 kernels. Included after decoders.h by
// the kernel files only.
//
// A step is a 32-element sub-block of eight rows, row r in 32-bit lane r: w[k] is the grid entry of the row's
// elements 4k .. 4k + 3 (one 32-bit gather from the grid, the indices gathered from the rows first) with its signs
// applied. The levels are signed (|level| <= 62), so for vpmaddubsw the decoders give them signed (kSigned, as
// Q8_0's: the kernels move the signs onto the activations); for vpdpbusd (Unsigned: the AVX-512 kernels' decode
// path) they give them plus 128, the unified form's offset c = 128. The scale is the sub-block's, as
// engine/format/quant_iq3.h computes it.
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "engine/cpu/kernels.h"
#include "engine/cpu/x86/avx2/decoders.h"
#include "engine/format/quant_iq3.h"

namespace quill::cpu::avx2 {
namespace {

// Lane r: grid[idx lane r].
inline __m256i grid_entries(const uint32_t* grid, __m256i idx) {
    return _mm256_i32gather_epi32(reinterpret_cast<const int*>(grid), idx, 4);
}

// w with its byte e negated where bit 4k + e of the lane's 32 sign bits is set (k: the four-element group), plus
// 128 when Unsigned.
template <bool Unsigned>
inline __m256i apply_signs(__m256i w, __m256i signs, int k) {
    // Byte k / 2 of each lane to all four of its bytes, then the byte e's bit 4 (k % 2) + e of it.
    const int b = k / 2;
    const __m256i spread = _mm256_shuffle_epi8(
        signs, _mm256_setr_epi32(b * 0x01010101, (4 + b) * 0x01010101, (8 + b) * 0x01010101, (12 + b) * 0x01010101,
                                 b * 0x01010101, (4 + b) * 0x01010101, (8 + b) * 0x01010101, (12 + b) * 0x01010101));
    const __m256i bits = _mm256_set1_epi32(k % 2 ? static_cast<int>(0x80402010u) : 0x08040201);
    const __m256i minus = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
    const __m256i v = _mm256_sub_epi8(_mm256_xor_si256(w, minus), minus);
    return Unsigned ? _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))) : v;
}

// IQ3_XXS's 32 sign bits of a sub-block from its scale-and-signs word (lane r: row r's): the four 7-bit fields each
// in a byte, with bit 7 the parity that makes the byte's count of minus signs even (iq_sign_byte).
inline __m256i iq3_xxs_signs(__m256i aux) {
    const __m256i seven = _mm256_set1_epi32(0x7F);
    __m256i t = _mm256_and_si256(aux, seven);
    t = _mm256_or_si256(t, _mm256_and_si256(_mm256_slli_epi32(aux, 1), _mm256_set1_epi32(0x7F00)));
    t = _mm256_or_si256(t, _mm256_and_si256(_mm256_slli_epi32(aux, 2), _mm256_set1_epi32(0x7F0000)));
    t = _mm256_or_si256(t, _mm256_and_si256(_mm256_slli_epi32(aux, 3), _mm256_set1_epi32(0x7F000000)));
    // Bit 0 of each byte of p: the parity of that byte of t (the shifts bring in only bits of the same byte there).
    __m256i p = _mm256_xor_si256(t, _mm256_srli_epi32(t, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    return _mm256_or_si256(t, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi32(0x01010101)), 7));
}

// Group k's grid index (its low eight bits) from the eight index bytes of a sub-block in idx[0], idx[1].
inline __m256i index_byte(const __m256i idx[2], int k) {
    return _mm256_and_si256(_mm256_srli_epi32(idx[k / 4], 8 * (k % 4)), _mm256_set1_epi32(0xFF));
}

// IQ3_XXS: a group is a super-block, its eight 32-element sub-blocks the steps.
template <bool Unsigned>
struct Dec8Iq3Xxs {
    static constexpr int kOffset = Unsigned ? 128 : 0;
    static constexpr bool kSigned = !Unsigned, kHasMin = false;
    static constexpr int kGroupsPerMadd = 1;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockIq3Xxs);

    template <typename R, typename F>
    [[gnu::always_inline]] static void for_group(const R& rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(BlockIq3Xxs);
        const __m256 d = _mm256_cvtph_ps(gather_u16(rows, off + offsetof(BlockIq3Xxs, d)));
#pragma GCC unroll 1
        for (int j = 0; j < 8; ++j) {
            const __m256i aux = gather_u32(rows, off + offsetof(BlockIq3Xxs, scales_signs) + 4 * j);
            const __m256i idx[2] = {gather_u32(rows, off + offsetof(BlockIq3Xxs, qs) + 8 * j),
                                    gather_u32(rows, off + offsetof(BlockIq3Xxs, qs) + 8 * j + 4)};
            const __m256i signs = iq3_xxs_signs(aux);
            Step8 s;
            // d * (0.5 + s) * 0.5 in ggml's order
            const __m256 sc = _mm256_add_ps(_mm256_set1_ps(0.5f), _mm256_cvtepi32_ps(_mm256_srli_epi32(aux, 28)));
            s.ws = _mm256_mul_ps(_mm256_mul_ps(d, sc), _mm256_set1_ps(0.5f));
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                s.w[k] = apply_signs<Unsigned>(grid_entries(kIq3XxsGrid, index_byte(idx, k)), signs, k);
            }
            f(g * kGroupSteps + j, s);
        }
    }
};

// IQ3_S: a group is a super-block, its eight 32-element sub-blocks the steps; the ninth bit of group k's index is
// bit k of qh[j], the 32 sign bits are signs[4 j ..] as they stand, the scale d * (1 + 2 s) with s nibble j of
// scales.
template <bool Unsigned>
struct Dec8Iq3S {
    static constexpr int kOffset = Unsigned ? 128 : 0;
    static constexpr bool kSigned = !Unsigned, kHasMin = false;
    static constexpr int kGroupsPerMadd = 1;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockIq3S);

    template <typename R, typename F>
    [[gnu::always_inline]] static void for_group(const R& rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(BlockIq3S);
        const __m256 d = _mm256_cvtph_ps(gather_u16(rows, off + offsetof(BlockIq3S, d)));
        const __m256i qh[2] = {gather_u32(rows, off + offsetof(BlockIq3S, qh)),
                               gather_u32(rows, off + offsetof(BlockIq3S, qh) + 4)};
        const __m256i scales = gather_u32(rows, off + offsetof(BlockIq3S, scales));
#pragma GCC unroll 1
        for (int j = 0; j < 8; ++j) {
            const __m256i idx[2] = {gather_u32(rows, off + offsetof(BlockIq3S, qs) + 8 * j),
                                    gather_u32(rows, off + offsetof(BlockIq3S, qs) + 8 * j + 4)};
            const __m256i signs = gather_u32(rows, off + offsetof(BlockIq3S, signs) + 4 * j);
            // bit k of qh[j] moved to bit 8 of group k's index: qh[j] itself at bits 8 .. 15
            const __m256i high = _mm256_slli_epi32(_mm256_srli_epi32(qh[j / 4], 8 * (j % 4)), 8);
            const __m256i s4 = _mm256_and_si256(_mm256_srli_epi32(scales, 4 * j), _mm256_set1_epi32(0xF));
            Step8 s;
            const __m256i odd = _mm256_add_epi32(_mm256_set1_epi32(1), _mm256_slli_epi32(s4, 1));  // 1 + 2 s
            s.ws = _mm256_mul_ps(d, _mm256_cvtepi32_ps(odd));
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                const __m256i low = index_byte(idx, k);
                const __m256i nine = _mm256_and_si256(_mm256_srli_epi32(high, k), _mm256_set1_epi32(0x100));
                s.w[k] = apply_signs<Unsigned>(grid_entries(kIq3SGrid, _mm256_or_si256(low, nine)), signs, k);
            }
            f(g * kGroupSteps + j, s);
        }
    }
};

}  // namespace
}  // namespace quill::cpu::avx2
