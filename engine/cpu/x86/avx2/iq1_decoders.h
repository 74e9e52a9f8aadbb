// Eight-row decoders of the 1-bit i-quants (engine/format/quant_iq1.h) for the AVX2 kernels, and for the AVX-512
// kernels' decode path (their Dec8) and, two halves at a time, their sixteen-row steps. Included after decoders.h by
// the kernel files only.
//
// A grid entry is 8 levels g + 1 (0..2) in the nibbles of one 32-bit word (kIq1Grid4): one gather per entry gives
// row r's levels 0..3 (the low nibbles) and 4..7 (the high ones) in lane r of w[2l] and w[2l + 1]. The kernels
// multiply 8 g +- 1 = 8 (g + 1) - 8 +- 1, signed for vpmaddubsw (kSigned: the kernels move the signs onto the
// activations), plus 128 for vpdpbusd (Unsigned, the unified form's offset c = 128).
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "engine/cpu/kernels.h"
#include "engine/cpu/x86/avx2/decoders.h"
#include "engine/cpu/x86/avx2/iq2_decoders.h"
#include "engine/format/quant_iq1.h"

namespace quill::cpu::avx2 {
namespace {

// The levels of each lane's grid entry (index in the lanes) as 8 (g + 1) + bias bytes: lo levels 0..3, hi 4..7.
// bias: per byte, -7 (delta +1/8) or -9 (delta -1/8), plus 128 when Unsigned.
inline void iq1_entry(__m256i index, __m256i bias, __m256i& lo, __m256i& hi) {
    const __m256i g = _mm256_i32gather_epi32(reinterpret_cast<const int*>(kIq1Grid4.data()), index, 4);
    const __m256i nib = _mm256_set1_epi8(0x0F);
    // (each byte holds at most 2 before the shift: nothing crosses into the next byte)
    lo = _mm256_add_epi8(_mm256_slli_epi16(_mm256_and_si256(g, nib), 3), bias);
    hi = _mm256_add_epi8(_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi32(g, 4), nib), 3), bias);
}

// Bits from .. from + 2 of each lane moved to bits 8..10 (the high bits of a grid index), the rest cleared.
inline __m256i iq1_high_index(__m256i v, int from) {
    const __m256i at = from <= 8 ? _mm256_slli_epi32(v, 8 - from) : _mm256_srli_epi32(v, from - 8);
    return _mm256_and_si256(at, _mm256_set1_epi32(0x700));
}

// The bias bytes of iq1_entry from a sign bit (bit `bit` of each lane of bits): -9 where it is set, else -7.
template <bool Unsigned>
inline __m256i iq1_bias(__m256i bits, int bit) {
    const __m256i minus = _mm256_srai_epi32(_mm256_slli_epi32(bits, 31 - bit), 31);
    const __m256i plus = _mm256_set1_epi8(static_cast<char>(Unsigned ? 128 - 7 : -7));
    return _mm256_add_epi8(plus, _mm256_and_si256(minus, _mm256_set1_epi8(-2)));
}

// IQ1_S: a group is a super-block, its eight 32-element sub-blocks the steps; sub-block j has the four index bytes
// qs[4 j ..] and the 16-bit qh[j] (three high index bits per entry, the scale s at bits 12..14, the delta's sign at
// 15); scale d (2 s + 1) / 8.
template <bool Unsigned>
struct Dec8Iq1S : SuperBlockDec8<Dec8Iq1S<Unsigned>, BlockIq1S, Unsigned> {
    // Sub-block j of the super-blocks at rows[r] + off, whose fp16 d are d.
    template <typename R>
    [[gnu::always_inline]] static Step8 step(const R& rows, size_t off, __m256 d, int j) {
        const __m256i qs = gather_u32(rows, off + offsetof(BlockIq1S, qs) + 4 * static_cast<size_t>(j));
        // qh[j] in the high half: the word ending with it (the last sub-block's qh ends the block)
        const __m256i qh = _mm256_srli_epi32(
            gather_u32(rows, off + offsetof(BlockIq1S, qh) + 2 * static_cast<size_t>(j) - 2), 16);
        const __m256i bias = iq1_bias<Unsigned>(qh, 15);
        Step8 s;
#pragma GCC unroll 4
        for (int l = 0; l < 4; ++l) {
            const __m256i idx = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32(qs, 8 * l), _mm256_set1_epi32(0xFF)), iq1_high_index(qh, 3 * l));
            iq1_entry(idx, bias, s.w[2 * l], s.w[2 * l + 1]);
        }
        // d (2 s + 1) / 8 in the scalar decoder's order
        const __m256i odd = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi32(qh, 11), _mm256_set1_epi32(14)), _mm256_set1_epi32(1));
        s.ws = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(odd)), _mm256_set1_ps(0.125f));
        return s;
    }
};

