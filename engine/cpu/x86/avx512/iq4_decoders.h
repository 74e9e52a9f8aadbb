// Sixteen-row decoders of the non-linear 4-bit types (IQ4_NL, IQ4_XS, MXFP4) for the AVX-512 kernels. Included
// after decoders.h by the AVX-512 kernel files only.
//
// The values are the type's 16 levels plus 128 (vpshufb of the nibbles), unsigned bytes for vpdpbusd with the
// unified form's offset c = 128 (as Dec16Q8_0); the decode path's Dec8 gives the same bytes eight rows at a time.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <type_traits>

#include "engine/cpu/x86/avx2/iq4_decoders.h"
#include "engine/cpu/x86/avx512/decoders.h"

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

inline __m512i levels_512(const int8_t* v) {
    alignas(16) uint8_t t[16];
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(v[i] + 128);
    return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// The 16-bit values at rows[r] + off, zero-extended in lane r: two rows to a 64-bit integer register, as
// gather_u32_16.
inline __m512i gather_u16_16(Rows16 rows, size_t off) {
    long long pairs[8];
    for (int i = 0; i < 8; ++i) {
        const uint64_t lo = load_unaligned<uint16_t>(rows[2 * i] + off);
        const uint64_t hi = load_unaligned<uint16_t>(rows[2 * i + 1] + off);
        pairs[i] = static_cast<long long>(in_gpr(lo | (hi << 32)));
    }
    return _mm512_set_epi64(pairs[7], pairs[6], pairs[5], pairs[4], pairs[3], pairs[2], pairs[1], pairs[0]);
}

// As Dec8Table's load of 32 levels from the 16 bytes at rows[r] + off, sixteen rows.
inline void table_values_16(Rows16 rows, size_t off, __m512i levels, __m512i w[8]) {
    __m512i x[4];
    transpose_16x16(rows, off, x);
    for (int k = 0; k < 4; ++k) {
        w[k] = _mm512_shuffle_epi8(levels, low_nibbles(x[k]));
        w[4 + k] = _mm512_shuffle_epi8(levels, high_nibbles(x[k]));
    }
}

// MXFP4's scale from E8M0 bytes in the lanes, as mxfp4_scale.
inline __m512 mxfp4_scale_16(__m512i e) {
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(2), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, tiny));
}

template <typename Block>
struct Dec16Table {
    static constexpr bool kMxfp4 = std::is_same_v<Block, BlockMxfp4>;
    static constexpr int kOffset = 128;
    static constexpr bool kHasMin = false;
    static constexpr int kGroupSteps = 1;
    static constexpr int64_t kGroupBytes = sizeof(Block);
    using Dec8 = avx2::Dec8Table<Block, true>;

    template <typename F>
    static void for_group(Rows16 rows, int64_t b, F&& f) {
        const size_t off = static_cast<size_t>(b) * sizeof(Block);
        Step16 s;
        table_values_16(rows, off + offsetof(Block, qs), levels_512(kMxfp4 ? kMxfp4Values : kIq4nlValues), s.w);
        if constexpr (kMxfp4) {
            s.ws = mxfp4_scale_16(_mm512_and_si512(gather_u16_16(rows, off), _mm512_set1_epi32(0xFF)));
        } else {
            s.ws = half_16(rows, off + offsetof(Block, d));
        }
        f(b, s);
    }
};

// IQ4_XS: a group is a super-block, its eight 32-element sub-blocks the steps (as Dec8Iq4Xs).
struct Dec16Iq4Xs {
    static constexpr int kOffset = 128;
    static constexpr bool kHasMin = false;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockIq4Xs);
    using Dec8 = avx2::Dec8Iq4Xs<true>;

    template <typename F>
    static void for_group(Rows16 rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(BlockIq4Xs);
        const __m512 d = half_16(rows, off + offsetof(BlockIq4Xs, d));
        const __m512i high = gather_u16_16(rows, off + offsetof(BlockIq4Xs, scales_h));
        const __m512i low = gather_u32_16(rows, off + offsetof(BlockIq4Xs, scales_l));
        sub_blocks(g, d, high, low, [&](size_t at, __m512i x[4]) { transpose_16x16(rows, off + at, x); }, f);
    }

    // The same from a super-block whose 16-byte chunks come transposed: chunk(at, x) sets x to the four vectors
    // transpose_16x16 makes of the sixteen rows' bytes at + 0 .. 15 (the packed layout has them as they lie: PackedK16).
    // Lane r of the first vector of the chunk at 0 holds row r's d and scales_h, of the second its scales_l.
    template <typename C, typename F>
    [[gnu::always_inline]] static void steps(int64_t g, C&& chunk, F&& f) {
        __m512i head[4];
        chunk(0, head);
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head[0]));
        sub_blocks(g, d, _mm512_srli_epi32(head[0], 16), head[1], chunk, f);
    }

    // f(8 g + j, step) for the sub-blocks j in order, from the rows' d, scales_h and scales_l in the lanes.
    template <typename C, typename F>
    [[gnu::always_inline]] static void sub_blocks(int64_t g, __m512 d, __m512i high, __m512i low, C&& chunk, F&& f) {
        const __m512i levels = levels_512(kIq4nlValues);
        for (int j = 0; j < 8; ++j) {
            const __m512i ls = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(low, 4 * j), _mm512_set1_epi32(0xF)),
                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(high, 2 * j), _mm512_set1_epi32(3)), 4));
            Step16 s;
            s.ws = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
            __m512i x[4];
            chunk(offsetof(BlockIq4Xs, qs) + 16 * j, x);
            for (int k = 0; k < 4; ++k) {
                s.w[k] = _mm512_shuffle_epi8(levels, low_nibbles(x[k]));
                s.w[4 + k] = _mm512_shuffle_epi8(levels, high_nibbles(x[k]));
            }
            f(g * kGroupSteps + j, s);
        }
    }
};

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS
