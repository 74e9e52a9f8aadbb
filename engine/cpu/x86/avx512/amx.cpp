// The AMX kernels (Isa::amx): AMX-INT8 over the sixteen-row types (amx.h), AMX-BF16 over F16 and BF16 weights,
// and the activations' bf16 tiles they read.
#include "engine/cpu/x86/avx512/amx.h"
#include "engine/cpu/x86/avx512/float_rows.h"
#include "engine/cpu/x86/avx512/rows.h"

// (not in the tests' SIMDe build: the backend calls the native one alone)
#if defined(QUILL_AVX512_BUILT) && !defined(QUILL_AVX512_EMULATED)

namespace quill::cpu::QUILL_AVX512_NS {

namespace {

#ifdef QUILL_AMX
void q8_0_rows_amx(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    if (args.n_tokens < kRows16MinTokens) return quant_rows<DecQ8_0>(args, r0, r1, scratch);
    rows16_amx<Dec16Q8_0>(args, r0, r1, scratch);
}
#endif

#ifdef QUILL_AMX
// ---- AMX-BF16: F16 and BF16 weights (Isa::amx), for every token but decode steps (Activations::set) ----
// TDPBF16PS multiplies pairs of bf16 values and accumulates in fp32. Weights and activations are split into bf16
// terms whose sum is exact: the value's top 16 bits (truncation), then the remainder (exact in fp32) split the same
// way: a float's 24 bits are three terms, an fp16 value's 11 bits two. A product of two terms is exact in fp32, so
// what a result carries beyond float_rows' exact products (F16 x fp16-rounded input, BF16 x float input) is only
// the fp32 accumulation, in another order. BF16 weights (one term) meet the input's three; F16 weights' two terms
// meet the fp16-rounded input's two: four tile multiplies per block, about 4x float_rows' fma rate.
// A tiles: sixteen weight rows x one 32-block, each row's 64 bytes as they lie, so BF16 rows load straight from the
// weights (F16 rows, and BF16 tiles that are ragged or end in a partial block, are split into scratch first). B
// tiles: PairActs. C: [16 rows, width tokens] fp32 for one token group, accumulating over the whole row. A token's
// chain of tile multiplies is the same whatever else is in the batch, a token alone included, so results are batch
// invariant.

// Tiles 0-3: C [16 rows, width tokens]; 4 and 5: A [16 rows, 32 bf16]; 6 and 7: B [16 pairs, width tokens].
inline void configure_pair_tiles(int width) {
    TileConfig c;
    for (int i : {0, 1, 2, 3, 6, 7}) c.rows[i] = 16, c.colsb[i] = static_cast<uint16_t>(4 * width);
    for (int i : {4, 5}) c.rows[i] = 16, c.colsb[i] = 64;
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
}

// 32 floats (v0: elements 0-15, v1: 16-31) split into Terms vectors of 32 bf16 each (in element order, so that
// dword k holds elements 2k and 2k + 1) whose sum is exact when the floats have at most 8 * Terms significant bits:
// each term is the top 16 bits of what is left (so VCVTNE2PS2BF16's rounding never applies).
template <int Terms>
[[gnu::always_inline]] inline void bf16_terms(__m512 v0, __m512 v1, __m512i* terms) {
    const __m512 top = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0xffff0000u)));
    for (int p = 0; p + 1 < Terms; ++p) {
        const __m512 h0 = _mm512_and_ps(v0, top), h1 = _mm512_and_ps(v1, top);
        terms[p] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(h1, h0));
        v0 = _mm512_sub_ps(v0, h0);
        v1 = _mm512_sub_ps(v1, h1);
    }
    terms[Terms - 1] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v1, v0));
}

// Elements [e, e + 32) of a row (zeros past n_in) as two float vectors.
template <typename Load>
[[gnu::always_inline]] inline void load_block32(const uint8_t* row, int64_t e, int64_t n_in, __m512& v0, __m512& v1) {
    if (e + 32 <= n_in) {
        v0 = Load::load(row, e);
        v1 = Load::load(row, e + 16);
        return;
    }
    const int64_t rem = n_in - e;
    const auto m0 = static_cast<__mmask16>(rem >= 16 ? 0xffff : (1u << rem) - 1);
    const auto m1 = static_cast<__mmask16>(rem > 16 ? (1u << (rem - 16)) - 1 : 0);
    v0 = Load::load(row, e, m0);
    v1 = Load::load(row, e + 16, m1);
}

