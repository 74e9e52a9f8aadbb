// Eight-row decoders of the non-linear 4-bit types (IQ4_NL, IQ4_XS, MXFP4) for the AVX2 kernels, and for the
// AVX-512 kernels' decode path (their Dec8). Included after decoders.h by the kernel files only.
//
// The nibbles are transposed and split as Dec8 does for Q4_0, then looked up in the type's 16 levels with vpshufb.
// The levels are signed (-127..113 for IQ4, -12..12 for MXFP4), so for vpmaddubsw the decoders give them signed
// (kSigned, as Q8_0: the kernels move the signs onto the activations); for vpdpbusd (Unsigned) they give them plus
// 128, the unified form's offset c = 128.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <type_traits>

#include "engine/cpu/kernels.h"
#include "engine/cpu/x86/avx2/decoders.h"

namespace quill::cpu::avx2 {
namespace {

// The 16 levels of a table (plus `add`, as bytes) in both 128-bit lanes, for vpshufb.
inline __m256i levels_256(const int8_t* v, int add) {
    alignas(16) uint8_t t[16];
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(v[i] + add);
    return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// The 16 bytes at rows[r] + off, 32 elements of each row as levels: w[k] (k < 4) the low nibbles of bytes
// 4k .. 4k + 3 (elements 4k ..), w[4 + k] their high nibbles (elements 16 + 4k ..), as Dec8::load's nibbles.
template <typename R>
inline void table_values(const R& rows, size_t off, __m256i levels, __m256i w[8]) {
    __m256i x[4];
    transpose_16(rows, off, x);
    for (int k = 0; k < 4; ++k) {
        w[k] = _mm256_shuffle_epi8(levels, low_nibbles(x[k]));
        w[4 + k] = _mm256_shuffle_epi8(levels, high_nibbles(x[k]));
    }
}

// MXFP4's scale from E8M0 bytes in the 32-bit lanes (0..255), as mxfp4_scale: 2^(e - 128), subnormal below e = 2.
inline __m256 mxfp4_scale_8(__m256i e) {
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, small));
}

// IQ4_NL and MXFP4: one 32-element block per step, a scale per block (fp16, or MXFP4's E8M0 byte).
template <typename Block, bool Unsigned>
struct Dec8Table {
    static constexpr bool kMxfp4 = std::is_same_v<Block, BlockMxfp4>;
    static constexpr int kOffset = Unsigned ? 128 : 0;
    static constexpr bool kSigned = !Unsigned, kHasMin = false;
    static constexpr int kGroupsPerMadd = 1;
    static constexpr int kGroupSteps = 1;
    static constexpr int64_t kGroupBytes = sizeof(Block);

    template <typename R, typename F>
    static void for_group(const R& rows, int64_t b, F&& f) {
        const size_t off = static_cast<size_t>(b) * sizeof(Block);
        Step8 s;
        table_values(rows, off + offsetof(Block, qs), levels_256(kMxfp4 ? kMxfp4Values : kIq4nlValues, kOffset), s.w);
        if constexpr (kMxfp4) {  // the byte e, read with the first byte of qs after it
            const __m256i e = _mm256_and_si256(_mm256_cvtepu16_epi32(gather_u16(rows, off)), _mm256_set1_epi32(0xFF));
            s.ws = mxfp4_scale_8(e);
        } else {
            s.ws = _mm256_cvtph_ps(gather_u16(rows, off + offsetof(Block, d)));
        }
        f(b, s);
    }
};

// Half h of a record of packed IQ4_NL (Q4_0's records: an IQ4_NL block is laid out as Q4_0's, the fp16 d and then
// the 16 bytes of nibbles): Packed8<Q4_0>'s nibbles looked up in the levels, signed as Dec8Table<BlockIq4Nl, false>
// gives them, so the same Step8 and the bits of the file's rows.
struct Packed8Iq4Nl {
    static constexpr int kOffset = 0;
    static constexpr bool kSigned = true, kHasMin = false, kRecordValues = false;
    static constexpr int kGroupsPerMadd = 1;
    static constexpr int kGroupSteps = 1;
    static constexpr int64_t kRecordBytes = packed_record_bytes(GgmlType::IQ4_NL);
    static_assert(kRecordBytes == Packed8<GgmlType::Q4_0>::kRecordBytes);

