// Eight-row decoders of the 2-bit i-quants (engine/format/quant_iq2.h) for the AVX2 kernels, and for the AVX-512
// kernels' decode path (their Dec8) and, two halves at a time, their sixteen-row steps. Included after decoders.h by
// the kernel files only.
//
// A grid entry is 8 bytes, two 32-bit lanes: w[2l] of a step holds in lane r the first four values of row r's entry
// l (elements 8l .. 8l + 3 of the 32-block), w[2l + 1] the last four, each gathered from the grid by the row's index
// (vpgatherdd), then negated bytewise where the entry's sign bits say (bit i of the sign byte: value i). Signed for
// vpmaddubsw (kSigned: the kernels move the signs onto the activations); plus 128 for vpdpbusd (Unsigned, the
// unified form's offset c = 128).
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "engine/cpu/kernels.h"
#include "engine/cpu/x86/avx2/decoders.h"
#include "engine/format/quant_iq2.h"

namespace quill::cpu::avx2 {
namespace {

// The 8 sign bits of each lane's 7-bit sign index (bits 0..6 of idx): the index with its parity as bit 7.
inline __m256i iq2_sign_bytes(__m256i idx) {
    const __m256i s = _mm256_and_si256(idx, _mm256_set1_epi32(127));
    __m256i p = _mm256_xor_si256(s, _mm256_srli_epi32(s, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    return _mm256_or_si256(s, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi32(1)), 7));
}

// Entry values g (8 magnitudes per lane pair, gathered) with the signs of the sign byte in bits 0..7 of each lane:
// lo gets values 0..3 (sign bits 0..3), hi values 4..7; plus 128 when Unsigned.
template <bool Unsigned>
inline void iq2_apply_signs(__m256i signs, __m256i& lo, __m256i& hi) {
    const __m256i spread = _mm256_shuffle_epi8(
        signs, _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8,
                                12, 12, 12, 12));
    const __m256i bits_lo = _mm256_set1_epi32(0x08040201), bits_hi = _mm256_set1_epi32(static_cast<int>(0x80402010u));
    const __m256i m_lo = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits_lo), bits_lo);
    const __m256i m_hi = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits_hi), bits_hi);
    lo = _mm256_sub_epi8(_mm256_xor_si256(lo, m_lo), m_lo);  // -g where the mask is all ones
    hi = _mm256_sub_epi8(_mm256_xor_si256(hi, m_hi), m_hi);
    if constexpr (Unsigned) {
        lo = _mm256_xor_si256(lo, _mm256_set1_epi8(static_cast<char>(0x80)));
        hi = _mm256_xor_si256(hi, _mm256_set1_epi8(static_cast<char>(0x80)));
    }
}

// The two halves of each lane's grid entry (index in the lanes): lo its bytes 0..3, hi its bytes 4..7.
inline void iq2_gather_entry(const uint64_t* grid, __m256i index, __m256i& lo, __m256i& hi) {
    const auto* base = reinterpret_cast<const int*>(grid);
    const __m256i at = _mm256_slli_epi32(index, 1);
    lo = _mm256_i32gather_epi32(base, at, 4);
    hi = _mm256_i32gather_epi32(base, _mm256_add_epi32(at, _mm256_set1_epi32(1)), 4);
}

// IQ2_XXS: a group is a super-block, its eight 32-element sub-blocks the steps; sub-block j is 8 bytes at 2 + 8 j:
// four grid indices, then a word of four 7-bit sign indices and the 4-bit scale s on top; scale d (0.5 + s) / 4.
template <bool Unsigned>
struct Dec8Iq2Xxs {
    static constexpr int kOffset = Unsigned ? 128 : 0;
    static constexpr bool kSigned = !Unsigned, kHasMin = false;
    static constexpr int kGroupsPerMadd = 1;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockIq2Xxs);

    template <typename R, typename F>
    [[gnu::always_inline]] static void for_group(const R& rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(BlockIq2Xxs);
        const __m256 d = _mm256_cvtph_ps(gather_u16(rows, off + offsetof(BlockIq2Xxs, d)));
#pragma GCC unroll 1
        for (int j = 0; j < 8; ++j) f(g * kGroupSteps + j, step(rows, off, d, j));
    }

    // Sub-block j of the super-blocks at rows[r] + off, whose fp16 d are d.
    template <typename R>
    [[gnu::always_inline]] static Step8 step(const R& rows, size_t off, __m256 d, int j) {
        const size_t at = off + offsetof(BlockIq2Xxs, qs) + 8 * static_cast<size_t>(j);
        const __m256i index = gather_u32(rows, at), high = gather_u32(rows, at + 4);
        Step8 s;
        for (int l = 0; l < 4; ++l) {
            const __m256i idx = _mm256_and_si256(_mm256_srli_epi32(index, 8 * l), _mm256_set1_epi32(0xFF));
            iq2_gather_entry(kIq2XxsGrid, idx, s.w[2 * l], s.w[2 * l + 1]);
            iq2_apply_signs<Unsigned>(iq2_sign_bytes(_mm256_srli_epi32(high, 7 * l)), s.w[2 * l], s.w[2 * l + 1]);
        }
        // d (2 s + 1) / 8: exactly the scalar decoder's d (0.5 + s) * 0.25 (only powers of two differ)
        const __m256i odd = _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(high, 28), 1), _mm256_set1_epi32(1));
        s.ws = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(odd)), _mm256_set1_ps(0.125f));
        return s;
    }
};

}  // namespace
}  // namespace quill::cpu::avx2
