// What every AVX-512 kernel file shares (engine/cpu/x86/avx512/; CMakeLists.txt compiles this folder, and it
// alone, with the AVX-512 flags, and matmul.cpp calls into it only when the CPU has them). No std:: containers or
// fmt in these files (see kernels.h).
//
// The 4- and 5-bit types (Q4_0, Q4_1, Q5_0, Q5_1, and Q4_K, Q5_K as eight 32-blocks per super-block) go sixteen rows
// at a time with the rows in the 32-bit lanes (Step16, lanes.h): one vpdpbusd multiplies sixteen rows with four
// broadcast activations, and each lane ends a block holding its row's exact integer dot product, so the float work
// of a block is one convert, multiply and fma for sixteen rows. Prefill decodes a row tile once and runs up to 8
// tokens over it; decode (fewer than 4 tokens) runs the same lane arithmetic eight rows at a time in 256-bit
// vectors, decoded as it goes by the AVX2 folder's eight-row decoders.
// Q6_K goes four rows at a time, interleaved by the decoders (decoders.h) so that one vpdpbusd
// multiplies a 16-element quarter of all four rows (one per 128-bit lane) with a token's quarter broadcast to every
// lane; one accumulator per token then holds the four rows (lane 4r + g: row r).
//  - Decode (fewer than 8 tokens, 4 at a time): the rows are decoded as the tile walks them, unsigned bytes u
//    against the signed activations, with c * sum(a) taken off each int32 lane.
//  - Prefill: the row tile is decoded once into PrefillStep form (signed weights u - c) and multiplied with up to
//    16 tokens at a time as unsigned activations a + 128; each decoded weight is reused by every token.
// Q8_0 decodes (fewer than 4 tokens) on the four-row kernels, with each block's four lanes of a row summed to the
// block's exact integer so that the arithmetic is the sixteen-row kernels', which take 4 tokens or more (the
// sixteen-row kernels decoded Q8_0 slower, large output matrices included).
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q5_K are read from PackedWeights where the backend packed them
// (packed_rows, and packed_k_rows over the layout the AVX2 kernels read), with the same bits as from the file's rows.
// With AMX (Isa::amx), 8 tokens or more of every sixteen-row type go through tile multiplies (rows16_amx), and the
// prompt tokens of F16 and BF16 weights through AMX-BF16 tiles of exactly split terms (float_rows_amx).
//
// The files: rows (the four-row kernels: Q6_K, Q8_0's decode), lanes (the sixteen-row kernels), pack
// (PackedWeights: the packer and the kernels that read it), amx (AMX-INT8 and AMX-BF16), float_rows (F32, F16,
// BF16), quantize (the activations' int8 form), search (greedy sampling's search of the logits), table (the kernel
// table by weight type), kv_ops (attention's primitives).
#pragma once

#include <cmath>
#include <optional>
#include <type_traits>
#include <utility>

#include "engine/cpu/kernels.h"

// tests/support/avx512_emulated.h builds these files a second time on SIMDe's portable AVX-512 (it defines
// QUILL_AVX512_EMULATED, provides the intrinsics, and names the namespace with QUILL_AVX512_NS), so that the tests
// run these kernels on machines without AVX-512.
#ifndef QUILL_AVX512_NS
#define QUILL_AVX512_NS avx512
#endif

#if defined(QUILL_AVX512_EMULATED) || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
                                       defined(__AVX512VNNI__) && defined(__F16C__))
#define QUILL_AVX512_BUILT 1
// GCC 12's AVX-512 intrinsics initialize their pass-through operands with `__m512 __Y = __Y;`, which -Wuninitialized
// reports after inlining (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#ifndef QUILL_AVX512_EMULATED
#include <immintrin.h>
#endif

#include "engine/cpu/x86/avx512/decoders.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && \
    !defined(QUILL_AVX512_EMULATED)
#define QUILL_AMX 1
#endif

namespace quill::cpu::QUILL_AVX512_NS {

// Each file's part of the kernel table (table.cpp).
void add_rows_kernels(KernelTable& table);
void add_lanes_kernels(KernelTable& table);
void add_float_rows_kernels(KernelTable& table);
void add_pack_kernels(KernelTable& table);
void add_amx_kernels(KernelTable& table);

namespace {

constexpr int kMaxTokens = 4;              // token columns of the decode tile
constexpr int kPrefillTokens = 16;         // token columns of the prefill tile
constexpr int kPrefillMinTokens = 8;       // below this, decoding the rows again for every 4 tokens is cheaper
constexpr int64_t kPrefetchBytes = 12288;  // how far ahead to prefetch weights (rounded up to whole row tiles)

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// kPrefetchBytes rounded up to whole row tiles.
inline int64_t prefetch_distance(size_t row_bytes) {
    const auto tile = 4 * static_cast<int64_t>(row_bytes);
    return (kPrefetchBytes + tile - 1) / tile * tile;
}

// The 4 rows of a tile, decoded as the tile walks them, with the same place in the rows a few tiles ahead
// prefetched into L2: rows are a few dozen cache lines, too short for the hardware prefetcher to learn each one,
// and prefetching into L2 rather than L1 lets many more misses be in flight.
template <typename Dec>
struct RowTile {
    static constexpr int64_t kStepBytes = Dec::kGroupBytes / Dec::kGroupSteps;
    const uint8_t* rows[4];
    int64_t prefetch;  // bytes from a row to the same place in a tile about kPrefetchBytes ahead
    typename Dec::State st;

    // Rows [r, r + nr) of w (a ragged tile repeats its last row).
    static RowTile at(const WeightMatrix& w, int64_t r, int nr) {
        RowTile tile{{}, prefetch_distance(w.row_bytes), {}};
        for (int i = 0; i < 4; ++i)
            tile.rows[i] = static_cast<const uint8_t*>(w.data) + (r + min64(i, nr - 1)) * static_cast<int64_t>(w.row_bytes);
        return tile;
    }
    void begin_group(int64_t g) { Dec::load_group(rows, g, st); }
    Step4 step(int64_t g, int k) {
        const int64_t at = prefetch + (g * Dec::kGroupSteps + k) * kStepBytes;
        for (int r = 0; r < 4; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(rows[r] + at), _MM_HINT_T1);
            // A step longer than a cache line (Q8_0's 68 bytes) needs a second one not to skip lines.
            if constexpr (kStepBytes > 64) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + at + 64), _MM_HINT_T1);
        }
        return Dec::step(rows, g, k, st);
    }
};

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS

#endif  // QUILL_AVX512_BUILT
