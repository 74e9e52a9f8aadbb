// Sixteen-row decoders of the 3-bit grid types (IQ3_XXS, IQ3_S) for the AVX-512 kernels. Included after decoders.h
// by the AVX-512 kernel files only.
//
// As the eight-row ones (avx2/iq3_decoders.h), sixteen rows in the lanes: each four-element group one 32-bit gather
// from the grid, its signs applied with a byte mask, plus 128 for vpdpbusd (the unified form's offset c = 128); the
// decode path's Dec8 gives the same bytes and scales eight rows at a time.
#pragma once

#include <cstddef>

#include "engine/cpu/x86/avx2/iq3_decoders.h"
#include "engine/cpu/x86/avx512/decoders.h"

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

inline __m512i grid_entries_16(const uint32_t* grid, __m512i idx) { return _mm512_i32gather_epi32(idx, grid, 4); }

// As avx2::apply_signs<true>: byte e of each lane negated where bit 4k + e of the lane's sign bits is set, then
// plus 128.
inline __m512i apply_signs_16(__m512i w, __m512i signs, int k) {
    const int b = k / 2;
    const __m512i spread = _mm512_shuffle_epi8(
        signs, _mm512_set4_epi32((12 + b) * 0x01010101, (8 + b) * 0x01010101, (4 + b) * 0x01010101, b * 0x01010101));
    const __m512i bits = _mm512_set1_epi32(k % 2 ? static_cast<int>(0x80402010u) : 0x08040201);
    const __mmask64 minus = _mm512_test_epi8_mask(spread, bits);
    const __m512i v = _mm512_mask_sub_epi8(w, minus, _mm512_setzero_si512(), w);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
}

// As avx2::iq3_xxs_signs, sixteen rows.
inline __m512i iq3_xxs_signs_16(__m512i aux) {
    __m512i t = _mm512_and_si512(aux, _mm512_set1_epi32(0x7F));
    t = _mm512_or_si512(t, _mm512_and_si512(_mm512_slli_epi32(aux, 1), _mm512_set1_epi32(0x7F00)));
    t = _mm512_or_si512(t, _mm512_and_si512(_mm512_slli_epi32(aux, 2), _mm512_set1_epi32(0x7F0000)));
    t = _mm512_or_si512(t, _mm512_and_si512(_mm512_slli_epi32(aux, 3), _mm512_set1_epi32(0x7F000000)));
    __m512i p = _mm512_xor_si512(t, _mm512_srli_epi32(t, 4));
    p = _mm512_xor_si512(p, _mm512_srli_epi32(p, 2));
    p = _mm512_xor_si512(p, _mm512_srli_epi32(p, 1));
    return _mm512_or_si512(t, _mm512_slli_epi32(_mm512_and_si512(p, _mm512_set1_epi32(0x01010101)), 7));
}

// Group k's grid indices (low eight bits) from the eight index bytes of a sub-block in idx[0], idx[1].
inline __m512i index_byte_16(const __m512i idx[2], int k) {
    return _mm512_and_si512(_mm512_srli_epi32(idx[k / 4], 8 * (k % 4)), _mm512_set1_epi32(0xFF));
}

// IQ3_XXS: a group is a super-block, its eight 32-element sub-blocks the steps (as Dec8Iq3Xxs).
struct Dec16Iq3Xxs {
    static constexpr int kOffset = 128;
    static constexpr bool kHasMin = false;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockIq3Xxs);
    using Dec8 = avx2::Dec8Iq3Xxs<true>;

    template <typename F>
    static void for_group(Rows16 rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(BlockIq3Xxs);
        const __m512 d = half_16(rows, off + offsetof(BlockIq3Xxs, d));
        for (int j = 0; j < 8; ++j) {
            const __m512i aux = gather_u32_16(rows, off + offsetof(BlockIq3Xxs, scales_signs) + 4 * j);
            const __m512i idx[2] = {gather_u32_16(rows, off + offsetof(BlockIq3Xxs, qs) + 8 * j),
                                    gather_u32_16(rows, off + offsetof(BlockIq3Xxs, qs) + 8 * j + 4)};
            const __m512i signs = iq3_xxs_signs_16(aux);
            Step16 s;
            const __m512 sc = _mm512_add_ps(_mm512_set1_ps(0.5f), _mm512_cvtepi32_ps(_mm512_srli_epi32(aux, 28)));
            s.ws = _mm512_mul_ps(_mm512_mul_ps(d, sc), _mm512_set1_ps(0.5f));
            for (int k = 0; k < 8; ++k)
                s.w[k] = apply_signs_16(grid_entries_16(kIq3XxsGrid, index_byte_16(idx, k)), signs, k);
            f(g * kGroupSteps + j, s);
        }
    }
};

// IQ3_S: as Dec8Iq3S, sixteen rows.
struct Dec16Iq3S {
    static constexpr int kOffset = 128;
    static constexpr bool kHasMin = false;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockIq3S);
    using Dec8 = avx2::Dec8Iq3S<true>;

    template <typename F>
    static void for_group(Rows16 rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(BlockIq3S);
        const __m512 d = half_16(rows, off + offsetof(BlockIq3S, d));
        const __m512i qh[2] = {gather_u32_16(rows, off + offsetof(BlockIq3S, qh)),
                               gather_u32_16(rows, off + offsetof(BlockIq3S, qh) + 4)};
        const __m512i scales = gather_u32_16(rows, off + offsetof(BlockIq3S, scales));
        for (int j = 0; j < 8; ++j) {
            const __m512i idx[2] = {gather_u32_16(rows, off + offsetof(BlockIq3S, qs) + 8 * j),
                                    gather_u32_16(rows, off + offsetof(BlockIq3S, qs) + 8 * j + 4)};
            const __m512i signs = gather_u32_16(rows, off + offsetof(BlockIq3S, signs) + 4 * j);
            const __m512i high = _mm512_slli_epi32(_mm512_srli_epi32(qh[j / 4], 8 * (j % 4)), 8);
            const __m512i s4 = _mm512_and_si512(_mm512_srli_epi32(scales, 4 * j), _mm512_set1_epi32(0xF));
            Step16 s;
            const __m512i odd = _mm512_add_epi32(_mm512_set1_epi32(1), _mm512_slli_epi32(s4, 1));  // 1 + 2 s
            s.ws = _mm512_mul_ps(d, _mm512_cvtepi32_ps(odd));
            for (int k = 0; k < 8; ++k) {
                const __m512i nine = _mm512_and_si512(_mm512_srli_epi32(high, k), _mm512_set1_epi32(0x100));
                const __m512i i = _mm512_or_si512(index_byte_16(idx, k), nine);
                s.w[k] = apply_signs_16(grid_entries_16(kIq3SGrid, i), signs, k);
            }
            f(g * kGroupSteps + j, s);
        }
    }
};

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS
