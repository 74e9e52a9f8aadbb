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

// What the decoders of super-blocks with an fp16 d share (IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M): a group is a
// super-block, its eight 32-element sub-blocks the steps, each decoded by Derived::step with the group's d
// (Derived::group_d: here the block's d field). Signed for the AVX2 kernels; plus 128 for the AVX-512 ones (Unsigned).
template <typename Derived, typename Block, bool Unsigned>
struct SuperBlockDec8 {
    static constexpr int kOffset = Unsigned ? 128 : 0;
    static constexpr bool kSigned = !Unsigned, kHasMin = false;
    static constexpr int kGroupsPerMadd = 1;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(Block);

    template <typename R, typename F>
    [[gnu::always_inline]] static void for_group(const R& rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(Block);
        const __m256 d = Derived::group_d(rows, off);
#pragma GCC unroll 1
        for (int j = 0; j < 8; ++j) f(g * kGroupSteps + j, Derived::step(rows, off, d, j));
    }

    // The d of the super-blocks at rows[r] + off.
    template <typename R>
    [[gnu::always_inline]] static __m256 group_d(const R& rows, size_t off) {
        return _mm256_cvtph_ps(gather_u16(rows, off + offsetof(Block, d)));
    }
};

// IQ2_XXS: a group is a super-block, its eight 32-element sub-blocks the steps; sub-block j is 8 bytes at 2 + 8 j:
// four grid indices, then a word of four 7-bit sign indices and the 4-bit scale s on top; scale d (0.5 + s) / 4.
template <bool Unsigned>
struct Dec8Iq2Xxs : SuperBlockDec8<Dec8Iq2Xxs<Unsigned>, BlockIq2Xxs, Unsigned> {
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

// Whether a decoder's blocks have a scale per 16 elements (IQ2_XS, IQ2_S): Step8::wm then holds, as int32 lanes,
// row r's integer half scales 2 s + 1 (the first 16 values' in the low 16 bits, the last 16's in the high), and
// ws = d / 8. The rows8 kernels take them in the integer dot (iq2_half_idot) and skip the lane path.
template <typename Dec>
constexpr bool kIq2HalfScales = requires { Dec::kHalfScales; };

// The exact int32 dot of a step's signed values with a token's groups ak[k] (broadcast), each half's products
// multiplied by its scale in vpmaddwd (|sum| <= 2 * 43 * 127 * 31 per pair of products: no overflow).
[[gnu::always_inline]] inline __m256i iq2_half_idot(const Step8& st, const __m256i* ak) {
    const __m256i sc = _mm256_castps_si256(st.wm);
    const __m256i lo = _mm256_shuffle_epi8(sc, _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1,
                                                                0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13));
    const __m256i hi = _mm256_shuffle_epi8(sc, _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,
                                                                2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15));
    __m256i dot = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
        const __m256i prod = _mm256_maddubs_epi16(_mm256_sign_epi8(st.w[k], st.w[k]), _mm256_sign_epi8(ak[k], st.w[k]));
        dot = _mm256_add_epi32(dot, _mm256_madd_epi16(prod, k < 4 ? lo : hi));
    }
    return dot;
}

// The half scales of a step from the scale bytes in bits 0..7 of the lanes: (2 lo + 1) | (2 hi + 1) << 16, and
// ws = d / 8.
inline void iq2_half_scales(__m256i bytes, __m256 d, Step8& s) {
    const __m256i lo = _mm256_and_si256(bytes, _mm256_set1_epi32(15));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(bytes, 4), _mm256_set1_epi32(15));
    const __m256i odd = _mm256_or_si256(_mm256_slli_epi32(lo, 1), _mm256_slli_epi32(hi, 17));
    s.wm = _mm256_castsi256_ps(_mm256_or_si256(odd, _mm256_set1_epi32(0x00010001)));
    s.ws = _mm256_mul_ps(d, _mm256_set1_ps(0.125f));
}

