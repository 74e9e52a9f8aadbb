// What every AVX2 kernel file shares (engine/cpu/x86/avx2/; CMakeLists.txt compiles this folder, and it alone,
// with the AVX2 flags, and matmul.cpp calls into it only when the CPU has them). No std:: containers or fmt in these
// files (see kernels.h).
//
// The 4- and 5-bit types (Q4_0, Q4_1, Q5_0, Q5_1, and Q4_K, Q5_K as eight 32-blocks per super-block) and Q8_0 go
// eight rows at a time with the rows in the 32-bit lanes (Step8, lanes.cpp): each lane ends a block holding its
// row's exact integer dot product, so the float work of a block is one convert, multiply and fma for eight rows.
// vpmaddubsw saturates past 32767, so Q8_0 keeps signed weights and moves their signs onto the activations.
// The other quantized weights (Q6_K, Q3_K, Q2_K) go four rows at a time as two row pairs, interleaved by the decoders
// (decoders.h) so that one vpmaddubsw + vpmaddwd multiplies a 16-element quarter of a row pair (one
// row per 128-bit lane) with a token's quarter broadcast to both lanes (int32 lanes 0..3: row 2p, 4..7: 2p + 1).
//  - Decode (fewer than 4 tokens, 2 at a time): the rows are decoded as the tile walks them, unsigned bytes u
//    against the signed activations, with c * sum(a) taken off each int32 lane; the 32-block types' minima are a
//    float term per block, wm * da * sum(a), the k-quants' per row at the end.
//  - Prefill: the row tile is decoded once into PrefillStep form (signed weights u - c) and multiplied, all four
//    rows at once, with up to 3 tokens at a time as unsigned activations a + 128; each decoded weight is reused by
//    every token, and each token's activations by the four rows.
// Batch invariance: both paths compute every output with the same float operations in the same order (the same
// exact int32 lane sums of (u - c) * a, scaled and accumulated block by block, the minima likewise), so a token's
// outputs have the same bits whether it is decoded alone or sits in a large batch.
//
// The files: rows (the four-row kernels: Q6_K, Q3_K, Q2_K), lanes (the eight-row kernels, from the file's rows and
// from PackedWeights, and eight tokens in lanes), scale16 (packed Q3_K eight rows at a time, the four-row kernels'
// bits), float_rows (F32, F16, BF16), quantize (the activations' int8 form
// and its lane layout), table (the kernel table by weight type), kv_ops (attention's primitives).
#pragma once

#include "engine/cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define QUILL_AVX2_BUILT 1
#include <immintrin.h>

#include "engine/cpu/x86/avx2/decoders.h"

namespace quill::cpu::avx2 {

// Each file's part of the kernel table (table.cpp).
void add_rows_kernels(KernelTable& table);
void add_lanes_kernels(KernelTable& table);
void add_float_rows_kernels(KernelTable& table);
void add_scale16_kernels(KernelTable& table);

namespace {

constexpr int kMaxTokens = 2;              // token columns of the decode tile (16 ymm registers)
constexpr int kPrefillTokens = 8;          // token columns of the prefill tile
// From this many tokens on, repacking a row tile once costs less than decoding its rows again for every 2 tokens:
// the repack is paid once a tile, the decoding once for each pair of tokens.
constexpr int kPrefillMinTokens = 4;
constexpr int64_t kPrefetchBytes = 12288;  // how far ahead to prefetch weights (rounded up to whole row tiles)

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// kPrefetchBytes rounded up to whole row tiles.
inline int64_t prefetch_distance(size_t row_bytes) {
    const auto tile = 4 * static_cast<int64_t>(row_bytes);
    return (kPrefetchBytes + tile - 1) / tile * tile;
}

inline float hsum(__m256 v) {
    const __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// Eight rows' runs of eight tokens (row k at r + k * stride) transposed in registers into y: token j's run of the
// rows at y + j * n_out, one store each (of the first nr rows: a masked one when nr < 8). Copies, not arithmetic.
inline void store_transposed(const float* r, int64_t stride, float* y, int64_t n_out, int nr = 8) {
    __m256 v[8];
    for (int k = 0; k < 8; ++k) v[k] = _mm256_loadu_ps(r + k * stride);
    const __m256 a0 = _mm256_unpacklo_ps(v[0], v[1]), a1 = _mm256_unpackhi_ps(v[0], v[1]);
    const __m256 a2 = _mm256_unpacklo_ps(v[2], v[3]), a3 = _mm256_unpackhi_ps(v[2], v[3]);
    const __m256 a4 = _mm256_unpacklo_ps(v[4], v[5]), a5 = _mm256_unpackhi_ps(v[4], v[5]);
    const __m256 a6 = _mm256_unpacklo_ps(v[6], v[7]), a7 = _mm256_unpackhi_ps(v[6], v[7]);
    const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
    const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
    const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
    const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
    const __m256 c[8] = {low_halves(b0, b4), low_halves(b1, b5), low_halves(b2, b6), low_halves(b3, b7),
                         high_halves(b0, b4), high_halves(b1, b5), high_halves(b2, b6), high_halves(b3, b7)};
    if (nr == 8) {
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(y + j * n_out, c[j]);
        return;
    }
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int j = 0; j < 8; ++j) _mm256_maskstore_ps(y + j * n_out, mask, c[j]);
}

// block.flush with 8x8 tiles transposed in registers: eight rows' runs of eight tokens become eight tokens' runs of
// eight rows, each one store. The values are copied, not computed: the result is block.flush's, bit for bit.
[[maybe_unused]] void flush_block(const OutputBlock& block, float* y, int64_t n_out) {
    const int64_t nt = block.n_tokens, nr = block.n_rows;
    int64_t i0 = 0;
    for (; i0 + 8 <= nr; i0 += 8) {
        int64_t t0 = 0;
        for (; t0 + 8 <= nt; t0 += 8)
            store_transposed(block.buf + i0 * nt + t0, nt, y + t0 * n_out + block.r0 + i0, n_out);
        for (; t0 < nt; ++t0)
            for (int k = 0; k < 8; ++k) y[t0 * n_out + block.r0 + i0 + k] = block.buf[(i0 + k) * nt + t0];
    }
    for (; i0 < nr; ++i0)
        for (int64_t t = 0; t < nt; ++t) y[t * n_out + block.r0 + i0] = block.buf[i0 * nt + t];
}


// Block b of a group of eight tokens (QuantizedActs::lanes, written by the quantization) as vectors: qs[k] lane j =
// bytes 4k .. 4k + 3 of token j's block, then each token's scale, d * sum and sum.
struct LaneBlock {
    __m256i qs[8];
    __m256 d, ds;
    __m256i isum;
};
static_assert(sizeof(LaneBlock) == sizeof(LaneActs));
}  // namespace
}  // namespace quill::cpu::avx2

#endif  // QUILL_AVX2_BUILT