// Prefetching of a thread's row tiles: a tile is sixteen rows read 64 bytes at a time, streams too short for the
// hardware prefetcher to learn. While block b of a tile is multiplied, block b + kPairAhead (of the next tile past
// the end) is prefetched into L2, every row of it.
constexpr int64_t kPairAhead = 8;
struct PairPrefetch {
    const uint8_t* const* rows = nullptr;  // the tile's rows; nullptr: no prefetching
    const uint8_t* const* next = nullptr;  // the next tile's rows, nullptr for the thread's last tile
    int64_t nb = 0;
    [[gnu::always_inline]] void at(int64_t b) const {
        if (rows == nullptr) return;
        int64_t t = b + kPairAhead;
        const uint8_t* const* r = rows;
        if (t >= nb) {
            if (next == nullptr) return;
            r = next;
            t -= nb;
        }
        // (asm: GCC 12 dropped these as _mm_prefetch after inlining)
        for (int i = 0; i < 16; ++i) __asm__ volatile("prefetcht1 %0" : : "m"(*(r[i] + 64 * t)));
    }
};

// Block b of sixteen rows (a ragged tile repeats its last row) as Terms A tiles: term p at out + 1024 p, row i's
// 64 bytes at 64 i.
template <typename Load, int Terms>
[[gnu::always_inline]] inline void stage_pair_block(const uint8_t* const* rows, int64_t b, int64_t n_in,
                                                    uint8_t* out) {
    for (int i = 0; i < 16; ++i) {
        __m512 v0, v1;
        load_block32<Load>(rows[i], 32 * b, n_in, v0, v1);
        __m512i terms[Terms];
        bf16_terms<Terms>(v0, v1, terms);
        for (int p = 0; p < Terms; ++p) _mm512_store_si512(out + p * 1024 + 64 * i, terms[p]);
    }
}

// Where a row tile's A tiles are: term p of block b at base + b * block_bytes + p * 1024, rows stride apart; or,
// when `stream` is set, made from those rows block by block as the pass comes to them, into a ring of four blocks
// at base (one pass over the tile: the conversion of a block overlaps the tile multiplies of the ones before).
struct PairRows {
    const uint8_t* base;
    int64_t block_bytes, stride;
    const uint8_t* const* stream = nullptr;
};

// One token group's tile multiplies for block b (A tiles loaded): c is a literal tile number (the tile
// instructions take no variables). BF16 weights: one A term x three B terms; F16: two x two.
#define QUILL_PAIR_GROUP(c)                                             \
    if constexpr (c < NG) {                                             \
        const uint8_t* x = bb + (c) * group_bytes;                      \
        if constexpr (WTerms == 2) {                                    \
            QUILL_TILE_LOAD_1K(6, x, b_stride);                         \
            QUILL_TILE_LOAD_1K(7, x + tile_bytes, b_stride);            \
            _tile_dpbf16ps(c, 4, 6);                                    \
            _tile_dpbf16ps(c, 4, 7);                                    \
            _tile_dpbf16ps(c, 5, 6);                                    \
            _tile_dpbf16ps(c, 5, 7);                                    \
        } else {                                                        \
            QUILL_TILE_LOAD_1K(6, x, b_stride);                         \
            _tile_dpbf16ps(c, 4, 6);                                    \
            QUILL_TILE_LOAD_1K(7, x + tile_bytes, b_stride);            \
            _tile_dpbf16ps(c, 4, 7);                                    \
            QUILL_TILE_LOAD_1K(6, x + 2 * tile_bytes, b_stride);        \
            _tile_dpbf16ps(c, 4, 6);                                    \
        }                                                               \
    }
#define QUILL_PAIR_STORE(c)                                             \
    if constexpr (c < NG) {                                             \
        QUILL_TILE_STORE_STRIDE(c, ctile, b_stride);                    \
        store_group((g0 + (c)) * p.width);                              \
    }