// IQ1_M: a group is a super-block, its eight 32-element sub-blocks the steps, with a scale per 16 elements taken in
// the integer dot (kHalfScales, as IQ2_XS: Step8::wm holds 2 s + 1 of each half, ws = d / 8). Sub-block j has the
// index bytes qs[4 j ..] and the 16-bit word at qh + 2 j (nibble l: entry l's three high index bits and its delta's
// sign); d is put together from the top nibbles of the four scale words. Signed for the AVX2 kernels; plus 128 for
// the AVX-512 ones (Unsigned).
template <bool Unsigned = false>
struct Dec8Iq1M : SuperBlockDec8<Dec8Iq1M<Unsigned>, BlockIq1M, Unsigned> {
    static constexpr bool kHalfScales = true;

    // The d of the super-blocks at rows[r] + off, from the top nibbles of their scale words.
    template <typename R>
    [[gnu::always_inline]] static __m256 group_d(const R& rows, size_t off) {
        const __m256i sc[2] = {gather_u32(rows, off + offsetof(BlockIq1M, scales)),
                               gather_u32(rows, off + offsetof(BlockIq1M, scales) + 4)};
        const __m256i bits = _mm256_or_si256(
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sc[0], 12), _mm256_set1_epi32(0xF)),
                            _mm256_and_si256(_mm256_srli_epi32(sc[0], 24), _mm256_set1_epi32(0xF0))),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sc[1], 4), _mm256_set1_epi32(0xF00)),
                            _mm256_and_si256(_mm256_srli_epi32(sc[1], 16), _mm256_set1_epi32(0xF000))));
        return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1)));
    }

    // Sub-block j of the super-blocks at rows[r] + off, whose d are d.
    template <typename R>
    [[gnu::always_inline]] static Step8 step(const R& rows, size_t off, __m256 d, int j) {
        const __m256i qs = gather_u32(rows, off + offsetof(BlockIq1M, qs) + 4 * static_cast<size_t>(j));
        const __m256i qh = gather_u32(rows, off + offsetof(BlockIq1M, qh) + 2 * static_cast<size_t>(j));
        Step8 s;
#pragma GCC unroll 4
        for (int l = 0; l < 4; ++l) {
            const __m256i idx = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32(qs, 8 * l), _mm256_set1_epi32(0xFF)), iq1_high_index(qh, 4 * l));
            iq1_entry(idx, iq1_bias<Unsigned>(qh, 4 * l + 3), s.w[2 * l], s.w[2 * l + 1]);
        }
        // Scale word j / 2 (of the pair at 4 (j / 4)) shifted so that the sub-block's two 3-bit scales are bits 0..5.
        const size_t pair = off + offsetof(BlockIq1M, scales) + 4 * static_cast<size_t>(j / 4);
        const __m256i sc = _mm256_srli_epi32(gather_u32(rows, pair), 16 * ((j / 2) % 2) + 6 * (j % 2));
        const __m256i lo = _mm256_and_si256(sc, _mm256_set1_epi32(7));
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(sc, 3), _mm256_set1_epi32(7));
        const __m256i odd = _mm256_or_si256(_mm256_slli_epi32(lo, 1), _mm256_slli_epi32(hi, 17));
        s.wm = _mm256_castsi256_ps(_mm256_or_si256(odd, _mm256_set1_epi32(0x00010001)));
        s.ws = _mm256_mul_ps(d, _mm256_set1_ps(0.125f));
        return s;
    }
};

}  // namespace
}  // namespace quill::cpu::avx2