    static Step8 load(const uint8_t* rec, int h) {
        Step8 s = Packed8<GgmlType::Q4_0>::load(rec, h);
        const __m256i levels = levels_256(kIq4nlValues, kOffset);
        for (__m256i& w : s.w) w = _mm256_shuffle_epi8(levels, w);
        return s;
    }
};

// IQ4_XS: a group is a super-block, its eight 32-element sub-blocks the steps; sub-block j's scale is
// d * (ls_j - 32), ls_j = nibble j of scales_l with bits 2j, 2j + 1 of scales_h above it.
template <bool Unsigned>
struct Dec8Iq4Xs {
    static constexpr int kOffset = Unsigned ? 128 : 0;
    static constexpr bool kSigned = !Unsigned, kHasMin = false;
    static constexpr int kGroupsPerMadd = 1;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockIq4Xs);

    template <typename R, typename F>
    [[gnu::always_inline]] static void for_group(const R& rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(BlockIq4Xs);
        const __m256 d = _mm256_cvtph_ps(gather_u16(rows, off + offsetof(BlockIq4Xs, d)));
        const __m256i high = _mm256_cvtepu16_epi32(gather_u16(rows, off + offsetof(BlockIq4Xs, scales_h)));
        const __m256i low = gather_u32(rows, off + offsetof(BlockIq4Xs, scales_l));
        sub_blocks(g, d, high, low, [&](size_t at, __m256i x[4]) { transpose_16(rows, off + at, x); }, f);
    }

    // The same from a super-block whose 16-byte chunks come transposed: chunk(at, x) sets x to transpose_16's
    // vectors of the eight rows' bytes at + 0 .. 15 (PackedK8). Lane r of the first vector of the chunk at 0 holds
    // row r's d and scales_h, of the second its scales_l.
    template <typename C, typename F>
    [[gnu::always_inline]] static void steps(int64_t g, C&& chunk, F&& f) {
        __m256i head[4];
        chunk(0, head);
        // The low halves (d) of the eight lanes packed into 128 bits, exactly (each is below 65536).
        const __m256i d16 = _mm256_packus_epi32(_mm256_and_si256(head[0], _mm256_set1_epi32(0xFFFF)), _mm256_setzero_si256());
        const __m256 d = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(d16, 0x08)));
        sub_blocks(g, d, _mm256_srli_epi32(head[0], 16), head[1], chunk, f);
    }

    // f(8 g + j, step) for the sub-blocks j in order, from the rows' d, scales_h and scales_l in the lanes.
    template <typename C, typename F>
    [[gnu::always_inline]] static void sub_blocks(int64_t g, __m256 d, __m256i high, __m256i low, C&& chunk, F&& f) {
        const __m256i levels = levels_256(kIq4nlValues, kOffset);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const __m256i ls = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32(low, 4 * j), _mm256_set1_epi32(0xF)),
                _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(high, 2 * j), _mm256_set1_epi32(3)), 4));
            Step8 s;
            s.ws = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
            __m256i x[4];
            chunk(offsetof(BlockIq4Xs, qs) + 16 * j, x);
            for (int k = 0; k < 4; ++k) {
                s.w[k] = _mm256_shuffle_epi8(levels, low_nibbles(x[k]));
                s.w[4 + k] = _mm256_shuffle_epi8(levels, high_nibbles(x[k]));
            }
            f(g * kGroupSteps + j, s);
        }
    }
};

}  // namespace
}  // namespace quill::cpu::avx2