// Token groups [g0, g0 + NG) against one row tile: rows [r, r + nr) of the block; `next`, when set, the next row
// tile's rows, prefetched into L2 block by block.
template <typename Load, int WTerms, int NG>
void pair_pass(const PairRows& a, int64_t n_in, const PairActs& p, int64_t g0, const PairPrefetch& pf,
               float* ctile, OutputBlock& block, int64_t r, int nr) {
    constexpr int XTerms = WTerms == 2 ? 2 : 3;
    const int64_t b_stride = 4 * p.width, tile_bytes = 16 * b_stride;
    const int64_t group_bytes = p.nb * XTerms * tile_bytes;
    const uint8_t* bt = reinterpret_cast<const uint8_t*>(p.tiles) + g0 * group_bytes;
    if constexpr (NG > 0) _tile_zero(0);
    if constexpr (NG > 1) _tile_zero(1);
    if constexpr (NG > 2) _tile_zero(2);
    if constexpr (NG > 3) _tile_zero(3);
    // A streamed block is made two blocks before the tile unit loads it: a tile load cannot take data from stores
    // still in flight, and stores leave only when they retire, behind the tile multiplies before them.
    auto* ring = const_cast<uint8_t*>(a.base);
    auto stage = [&](int64_t b) {
        if (b < p.nb) stage_pair_block<Load, WTerms>(a.stream, b, n_in, ring + (b & 3) * WTerms * 1024);
    };
    if (a.stream != nullptr) {
        stage(0);
        stage(1);
    }
    for (int64_t b = 0; b < p.nb; ++b) {
        pf.at(b);
        const uint8_t* at = a.base + b * a.block_bytes;
        if (a.stream != nullptr) {
            stage(b + 2);
            at = ring + (b & 3) * WTerms * 1024;
        }
        QUILL_TILE_LOAD_1K(4, at, a.stride);
        if constexpr (WTerms == 2) QUILL_TILE_LOAD_1K(5, at + 1024, a.stride);
        const uint8_t* bb = bt + b * XTerms * tile_bytes;
        QUILL_PAIR_GROUP(0)
        QUILL_PAIR_GROUP(1)
        QUILL_PAIR_GROUP(2)
        QUILL_PAIR_GROUP(3)
    }
    auto store_group = [&](int64_t t0) {
        const int nt = static_cast<int>(min64(p.width, block.n_tokens - t0));
        for (int i = 0; i < nr; ++i) {
            for (int j = 0; j < nt; ++j) block.at(r + i, t0 + j) = ctile[i * p.width + j];
        }
    };
    QUILL_PAIR_STORE(0)
    QUILL_PAIR_STORE(1)
    QUILL_PAIR_STORE(2)
    QUILL_PAIR_STORE(3)
}
#undef QUILL_PAIR_GROUP
#undef QUILL_PAIR_STORE

// F16 (WTerms 2) and BF16 (WTerms 1) weights with AMX; float_rows when the activations were not made as PairActs.
template <typename Load, int WTerms>
void float_rows_amx(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    if (args.pairs == nullptr) return float_rows<Load>(args, r0, r1, scratch);
    const WeightMatrix& w = *args.w;
    const PairActs& p = *args.pairs;
    auto* staged = reinterpret_cast<uint8_t*>(scratch);  // [nb][WTerms] A tiles (scratch is 64-byte aligned)
    float* ctile = scratch + p.nb * WTerms * 256;        // [16, width]
    float* out = ctile + 256;
    const auto* base = static_cast<const uint8_t*>(w.data);
    const auto row_bytes = static_cast<int64_t>(w.row_bytes);
    const int64_t block_rows = OutputBlock::rows_for(args.n_tokens);
    configure_pair_tiles(p.width);
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        OutputBlock block{out, args.n_tokens, rb, min64(block_rows, r1 - rb)};
        for (int64_t r = rb; r < rb + block.n_rows; r += 16) {
            const int nr = static_cast<int>(min64(16, r1 - r));
            const uint8_t* rows[16];  // a ragged tile repeats its last row
            const uint8_t* next[16];  // the next tile's rows (repeating the range's last)
            for (int i = 0; i < 16; ++i) {
                rows[i] = base + (r + min64(i, nr - 1)) * row_bytes;
                next[i] = base + min64(r + 16 + i, r1 - 1) * row_bytes;
            }
            PairPrefetch pf{rows, r + 16 < r1 ? next : nullptr, p.nb};  // while staging, or in the first pass
            PairRows a{staged, WTerms * 1024, 64};
            if (WTerms == 1 && nr == 16 && w.n_in % 32 == 0) {
                a = {rows[0], 64, row_bytes};
            } else if (p.n_groups <= 4) {
                a.stream = rows;
            } else {  // staged once for several passes
                for (int64_t b = 0; b < p.nb; ++b) {
                    pf.at(b);
                    stage_pair_block<Load, WTerms>(rows, b, w.n_in, staged + b * WTerms * 1024);
                }
                pf.rows = nullptr;
            }
            for (int64_t g = 0; g < p.n_groups; g += 4, pf.rows = nullptr) {
                switch (min64(4, p.n_groups - g)) {
                    case 1:
                        pair_pass<Load, WTerms, 1>(a, w.n_in, p, g, pf, ctile, block, r, nr);
                        break;
                    case 2:
                        pair_pass<Load, WTerms, 2>(a, w.n_in, p, g, pf, ctile, block, r, nr);
                        break;
                    case 3:
                        pair_pass<Load, WTerms, 3>(a, w.n_in, p, g, pf, ctile, block, r, nr);
                        break;
                    default:
                        pair_pass<Load, WTerms, 4>(a, w.n_in, p, g, pf, ctile, block, r, nr);
                        break;
                }
            }
        }
        block.flush(args.y, w.n_out);
    }
    _tile_release();
}
#endif

}  // namespace