// Byte j (0..7) of the 8 bytes at rows[r] + at, in bits 0..7 of lane r (the other bits: the bytes after it), read
// as the 32-bit word that holds it so that nothing past the 8 bytes is read.
template <typename R>
inline __m256i gather_byte_of8(const R& rows, size_t at, int j) {
    return _mm256_srli_epi32(gather_u32(rows, at + 4 * static_cast<size_t>(j / 4)), 8 * (j % 4));
}

// IQ2_XS and IQ2_S: a group is a super-block, its eight 32-element sub-blocks the steps; Entries::load<Unsigned>(rows,
// off, j, s) sets the values of sub-block j of the super-blocks at rows[r] + off, and scale byte j gives the half
// scales. Signed for the AVX2 kernels (iq2_half_idot); plus 128 for the AVX-512 ones (Unsigned).
template <typename Block, typename Entries, bool Unsigned = false>
struct Dec8Iq2Half : SuperBlockDec8<Dec8Iq2Half<Block, Entries, Unsigned>, Block, Unsigned> {
    static constexpr bool kHalfScales = true;

    // Sub-block j of the super-blocks at rows[r] + off, whose d are d.
    template <typename R>
    [[gnu::always_inline]] static Step8 step(const R& rows, size_t off, __m256 d, int j) {
        Step8 s;
        Entries::template load<Unsigned>(rows, off, j, s);
        iq2_half_scales(gather_byte_of8(rows, off + offsetof(Block, scales), j), d, s);
        return s;
    }
};

// IQ2_XS: sub-block j's entries are the uint16 qs[4 j .. 4 j + 3] (grid index | sign index << 9).
struct Iq2XsEntries {
    template <bool Unsigned, typename R>
    [[gnu::always_inline]] static void load(const R& rows, size_t off, int j, Step8& s) {
        const size_t at = off + offsetof(BlockIq2Xs, qs) + 8 * static_cast<size_t>(j);
        const __m256i pair[2] = {gather_u32(rows, at), gather_u32(rows, at + 4)};
        for (int l = 0; l < 4; ++l) {
            const __m256i e = l % 2 == 0 ? _mm256_and_si256(pair[l / 2], _mm256_set1_epi32(0xFFFF))
                                         : _mm256_srli_epi32(pair[l / 2], 16);
            iq2_gather_entry(kIq2XsGrid, _mm256_and_si256(e, _mm256_set1_epi32(511)), s.w[2 * l], s.w[2 * l + 1]);
            iq2_apply_signs<Unsigned>(iq2_sign_bytes(_mm256_srli_epi32(e, 9)), s.w[2 * l], s.w[2 * l + 1]);
        }
    }
};

// IQ2_S: entry l of sub-block j has the grid index qs[4 j + l] | two bits of qh[j] at 2 l above it, the sign byte
// signs[4 j + l].
struct Iq2SEntries {
    template <bool Unsigned, typename R>
    [[gnu::always_inline]] static void load(const R& rows, size_t off, int j, Step8& s) {
        const __m256i low = gather_u32(rows, off + offsetof(BlockIq2S, qs) + 4 * static_cast<size_t>(j));
        const __m256i signs = gather_u32(rows, off + offsetof(BlockIq2S, signs) + 4 * static_cast<size_t>(j));
        const __m256i high = gather_byte_of8(rows, off + offsetof(BlockIq2S, qh), j);
        for (int l = 0; l < 4; ++l) {
            const __m256i idx =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(low, 8 * l), _mm256_set1_epi32(0xFF)),
                                _mm256_and_si256(_mm256_slli_epi32(high, 8 - 2 * l), _mm256_set1_epi32(0x300)));
            iq2_gather_entry(kIq2SGrid, idx, s.w[2 * l], s.w[2 * l + 1]);
            iq2_apply_signs<Unsigned>(_mm256_srli_epi32(signs, 8 * l), s.w[2 * l], s.w[2 * l + 1]);
        }
    }
};

template <bool Unsigned = false>
using Dec8Iq2Xs = Dec8Iq2Half<BlockIq2Xs, Iq2XsEntries, Unsigned>;
template <bool Unsigned = false>
using Dec8Iq2S = Dec8Iq2Half<BlockIq2S, Iq2SEntries, Unsigned>;

}  // namespace
}  // namespace quill::cpu::avx2
