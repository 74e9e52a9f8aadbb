// The AMX-INT8 tile machinery (amx_tile, amx_tokens) and rows16_amx, which the packed kernels share; empty where
// the compiler cannot build AMX (QUILL_AMX unset).
#pragma once

#include "engine/cpu/x86/avx512/common.h"
#include "engine/cpu/x86/avx512/lanes.h"

#ifdef QUILL_AVX512_BUILT

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

// ---- AMX-INT8: sixteen rows x sixteen tokens x one block per tile multiply (Isa::amx) ----
// The repacked row tile's eight vectors of a block are a B tile as TDPBSSD reads it (row k: four bytes of each of
// the sixteen rows), stored as signed u - c; sixteen tokens' int8 blocks (QuantizedActs::tile_qs) an A tile. One
// TDPBSSD gives C[t][r] = the exact int32 dot of block b for sixteen tokens and rows, the integer rows16_block
// computes; the float work that follows is rows16_block's, so a token's outputs have the same bits as on the avx512
// path. Blocks alternate between two C tiles so that the tile unit multiplies block b + 1 while the vector units
#ifdef QUILL_AMX

// Tiles 0 and 1: C [16 tokens, 16 rows] int32; 2 and 3: A [16 tokens, 32 bytes]; 4 and 5: B [8, 64 bytes].
struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Tile loads and stores that show the compiler the memory they touch (GCC's _tile_loadd names only the address, so
// stores that fill a buffer just before it could legally move past it; its _tile_stored clobbers all memory, which
// kept amx_tile's accumulators on the stack). Every tile here moves 512 bytes in (A, B) or 1 KiB out (C).
struct TileIn {
    char bytes[512];
};
struct TileOut {
    char bytes[1024];
};
struct TileIn1K {
    char bytes[1024];
};
#define QUILL_TILE_LOAD(tmm, base, stride)                                                                \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #tmm                                                  \
                     :                                                                                  \
                     : "r"(base), "r"(static_cast<long>(stride)), "m"(*reinterpret_cast<const TileIn*>(base)))
#define QUILL_TILE_STORE(tmm, base)                                                                       \
    __asm__ volatile("tilestored %%tmm" #tmm ", (%1,%2,1)"                                              \
                     : "=m"(*reinterpret_cast<TileOut*>(base))                                          \
                     : "r"(base), "r"(64L))
// The same for the 1 KiB operand tiles of the AMX-BF16 kernels and their results at any row stride (at most 64).
#define QUILL_TILE_LOAD_1K(tmm, base, stride)                                                             \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #tmm                                                  \
                     :                                                                                  \
                     : "r"(base), "r"(static_cast<long>(stride)), "m"(*reinterpret_cast<const TileIn1K*>(base)))
#define QUILL_TILE_STORE_STRIDE(tmm, base, stride)                                                        \
    __asm__ volatile("tilestored %%tmm" #tmm ", (%1,%2,1)"                                              \
                     : "=m"(*reinterpret_cast<TileOut*>(base))                                          \
                     : "r"(base), "r"(static_cast<long>(stride)))

inline void configure_tiles() {
    TileConfig c;
    for (int i : {0, 1}) c.rows[i] = 16, c.colsb[i] = 64;
    for (int i : {2, 3}) c.rows[i] = 16, c.colsb[i] = 32;
    for (int i : {4, 5}) c.rows[i] = 8, c.colsb[i] = 64;
    // Not _tile_loadconfig: GCC 12's macro hands the asm only the first 8 bytes of the config as its operand, and
    // the stores to the rest were dropped as dead (the tiles then stayed unconfigured: SIGILL at the first use).
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
}

// y[j * n_out + r] = row r of the tile against token t0 + j, j < n <= N, for the rows set in `rows`, from the
// repacked blocks (w signed) and token group t0 / 16 of the tile layout (its padding tokens are zeros); the first N
// of the sixteen results are scaled (all N, so that the accumulators stay in registers), the first n stored.
// Sixteen rows are a whole cache line of a token's outputs, so they go straight to y.
// Steps: a callable, steps(b) -> const Step16& (called in block order, each block once; the reference it gives
// stays valid until steps(b + 2) is called).
template <typename Dec, int N, typename Steps>
void amx_tile(Steps&& steps, int64_t nb, const QuantizedActs& q, int64_t t0, int n, float* y, int64_t n_out,
              __mmask16 rows) {
    static_assert(kAmxGroup == 16 && N <= 16);
    alignas(64) int32_t c[2][256];
    // acc is only ever indexed by constants (the folds over T below), so that the compiler can keep it in registers.
    __m512 acc[N];
    [&]<int... T>(std::integer_sequence<int, T...>) __attribute__((always_inline)) {
        ((acc[T] = _mm512_setzero_ps()), ...);
    }(std::make_integer_sequence<int, N>());
    const int8_t* a = q.tile_qs + 32 * tile_entry(q, t0, 0);  // [nb][16][32]; t0 starts a group
    const int64_t s0 = tile_scale_entry(q, t0, 0);
    const float* d = q.tile_d + s0;    // [2][nb][8]
    const float* ds = q.tile_ds + s0;  // [2][nb][8]
    const int64_t half = kTileScaleTokens * nb;
    const Step16* st[2];  // the blocks whose products tiles 0 and 1 hold
    auto scale = [&](int64_t b, const int32_t* cb, const Step16& sb) __attribute__((always_inline)) {
        const __m512 ws = sb.ws;
        // Token T's scales: its half group's, block b.
        auto at = [&](int t) __attribute__((always_inline)) {
            return t < kTileScaleTokens ? kTileScaleTokens * b + t : half + kTileScaleTokens * b + t - kTileScaleTokens;
        };
        [&]<int... T>(std::integer_sequence<int, T...>) __attribute__((always_inline)) {
            ((acc[T] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb + 16 * T)),
                                       _mm512_mul_ps(ws, _mm512_set1_ps(d[at(T)])), acc[T])),
             ...);
            if constexpr (Dec::kHasMin) ((acc[T] = _mm512_fmadd_ps(sb.wm, _mm512_set1_ps(ds[at(T)]), acc[T])), ...);
        }(std::make_integer_sequence<int, N>());
    };
    _tile_zero(0);
    QUILL_TILE_LOAD(2, a, 32);
    st[0] = &steps(0);
    QUILL_TILE_LOAD(4, st[0]->w, 64);
    _tile_dpbssd(0, 2, 4);
    for (int64_t b = 0; b < nb; b += 2) {
        if (b + 1 < nb) {
            _tile_zero(1);
            QUILL_TILE_LOAD(3, a + 512 * (b + 1), 32);
            st[1] = &steps(b + 1);
            QUILL_TILE_LOAD(5, st[1]->w, 64);
            _tile_dpbssd(1, 3, 5);
        }
        QUILL_TILE_STORE(0, c[0]);
        scale(b, c[0], *st[0]);
        if (b + 1 < nb) {
            if (b + 2 < nb) {
                _tile_zero(0);
                QUILL_TILE_LOAD(2, a + 512 * (b + 2), 32);
                st[0] = &steps(b + 2);
                QUILL_TILE_LOAD(4, st[0]->w, 64);
                _tile_dpbssd(0, 2, 4);
            }
            QUILL_TILE_STORE(1, c[1]);
            scale(b + 1, c[1], *st[1]);
        }
    }
    [&]<int... T>(std::integer_sequence<int, T...>) __attribute__((always_inline)) {
        ((T < n ? _mm512_mask_storeu_ps(y + T * n_out, rows, acc[T]) : void()), ...);
    }(std::make_integer_sequence<int, N>());
}