#ifdef QUILL_AMX
bool amx_built() { return true; }

void add_amx_kernels(KernelTable& table) {
    entry(table.amx, GgmlType::Q8_0) = {q8_0_rows_amx, true, false, true};
    entry(table.amx, GgmlType::Q4_0) = {rows16_amx<Dec16Q4_0>, true, false, true};
    entry(table.amx, GgmlType::Q4_1) = {rows16_amx<Dec16Q4_1>, true, false, true};
    entry(table.amx, GgmlType::Q5_0) = {rows16_amx<Dec16Q5_0>, true, false, true};
    entry(table.amx, GgmlType::Q5_1) = {rows16_amx<Dec16Q5_1>, true, false, true};
    entry(table.amx, GgmlType::Q4_K) = {rows16_amx<Dec16Q4_K>, true, false, true};
    entry(table.amx, GgmlType::Q5_K) = {rows16_amx<Dec16Q5_K>, true, false, true};
    entry(table.amx, GgmlType::F16) = {float_rows_amx<LoadF16, 2>, false, true};
    entry(table.amx, GgmlType::BF16) = {float_rows_amx<LoadBF16, 1>, false, true};
}

bool pair_tiles(const float* x, int64_t n_tokens, int64_t n_in, bool f16, const PairActs& shape, uint16_t* tiles,
                int64_t g0, int64_t g1) {
    const int width = shape.width;
    const int64_t nb = shape.nb, tile_words = 32 * width;
    // Token n's 32 bf16 of a block are sixteen dwords, column n of the tile: dword k goes to k * width + n.
    const __m512i column = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                              _mm512_set1_epi32(width));
    for (int64_t g = g0; g < g1; ++g) {
        for (int n = 0; n < width; ++n) {
            const int64_t t = g * width + n;
            for (int64_t b = 0; b < nb; ++b) {
                __m512 v0 = _mm512_setzero_ps(), v1 = _mm512_setzero_ps();
                if (t < n_tokens)
                    load_block32<LoadF32>(reinterpret_cast<const uint8_t*>(x + t * n_in), 32 * b, n_in, v0, v1);
                uint16_t* tile = tiles + (g * nb + b) * shape.parts * tile_words + 2 * n;
                __m512i terms[3];
                if (f16) {
                    v0 = _mm512_cvtph_ps(_mm512_cvtps_ph(v0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                    v1 = _mm512_cvtph_ps(_mm512_cvtps_ph(v1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                    bf16_terms<2>(v0, v1, terms);
                } else {
                    bf16_terms<3>(v0, v1, terms);
                }
                for (int p = 0; p < shape.parts; ++p)
                    _mm512_i32scatter_epi32(tile + p * tile_words, column, terms[p], 4);
            }
        }
    }
    return true;
}
#else
bool amx_built() { return false; }
bool pair_tiles(const float*, int64_t, int64_t, bool, const PairActs&, uint16_t*, int64_t, int64_t) { return false; }
void add_amx_kernels(KernelTable&) {}
#endif

}  // namespace quill::cpu::QUILL_AVX512_NS

#endif