// Int8 activations per token chunk: the chunk's rows stay in L2 while every row tile of the range passes over them
// (a row tile is decoded again for each chunk).
constexpr int64_t kAmxChunkBytes = 1 << 20;

// Tokens per chunk: kAmxChunkBytes of activation rows, whole groups of 16, at least one.
inline int64_t amx_chunk_tokens(const QuantizedActs& q) {
    const int64_t tokens = kAmxChunkBytes / q.qs_stride / 16 * 16;
    return tokens > 16 ? tokens : 16;
}

// A decoded block as TDPBSSD multiplies it: signed weights u - c.
template <typename Dec>
inline void to_signed(Step16& st) {
    if constexpr (Dec::kOffset != 0) {
        for (__m512i& v : st.w) v = _mm512_sub_epi8(v, _mm512_set1_epi8(static_cast<char>(Dec::kOffset)));
    }
}

// Tokens [c0, c1) against a decoded row tile (signed steps), sixteen at a time; y: row r of token 0.
template <typename Dec>
void amx_tokens(const Step16* steps, int64_t nb, const QuantizedActs& q, int64_t c0, int64_t c1, float* y,
                int64_t n_out, __mmask16 mask) {
    auto at = [steps](int64_t b) -> const Step16& { return steps[b]; };
    for (int64_t t = c0; t < c1; t += 16) {
        const int nt = static_cast<int>(min64(16, c1 - t));
        if (nt > 8) {
            amx_tile<Dec, 16>(at, nb, q, t, nt, y + t * n_out, n_out, mask);
        } else {
            amx_tile<Dec, 8>(at, nb, q, t, nt, y + t * n_out, n_out, mask);
        }
    }
}

// Rows [r0, r1) of y for all tokens: rows16 below kAmxMinTokens tokens, else amx_tile over each row tile, decoded
// once per token chunk.
template <typename Dec>
void rows16_amx(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    if (args.n_tokens < kAmxMinTokens) return rows16<Dec>(args, r0, r1, scratch);
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32;
    auto* steps = reinterpret_cast<Step16*>(scratch);  // [nb]: the repacked row tile (scratch is 64-byte aligned)
    const auto* base = static_cast<const uint8_t*>(w.data);
    const auto tile_bytes = 16 * static_cast<int64_t>(w.row_bytes);
    const int64_t prefetch = (kPrefetchBytes + tile_bytes - 1) / tile_bytes * tile_bytes;
    if (q.tile_qs == nullptr) return rows16<Dec>(args, r0, r1, scratch);  // (the activations were made for avx512)
    const int64_t chunk = amx_chunk_tokens(q);
    configure_tiles();
    for (int64_t c0 = 0; c0 < args.n_tokens; c0 += chunk) {
        const int64_t c1 = min64(args.n_tokens, c0 + chunk);
        for (int64_t r = r0; r < r1; r += 16) {
            const int nr = static_cast<int>(min64(16, r1 - r));
            const uint8_t* rows[16];  // a ragged tile repeats its last row
            for (int i = 0; i < 16; ++i) rows[i] = base + (r + min64(i, nr - 1)) * static_cast<int64_t>(w.row_bytes);
            int64_t prefetched = 0;
            for (int64_t g = 0; g < nb / Dec::kGroupSteps; ++g) {
                prefetch_rows16(rows, prefetch, (g + 1) * Dec::kGroupBytes, &prefetched);
                Dec::for_group(rows, g, [&](int64_t b, const Step16& st) {
                    steps[b] = st;
                    to_signed<Dec>(steps[b]);
                });
            }
            amx_tokens<Dec>(steps, nb, q, c0, c1, args.y + r, w.n_out, static_cast<__mmask16>((1u << nr) - 1));
        }
    }
    _tile_release();
}
#endif

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS

#endif  // QUILL_AVX512_BUILT
