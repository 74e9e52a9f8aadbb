// AVX-512 kernels (F, BW, VL, DQ, VNNI). This file alone is compiled with those flags (see CMakeLists.txt) and
// matmul.cpp calls into it only when the CPU has them. No std:: containers or fmt here (see kernels.h).
//
// The 4- and 5-bit types (Q4_0, Q4_1, Q5_0, Q5_1, and Q4_K, Q5_K as eight 32-blocks per super-block) go sixteen rows
// at a time with the rows in the 32-bit lanes (Step16, rows16 below): one vpdpbusd multiplies sixteen rows with four
// broadcast activations, and each lane ends a block holding its row's exact integer dot product, so the float work
// of a block is one convert, multiply and fma for sixteen rows. Prefill decodes a row tile once and runs up to 8
// tokens over it; decode (fewer than 4 tokens) runs the same lane arithmetic eight rows at a time in 256-bit
// vectors, decoded as it goes by the AVX2 file's eight-row decoders.
// Q6_K goes four rows at a time, interleaved by the decoders (kernels_avx512_decoders.h) so that one vpdpbusd
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
#include <cmath>
#include <optional>
#include <type_traits>
#include <utility>

#include "engine/cpu/kernels.h"

// tests/avx512_emulated.cpp builds this file a second time on SIMDe's portable AVX-512 (it defines
// QUILL_AVX512_EMULATED, provides the intrinsics, and names the namespace with QUILL_AVX512_NS), so that the tests
// run these kernels on machines without AVX-512.
#ifndef QUILL_AVX512_NS
#define QUILL_AVX512_NS avx512
#endif

#if defined(QUILL_AVX512_EMULATED) || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
                                       defined(__AVX512VNNI__) && defined(__F16C__))
// GCC 12's AVX-512 intrinsics initialize their pass-through operands with `__m512 __Y = __Y;`, which -Wuninitialized
// reports after inlining (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#ifndef QUILL_AVX512_EMULATED
#include <immintrin.h>
#endif

#include "engine/cpu/kernels_avx512_decoders.h"
#include "engine/cpu/kernels_iq4_avx512_decoders.h"

namespace quill::cpu::QUILL_AVX512_NS {

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

// ---- decode tile: 4 rows x T tokens, rows decoded on the fly ----

// Whether the decoder's blocks end in an exact integer dot per row (see DecQ8_0).
template <typename Dec>
constexpr bool kExactBlocks = requires { requires Dec::kExactBlocks; };

// out[r][t] = the dot of row r with token t0 + t over the first n_groups groups. Each vpdpbusd multiplies a
// quarter of all 4 rows (lane r) with the token's quarter broadcast; c * (the lane's sum of a) is subtracted in
// int32, so each lane holds the exact sum of (u - c) * a that the prefill tile computes. The float minima come in
// through accm = sum over blocks (sub-blocks for the k-quants) of wm * ds, in block order (add_block_minima repeats
// it for the prefill path).
template <typename Dec, int T>
void decode_tile(RowTile<Dec>& tile, const QuantizedActs& q, int64_t t0, int64_t n_groups, float (*out)[kMaxTokens]) {
    constexpr int QG = Dec::kQuartersPerScale;
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(Dec::kOffset));
    const int8_t* a0 = q.qs + t0 * q.qs_stride;   // [T][qs_stride]
    const float* d0 = q.d + t0 * q.blk_stride;    // [T][blk_stride]
    const float* ds0 = q.ds + t0 * q.blk_stride;  // [T][blk_stride]
    __m512 acc[T];                                // lane 4r + g: row r
    __m128 accm[T];                               // element r: row r
    for (int t = 0; t < T; ++t) {
        acc[t] = _mm512_setzero_ps();
        accm[t] = _mm_setzero_ps();
    }
    for (int64_t g = 0; g < n_groups; ++g) {
        tile.begin_group(g);
#pragma GCC unroll 4
        for (int k = 0; k < Dec::kGroupSteps; ++k) {
            const int64_t s = g * Dec::kGroupSteps + k;  // elements [64 s, 64 s + 64)
            const Step4 w = tile.step(g, k);
            for (int j = 0; j < 4 / QG; ++j) {  // scale groups: 2 blocks, or 4 quarters for Q6_K
                const __m512 ws = w.ws[j * QG];
                const int64_t b = 2 * s + j * QG / 2;  // the activation block
                for (int t = 0; t < T; ++t) {
                    const int8_t* a = a0 + t * q.qs_stride + 64 * s + 16 * QG * j;
                    __m512i dot = _mm512_setzero_si512(), coff = _mm512_setzero_si512();
                    for (int i = 0; i < QG; ++i) {
                        const __m512i ai =
                            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * i)));
                        dot = _mm512_dpbusd_epi32(dot, w.u[j * QG + i], ai);
                        if constexpr (Dec::kOffset != 0) coff = _mm512_dpbusd_epi32(coff, offset, ai);
                    }
                    if constexpr (Dec::kOffset != 0) dot = _mm512_sub_epi32(dot, coff);
                    if constexpr (kExactBlocks<Dec>) {  // the block's integer dot in all four lanes of its row
                        static_assert(QG == 2);
                        // (byte shuffles: SIMDe, which the emulated build uses, has no _mm512_shuffle_epi32)
                        const __m512i swap64 = _mm512_set4_epi32(0x07060504, 0x03020100, 0x0F0E0D0C, 0x0B0A0908);
                        const __m512i swap32 = _mm512_set4_epi32(0x0B0A0908, 0x0F0E0D0C, 0x03020100, 0x07060504);
                        dot = _mm512_add_epi32(dot, _mm512_shuffle_epi8(dot, swap64));
                        dot = _mm512_add_epi32(dot, _mm512_shuffle_epi8(dot, swap32));
                    }
                    const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(d0[t * q.blk_stride + b]));
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[t]);
                    if constexpr (Dec::kHasMin)
                        accm[t] = _mm_fmadd_ps(w.wc[j], _mm_set1_ps(ds0[t * q.blk_stride + b]), accm[t]);
                }
            }
        }
    }
    for (int t = 0; t < T; ++t) {
        alignas(64) float lanes[16];
        alignas(16) float mins[4];
        _mm512_store_ps(lanes, acc[t]);
        _mm_store_ps(mins, accm[t]);
        for (int r = 0; r < 4; ++r) {
            if constexpr (kExactBlocks<Dec>) {
                out[r][t] = lanes[4 * r];  // the four lanes are the same chain
            } else {
                out[r][t] = (lanes[4 * r] + lanes[4 * r + 1]) + (lanes[4 * r + 2] + lanes[4 * r + 3]);
            }
            if constexpr (Dec::kHasMin) out[r][t] += mins[r];
        }
    }
}

// ---- prefill tile: the row tile decoded once, then up to 16 tokens at a time ----

// One 64-element step of a 4-row tile as Step4 lays it out (w[q] holds in its 128-bit lane r the 16 weights of
// quarter q of row r), as signed bytes (u - c). The activations go in as
// unsigned bytes (a + 128), so vpdpbusd adds 128 * sum(w), which init removes: init[j] is -128 times the
// weights' sum, per lane, over the quarters of scale group j (QG quarters share a scale).
template <int QG>
struct alignas(64) PrefillStep {
    __m512i w[4];
    __m512i init[4 / QG];
    __m512 ws[4 / QG];  // scale of group j, lane 4r + g: row r
};

// Decodes the whole row tile into out [n_groups * kGroupSteps] and its float minima into wm [2 * n_steps, 4] (block
// by block, element r: row r).
template <typename Dec, int QG = Dec::kQuartersPerScale>
void repack_tile(RowTile<Dec>& tile, int64_t n_groups, PrefillStep<QG>* out, float* wm) {
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(Dec::kOffset));
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t g = 0; g < n_groups; ++g) {
        tile.begin_group(g);
        for (int k = 0; k < Dec::kGroupSteps; ++k) {
            const int64_t s = g * Dec::kGroupSteps + k;
            const Step4 w = tile.step(g, k);
            PrefillStep<QG>& step = out[s];
            for (int i = 0; i < 4; ++i) step.w[i] = _mm512_sub_epi8(w.u[i], offset);
            for (int j = 0; j < 4 / QG; ++j) {
                __m512i sum = _mm512_setzero_si512();
                for (int i = 0; i < QG; ++i) sum = _mm512_dpbusd_epi32(sum, ones, step.w[j * QG + i]);
                step.init[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7));
                step.ws[j] = w.ws[j * QG];
            }
            if constexpr (Dec::kHasMin) {
                for (int i = 0; i < 2; ++i) _mm_storeu_ps(wm + 4 * (2 * s + i), w.wc[i]);
            }
        }
    }
}

// out[r][t] = the dot of row r of the repacked tile with token t0 + t over n_steps steps, minima excluded.
template <int QG, int T>
void prefill_tile(const PrefillStep<QG>* steps, int64_t n_steps, const QuantizedActs& q, int64_t t0,
                  float (*out)[kPrefillTokens]) {
    const uint8_t* au = q.qs_u + t0 * q.qs_stride;  // [T][qs_stride]: activations + 128
    const float* da = q.d + t0 * q.blk_stride;      // [T][blk_stride]
    __m512 acc[T];                                  // lane 4r + g: row r
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t s = 0; s < n_steps; ++s) {
        const PrefillStep<QG>& st = steps[s];
        for (int j = 0; j < 4 / QG; ++j) {
            const __m512 ws = st.ws[j];
            // Walk the tokens with one pointer each into the activations and their scales (16 pointers would not
            // fit in registers).
            const uint8_t* a = au + 64 * s + 16 * (j * QG);
            const float* d = da + 2 * s + j * QG / 2;  // the activation block of group j
            for (int t = 0; t < T; ++t, a += q.qs_stride, d += q.blk_stride) {
                __m512i dot = st.init[j];
                for (int i = 0; i < QG; ++i) {
                    const __m128i ai = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * i));
                    dot = _mm512_dpbusd_epi32(dot, _mm512_broadcast_i32x4(ai), st.w[j * QG + i]);
                }
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws, _mm512_set1_ps(*d)), acc[t]);
            }
        }
    }
    for (int t = 0; t < T; ++t) {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, acc[t]);
        for (int r = 0; r < 4; ++r)
            out[r][t] = (lanes[4 * r] + lanes[4 * r + 1]) + (lanes[4 * r + 2] + lanes[4 * r + 3]);
    }
}

template <int QG>
int prefill_tokens(const PrefillStep<QG>* steps, int64_t n_steps, const QuantizedActs& q, int64_t t0, int64_t left,
                   float (*out)[kPrefillTokens]) {
    if (left >= 16) return prefill_tile<QG, 16>(steps, n_steps, q, t0, out), 16;
    if (left >= 8) return prefill_tile<QG, 8>(steps, n_steps, q, t0, out), 8;
    if (left >= 4) return prefill_tile<QG, 4>(steps, n_steps, q, t0, out), 4;
    if (left >= 2) return prefill_tile<QG, 2>(steps, n_steps, q, t0, out), 2;
    return prefill_tile<QG, 1>(steps, n_steps, q, t0, out), 1;
}

// ---- quantized rows ----

// The scratch of a quantized kernel: the row tile's minima, its repacked steps and the output block.
template <typename Step>
struct QuantScratch {
    float* wm;            // [n_in / 32, 4]
    Step* repacked;       // [n_steps]
    float* output_block;  // see OutputBlock

    QuantScratch(float* scratch, int64_t n_in) {
        wm = scratch;  // within the [kRowTile, n_in / 16 + 16] floats scratch_floats sets aside for it
        float* p = scratch + (4 * (n_in / 16 + 16) + 15) / 16 * 16;
        repacked = reinterpret_cast<Step*>(p);
        output_block = p + (4 * n_in * 3 / 4 + 15) / 16 * 16;
    }
};

// Rows [r0, r1) of y for all tokens, a tile of 4 rows at a time, written a block of rows at a time.
template <typename Dec>
void quant_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    constexpr int QG = Dec::kQuartersPerScale;
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32;
    const int64_t n_groups = nb / (2 * Dec::kGroupSteps);
    const int64_t n_steps = n_groups * Dec::kGroupSteps, nb_main = 2 * n_steps;
    const QuantScratch<PrefillStep<QG>> sc(scratch, w.n_in);
    const bool prefill = args.n_tokens >= kPrefillMinTokens && q.qs_u != nullptr;
    const auto* base = static_cast<const uint8_t*>(w.data);
    const int64_t block_rows = OutputBlock::rows_for(args.n_tokens);
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        OutputBlock block{sc.output_block, args.n_tokens, rb, min64(block_rows, r1 - rb)};
        for (int64_t r = rb; r < rb + block.n_rows; r += 4) {
            const int nr = static_cast<int>(min64(4, r1 - r));
            RowTile<Dec> tile{{}, prefetch_distance(w.row_bytes), {}};
            for (int i = 0; i < 4; ++i) {  // a ragged tile repeats its last row
                tile.rows[i] = base + (r + min64(i, nr - 1)) * static_cast<int64_t>(w.row_bytes);
            }
            if (prefill) repack_tile(tile, n_groups, sc.repacked, sc.wm);
            for (int64_t t = 0; t < args.n_tokens;) {
                float out[4][kPrefillTokens];
                int nt;
                if (prefill) {
                    nt = prefill_tokens(sc.repacked, n_steps, q, t, args.n_tokens - t, out);
                } else {
                    nt = static_cast<int>(min64(kMaxTokens, args.n_tokens - t));
                    float part[4][kMaxTokens];
                    switch (nt) {
                        case 1:
                            decode_tile<Dec, 1>(tile, q, t, n_groups, part);
                            break;
                        case 2:
                            decode_tile<Dec, 2>(tile, q, t, n_groups, part);
                            break;
                        case 3:
                            decode_tile<Dec, 3>(tile, q, t, n_groups, part);
                            break;
                        default:
                            decode_tile<Dec, 4>(tile, q, t, n_groups, part);
                            break;
                    }
                    for (int i = 0; i < 4; ++i) {
                        for (int j = 0; j < nt; ++j) out[i][j] = part[i][j];
                    }
                }
                for (int i = 0; i < nr; ++i) {
                    for (int j = 0; j < nt; ++j) block.at(r + i, t + j) = out[i][j];
                }
                t += nt;
            }
            if constexpr (Dec::kHasMin) {
                if (prefill) {  // decode_tile added them; the prefill path adds them here, in the same order
                    add_block_minima(block, sc.wm, q, nb_main, r, nr);
                }
            }
            // A trailing odd 32-block, after everything else on both paths (with exact blocks, the chain's last fma).
            for (int64_t b = nb_main; b < nb; ++b) {
                for (int i = 0; i < nr; ++i) {
                    for (int64_t t = 0; t < args.n_tokens; ++t) {
                        if constexpr (kExactBlocks<Dec>) {
                            static_assert(std::is_same_v<Dec, DecQ8_0>);
                            const auto* blk = reinterpret_cast<const BlockQ8_0*>(tile.rows[i]) + b;
                            const int8_t* a = q.qs + t * q.qs_stride + 32 * b;
                            int32_t dot = 0;
                            for (int k = 0; k < 32; ++k) dot += int32_t{blk->qs[k]} * a[k];
                            const float scale = half_to_float(blk->d) * q.d[t * q.blk_stride + b];
                            block.at(r + i, t) = __builtin_fmaf(static_cast<float>(dot), scale, block.at(r + i, t));
                        } else {
                            block.at(r + i, t) += generic::block_dot(w.type, tile.rows[i], b, q, t);
                        }
                    }
                }
            }
        }
        block.flush(args.y, w.n_out);
    }
}

// ---- the 4- and 5-bit types: sixteen rows in lanes (Step16) ----
// One arithmetic on both paths, so that it is batch invariant: for row r and token t, block by block in order,
// I = the exact int32 sum over the block of (u - c) * qa, acc = fma(float(I), ws * da, acc), then with a minimum
// acc = fma(wm, ds, acc); y = acc. The decode path decodes each block of the sixteen rows as it goes; the prefill
// path decodes the row tile once into Step16 form and runs up to kRows16Tokens tokens at a time over it.

constexpr int kRows16Tokens = 8;
constexpr int kRows16MinTokens = 4;  // from this many tokens on, the row tile is decoded once for all of them

// Token t's activations: its int8 blocks, their scales, float sums and (for c != 0) integer sums.
struct TokenActs {
    const int8_t* qs;
    const float* d;
    const float* ds;
    const int32_t* isum;
    TokenActs() = default;
    TokenActs(const QuantizedActs& q, int64_t t)
        : qs(q.qs + t * q.qs_stride), d(q.d + t * q.blk_stride), ds(q.ds + t * q.blk_stride),
          isum(q.isum + t * q.blk_stride) {}
};

// acc + vpdpbusd(w, the four bytes at a in every lane), with the broadcast inside the instruction ({1toN}: one
// micro-fused load). GCC 12 emits a vpbroadcastd and then the multiply, an instruction more for every multiply,
// which slowed the sixteen-row tiles of a batched decode. The same instruction, so the same bits; the emulated build
// keeps the intrinsics.
template <typename V>
[[gnu::always_inline]] inline V dpbusd_broadcast(V acc, V w, const int8_t* a) {
#ifdef QUILL_AVX512_EMULATED
    if constexpr (sizeof(V) == 64)
        return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(load_unaligned<int32_t>(a)));
    else
        return _mm256_dpbusd_epi32(acc, w, _mm256_set1_epi32(load_unaligned<int32_t>(a)));
#else
    if constexpr (sizeof(V) == 64)
        asm("vpdpbusd %1%{1to16%}, %2, %0" : "+v"(acc) : "m"(*reinterpret_cast<const int32_t*>(a)), "v"(w));
    else
        asm("vpdpbusd %1%{1to8%}, %2, %0" : "+v"(acc) : "m"(*reinterpret_cast<const int32_t*>(a)), "v"(w));
    return acc;
#endif
}

// acc += the block's exact integer dots scaled: fma(float(dot), ws * da, acc), then with a minimum fma(wm, ds, acc).
// Every sixteen-row path ends a block here, so that a token's outputs have the same bits on all of them.
template <typename Dec>
[[gnu::always_inline]] inline void scale_block(const Step16& st, __m512i dot, float da, float ds, __m512& acc) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(st.ws, _mm512_set1_ps(da)), acc);
    if constexpr (Dec::kHasMin) acc = _mm512_fmadd_ps(st.wm, _mm512_set1_ps(ds), acc);
}

// The exact integer dots of a block of the sixteen rows with one token's 32 values a (their sum isum), the first
// chain starting from -c * isum (the unsigned weights' offset). Two chains halve the latency of a token's block;
// one saves their sum where other tokens' blocks hide the latency (rows16_group).
template <typename Dec, int Chains = 2>
[[gnu::always_inline]] inline __m512i block_dot(const Step16& st, const int8_t* a, int32_t isum) {
    static_assert(Chains == 1 || Chains == 2);
    __m512i dot[2] = {Dec::kOffset != 0 ? _mm512_set1_epi32(-Dec::kOffset * isum) : _mm512_setzero_si512(),
                      _mm512_setzero_si512()};
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k)
        dot[k % Chains] = dpbusd_broadcast(dot[k % Chains], st.w[k], a + 4 * k);
    return Chains == 1 ? dot[0] : _mm512_add_epi32(dot[0], dot[1]);
}

// Adds block b of the sixteen rows to a token's accumulator.
template <typename Dec>
inline void rows16_block(const Step16& st, const TokenActs& ta, int64_t b, __m512& acc) {
    scale_block<Dec>(st, block_dot<Dec>(st, ta.qs + 32 * b, ta.isum[b]), ta.d[b], ta.ds[b], acc);
}

// Tokens t0.. of one group of the tile layout (QuantizedActs::tile_qs): token t0 + t's block b at qs + 512 * b +
// 32 * t, its scale at d[8 * b + t] while t0 + t lies in t0's half group, at d[half + 8 * b + t - 8] in the next
// half (and ds, isum): eight tokens' block from one address, where the token-major rows need a register per token
// and array (the sixteen-row tiles spilled them).
struct GroupedActs {
    const int8_t* qs = nullptr;
    const float* d = nullptr;
    const float* ds = nullptr;
    const int32_t* isum = nullptr;
    int64_t half = 0;  // from a half group's scales to the next half's
    GroupedActs() = default;
    GroupedActs(const QuantizedActs& q, int64_t t0) {
        qs = q.tile_qs + 32 * tile_entry(q, t0, 0);
        const int64_t e = tile_scale_entry(q, t0, 0);
        d = q.tile_d + e;
        ds = q.tile_ds + e;
        isum = q.tile_isum + e;
        half = kTileScaleTokens * (q.n_in / 32);
    }
};

// rows16_block for T tokens of the tile layout, all in one half group: each lane's operations are rows16_block's
// (the integer dot is exact whatever the order of its additions), one chain per token, the multiplies going k by k
// over the tokens.
template <typename Dec, int T>
[[gnu::always_inline]] inline void rows16_block_grouped(const Step16& st, const GroupedActs& g, int64_t b,
                                                        __m512* acc) {
    static_assert(T <= kTileScaleTokens);
    const int8_t* a = g.qs + 512 * b;
    const float* d = g.d + kTileScaleTokens * b;
    const float* ds = g.ds + kTileScaleTokens * b;
    const int32_t* isum = g.isum + kTileScaleTokens * b;
    __m512i dot[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
        dot[t] = Dec::kOffset != 0 ? _mm512_set1_epi32(-Dec::kOffset * isum[t]) : _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) dot[t] = dpbusd_broadcast(dot[t], st.w[k], a + 32 * t + 4 * k);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) scale_block<Dec>(st, dot[t], d[t], ds[t], acc[t]);
}

// The packed records of the row tile after the one being multiplied, prefetched into L2 a record per block by the
// multiply (rec == nullptr: none). Prefetched all at once before the multiply, as the unpacked path does, they
// filled the line-fill buffers and stalled the decode of the records in between; spread over the multiply, the
// loads overlap its arithmetic. Spread over two passes of tokens (every 2, phases 0 and 1) rather than all in the
// first, which decodes the records too: there they waited on full miss queues. Prefetching two tiles ahead was
// slower.
struct NextRecords {
    const uint8_t* rec = nullptr;
    int64_t bytes = 0;  // of a record
    int every = 1, phase = 0;  // the records b with b % every == phase

    // Issued at block b of the multiply.
    [[gnu::always_inline]] void at(int64_t b) const {
        if (rec == nullptr || b % every != phase) return;
        for (int64_t o = 0; o < bytes; o += 64)
            _mm_prefetch(reinterpret_cast<const char*>(rec + b * bytes + o), _MM_HINT_T1);
    }
};

// out[j][r] = row r of the tile against token t0 + j, j < T, from the repacked blocks; with Decode, the blocks are
// first decoded from the packed records (Dec::step) and stored into steps as they go, for the tile's other tokens:
// the records' loads then overlap this pass's arithmetic instead of stalling a pass of their own. Grouped: the
// tokens lie in one group of the tile layout, read from there (rows16_block_grouped).
template <typename Dec, int T, bool Decode = false, bool Grouped = false>
void rows16_tile(Step16* steps, int64_t nb, const QuantizedActs& q, int64_t t0, float (*out)[16],
                 NextRecords next = {}, const uint8_t* records = nullptr) {
    __m512 acc[T];
    TokenActs ta[T];
    GroupedActs g;
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
        if constexpr (!Grouped) ta[t] = TokenActs(q, t0 + t);
        acc[t] = _mm512_setzero_ps();
    }
    if constexpr (Grouped) g = GroupedActs(q, t0);
    auto block = [&](const Step16& st, int64_t b) {
        if constexpr (Grouped) {
            rows16_block_grouped<Dec, T>(st, g, b, acc);
        } else {
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) rows16_block<Dec>(st, ta[t], b, acc[t]);
        }
    };
    for (int64_t b = 0; b < nb; ++b) {
        next.at(b);
        if constexpr (Decode) {
            const Step16 st = Dec::step(records + b * Dec::kRecordBytes);
            steps[b] = st;
            block(st, b);
        } else {
            block(steps[b], b);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

// out[t][r] = row r of a packed tile against the sixteen tokens of the tile layout's group from t0, in one pass:
// each record is decoded once and multiplied by all of them a token at a time (rows16_block's block_dot and
// scale_block, so the same bits). Two passes of eight over decoded steps (rows16_tile)
// stored 640 bytes a block and read them back; this form keeps sixteen accumulators, the block's eight weight
// vectors, its scales and a token's chain in registers. One chain a token, not two: the sixteen tokens' chains
// overlap one another.
// The same over each_step(f), which calls f(b, step) for the tile's blocks in order (PackedK16's super-blocks),
// for the N tokens from t0 (N = 8: t0's half group).
template <typename Dec, int N = 16, typename Steps>
[[gnu::always_inline]] inline void group_tokens(const QuantizedActs& q, int64_t t0, float (*out)[16],
                                                Steps&& each_step) {
    static_assert(kAmxGroup == 16 && N <= 16);
    __m512 acc[N];
#pragma GCC unroll 16
    for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
    const GroupedActs g(q, t0);
    each_step([&](int64_t b, const Step16& st) __attribute__((always_inline)) {
        const int8_t* a = g.qs + 512 * b;
        const int64_t e = kTileScaleTokens * b;  // the first half group's scales at e, the second's at half + e
#pragma GCC unroll 16
        for (int t = 0; t < N; ++t) {
            const int64_t at = t < kTileScaleTokens ? e + t : g.half + e + t - kTileScaleTokens;
            scale_block<Dec>(st, block_dot<Dec, 1>(st, a + 32 * t, g.isum[at]), g.d[at], g.ds[at], acc[t]);
        }
    });
#pragma GCC unroll 16
    for (int t = 0; t < N; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

template <typename Dec>
void rows16_group(int64_t nb, const QuantizedActs& q, int64_t t0, float (*out)[16], NextRecords next,
                  const uint8_t* records) {
    group_tokens<Dec>(q, t0, out, [&](auto&& f) __attribute__((always_inline)) {
        for (int64_t b = 0; b < nb; ++b) {
            next.at(b);
            f(b, Dec::step(records + b * Dec::kRecordBytes));
        }
    });
}

// Prefetches the sixteen rows `prefetch` bytes ahead of each byte below `end` (from row starts) not prefetched
// yet; *done: how far that has gone, a cache line at a time.
inline void prefetch_rows16(Rows16 rows, int64_t prefetch, int64_t end, int64_t* done) {
    for (; *done < end; *done += 64) {
        for (int r = 0; r < 16; ++r) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + prefetch + *done), _MM_HINT_T1);
    }
}

// The decode path, eight rows at a time in 256-bit vectors, decoded as it goes by the AVX2 file's eight-row
// decoders (Dec::Dec8, kernels_avx2_decoders.h): with sixteen rows the sixteen row pointers and the gathers'
// temporaries no longer fit the integer registers, and the spills made decode slower than the four-row kernels
// before them (this form runs about level with those: Q4_K faster, Q4_0 slower). Each lane computes exactly what
// a lane of rows16_block computes (the same exact integer dot, then the same float operations), so a token's
// outputs have the same bits on both paths.
template <typename Dec>
inline void rows8_block(const avx2::Step8& st, const TokenActs& ta, int64_t b, __m256& acc) {
    const int8_t* a = ta.qs + 32 * b;  // [32]
    __m256i dot[2] = {Dec::kOffset != 0 ? _mm256_set1_epi32(-Dec::kOffset * ta.isum[b]) : _mm256_setzero_si256(),
                      _mm256_setzero_si256()};  // as in rows16_block
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k)
        dot[k % 2] = dpbusd_broadcast(dot[k % 2], st.w[k], a + 4 * k);
    const __m256i sum = _mm256_add_epi32(dot[0], dot[1]);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(st.ws, _mm256_set1_ps(ta.d[b])), acc);
    if constexpr (Dec::kHasMin) acc = _mm256_fmadd_ps(st.wm, _mm256_set1_ps(ta.ds[b]), acc);
}

// Eight rows `stride` bytes apart, addressed from two bases (rows 0 and 4) and the strides s and 3s, so that a
// row's address is one addressing mode and four registers hold all eight (eight pointers, with the gathers'
// temporaries, spill).
struct Strided8 {
    const uint8_t* base;
    const uint8_t* base4;
    int64_t s, s3;
    Strided8(const uint8_t* row0, int64_t stride) : base(row0), base4(row0 + 4 * stride), s(stride), s3(3 * stride) {}
    const uint8_t* operator[](int i) const {
        const uint8_t* b = i < 4 ? base : base4;
        switch (i % 4) {
            case 0:
                return b;
            case 1:
                return b + s;
            case 2:
                return b + 2 * s;
            default:
                return b + s3;
        }
    }
};

// out[t][8 half + r] = row r of the eight rows against token t0 + t, t < T (with `prefetch` bytes ahead in each
// row prefetched).
template <typename Dec, int T, typename R>
void rows8_decode(const R& rows, int64_t prefetch, int64_t nb, const QuantizedActs& q, int64_t t0, int half,
                  float (*out)[16]) {
    using Dec8 = typename Dec::Dec8;
    static_assert(Dec8::kGroupSteps == Dec::kGroupSteps && Dec8::kOffset == Dec::kOffset);
    __m256 acc[T];
    TokenActs ta[T];
    for (int t = 0; t < T; ++t) {
        ta[t] = TokenActs(q, t0 + t);
        acc[t] = _mm256_setzero_ps();
    }
    // Groups go kChunk at a time, each chunk's bytes of the rows a prefetch distance ahead prefetched first: a
    // line every 64 bytes or less, so no line is skipped, with no bookkeeping in the loop.
    constexpr int64_t kChunk = Dec::kGroupBytes >= 64 ? 1 : 64 / Dec::kGroupBytes;
    constexpr int kLines = static_cast<int>((kChunk * Dec::kGroupBytes + 63) / 64);
    const int64_t n_groups = nb / Dec::kGroupSteps;
    auto group = [&](int64_t g) {
        Dec8::for_group(rows, g, [&](int64_t b, const avx2::Step8& st) {
            for (int t = 0; t < T; ++t) rows8_block<Dec>(st, ta[t], b, acc[t]);
        });
    };
    int64_t g = 0;
    for (; g + kChunk <= n_groups; g += kChunk) {
        for (int l = 0; l < kLines; ++l) {
            for (int r = 0; r < 8; ++r)
                _mm_prefetch(reinterpret_cast<const char*>(rows[r] + prefetch + g * Dec::kGroupBytes + 64 * l),
                             _MM_HINT_T1);
        }
        for (int64_t k = 0; k < kChunk; ++k) group(g + k);
    }
    for (; g < n_groups; ++g) group(g);
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(out[t] + 8 * half, acc[t]);
}

template <typename Dec, int T>
void rows16_decode(Rows16 rows, int64_t prefetch, int64_t nb, const QuantizedActs& q, int64_t t0, float (*out)[16]) {
    const int64_t stride = rows[1] - rows[0];
    if (rows[15] - rows[0] == 15 * stride) {  // evenly spaced: a whole tile, or a single row repeated
        for (int half = 0; half < 2; ++half)
            rows8_decode<Dec, T>(Strided8(rows[8 * half], stride), prefetch, nb, q, t0, half, out);
    } else {
        for (int half = 0; half < 2; ++half) rows8_decode<Dec, T>(rows + 8 * half, prefetch, nb, q, t0, half, out);
    }
}

// Tokens [t0, t0 + T) for T = min(left, kRows16Tokens) (or 3 on the decode path); returns T. With records (packed
// types), the steps are decoded from them on the way (rows16_tile's Decode).
template <typename Dec>
int rows16_tokens(Step16* steps, Rows16 rows, int64_t prefetch, int64_t nb, const QuantizedActs& q, int64_t t0,
                  int64_t left, float (*out)[16], NextRecords next = {}, const uint8_t* records = nullptr) {
    if constexpr (requires { typename Dec::Dec8; }) {  // (Q8_0 decodes on the four-row kernels: q8_0_rows)
        if (steps == nullptr) {
            static_assert(kRows16MinTokens <= 4);
            if (left >= 3) return rows16_decode<Dec, 3>(rows, prefetch, nb, q, t0, out), 3;
            if (left == 2) return rows16_decode<Dec, 2>(rows, prefetch, nb, q, t0, out), 2;
            return rows16_decode<Dec, 1>(rows, prefetch, nb, q, t0, out), 1;
        }
    }
    // T tokens from t0, in the tile layout when the tokens lie in one half of one of its groups.
    auto pass = [&]<int T, bool Decode>() {
        if (q.tile_qs != nullptr && t0 % kTileScaleTokens + T <= kTileScaleTokens)
            rows16_tile<Dec, T, Decode, true>(steps, nb, q, t0, out, next, records);
        else
            rows16_tile<Dec, T, Decode>(steps, nb, q, t0, out, next, records);
        return T;
    };
    auto tokens = [&]<bool Decode>() {
        if (left >= 8) return pass.template operator()<8, Decode>();
        if (left >= 6) return pass.template operator()<6, Decode>();
        if (left >= 4) return pass.template operator()<4, Decode>();
        if (left >= 2) return pass.template operator()<2, Decode>();
        return pass.template operator()<1, Decode>();
    };
    if constexpr (requires { Dec::kRecordBytes; }) {
        if (records != nullptr) return tokens.template operator()<true>();
    }
    return tokens.template operator()<false>();
}

// Rows [r0, r1) of y for all tokens, sixteen rows at a time, written a block of rows at a time.
template <typename Dec>
void rows16(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32;
    const bool prefill = args.n_tokens >= kRows16MinTokens;
    static_assert(kRowTile == 16);
    auto* steps = reinterpret_cast<Step16*>(scratch);  // [nb]: the repacked row tile (scratch is 64-byte aligned)
    float* output_block = scratch + (nb * static_cast<int64_t>(sizeof(Step16)) / 4 + 15) / 16 * 16;
    const auto* base = static_cast<const uint8_t*>(w.data);
    const auto tile_bytes = 16 * static_cast<int64_t>(w.row_bytes);
    const int64_t prefetch = (kPrefetchBytes + tile_bytes - 1) / tile_bytes * tile_bytes;
    const int64_t block_rows = OutputBlock::rows_for(args.n_tokens);  // a multiple of 16 (kRowTile)
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        OutputBlock block{output_block, args.n_tokens, rb, min64(block_rows, r1 - rb)};
        for (int64_t r = rb; r < rb + block.n_rows; r += 16) {
            const int nr = static_cast<int>(min64(16, rb + block.n_rows - r));
            const uint8_t* rows[16];  // a ragged tile repeats its last row
            for (int i = 0; i < 16; ++i) rows[i] = base + (r + min64(i, nr - 1)) * static_cast<int64_t>(w.row_bytes);
            if (prefill) {
                int64_t prefetched = 0;
                for (int64_t g = 0; g < nb / Dec::kGroupSteps; ++g) {
                    prefetch_rows16(rows, prefetch, (g + 1) * Dec::kGroupBytes, &prefetched);
                    Dec::for_group(rows, g, [&](int64_t b, const Step16& st) { steps[b] = st; });
                }
            }
            for (int64_t t = 0; t < args.n_tokens;) {
                float out[kRows16Tokens][16];
                const int nt =
                    rows16_tokens<Dec>(prefill ? steps : nullptr, rows, prefetch, nb, q, t, args.n_tokens - t, out);
                for (int j = 0; j < nt; ++j)
                    for (int i = 0; i < nr; ++i) block.at(r + i, t + j) = out[j][i];
                t += nt;
            }
        }
        block.flush(args.y, w.n_out);
    }
}

// ---- AMX-INT8: sixteen rows x sixteen tokens x one block per tile multiply (Isa::amx) ----
// The repacked row tile's eight vectors of a block are a B tile as TDPBSSD reads it (row k: four bytes of each of
// the sixteen rows), stored as signed u - c; sixteen tokens' int8 blocks (QuantizedActs::tile_qs) an A tile. One
// TDPBSSD gives C[t][r] = the exact int32 dot of block b for sixteen tokens and rows, the integer rows16_block
// computes; the float work that follows is rows16_block's, so a token's outputs have the same bits as on the avx512
// path. Blocks alternate between two C tiles so that the tile unit multiplies block b + 1 while the vector units
// scale block b.
#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && \
    !defined(QUILL_AVX512_EMULATED)
#define QUILL_AMX 1

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

// ---- PackedWeights: the sixteen-row records read as they lie ----
// A record (packed_record_bytes) holds a block's values already in lanes and the sixteen scales side by side, so
// a Step16 is a few loads (and nibble masks) instead of a transpose and gathers, and the tiles are one stream.
// The arithmetic is rows16_block's (and amx_tile's), so results have the bits of the unpacked kernels.

template <GgmlType Type>
struct Packed16 {
    static constexpr bool kQ8 = Type == GgmlType::Q8_0;
    static constexpr bool kQ5 = Type == GgmlType::Q5_0 || Type == GgmlType::Q5_1;
    static constexpr int kOffset = kQ8 ? 128 : Type == GgmlType::Q4_0 ? 8 : Type == GgmlType::Q5_0 ? 16 : 0;
    static constexpr bool kHasMin = Type == GgmlType::Q4_1 || Type == GgmlType::Q5_1;
    static constexpr int64_t kRecordBytes = packed_record_bytes(Type);
    static constexpr int64_t kValueBytes = kQ8 ? 512 : 256;
    static constexpr int64_t kScalesAt = kValueBytes + (kQ5 ? 64 : 0);  // Q5_0, Q5_1: the rows' qh words first
    static_assert(kRecordBytes > 0);

    [[gnu::always_inline]] static Step16 step(const uint8_t* rec) {
        Step16 s;
        if constexpr (kQ8) {  // signed values flipped to unsigned (u = q + 128)
            for (int k = 0; k < 8; ++k)
                s.w[k] = _mm512_xor_si512(_mm512_loadu_si512(rec + 64 * k), _mm512_set1_epi8(static_cast<char>(0x80)));
        } else {
            for (int j = 0; j < 4; ++j) {
                const __m512i x = _mm512_loadu_si512(rec + 64 * j);
                s.w[j] = low_nibbles(x);
                s.w[4 + j] = high_nibbles(x);
            }
        }
        if constexpr (kQ5) {  // lane r's qh word spread: bit 8i + k the fifth bit of element 4k + i (byte i of w[k])
            const __m512i qh = _mm512_loadu_si512(rec + kValueBytes);
            for (int k = 0; k < 8; ++k) {
                const __mmask64 set = _mm512_test_epi8_mask(qh, _mm512_set1_epi8(static_cast<char>(1 << k)));
                s.w[k] = _mm512_mask_add_epi8(s.w[k], set, s.w[k], _mm512_set1_epi8(16));
            }
        }
        s.ws = _mm512_cvtph_ps(load256(rec + kScalesAt));
        if constexpr (kHasMin) s.wm = _mm512_cvtph_ps(load256(rec + kScalesAt + 32));
        return s;
    }
};

// The record kPrefetchBytes ahead of rec, into L2 (the packed tiles of a thread's rows are one stream).
template <typename P>
[[gnu::always_inline]] inline void prefetch_record(const uint8_t* rec) {
    for (int64_t o = 0; o < P::kRecordBytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(rec + kPrefetchBytes + o), _MM_HINT_T1);
}

#ifdef QUILL_AMX
// amx_tile's steps for a single token group, over the row tiles of a range one after another (their records are
// one stream): each record is decoded (signed) two blocks before the tile unit loads it, into a ring of four, so
// that the stores have reached the cache when the tile load reads them and the decode overlaps the tile work; the
// next row tile's first blocks are decoded while the one before ends (no stall on them at a tile's first multiply).
template <typename P>
struct StepStream {
    const uint8_t* records;  // the range's first row tile
    int64_t nb, total;       // blocks per row tile, in the range
    int64_t base = 0;        // the current row tile's first block in the stream
    Step16 ring[4];
    StepStream(const uint8_t* first, int64_t n, int64_t tiles) : records(first), nb(n), total(n * tiles) {
        for (int64_t g = 0; g < 2 && g < total; ++g) decode(g);
    }
    // (Inlined: a call inside amx_tile's loop would make its accumulators, caller-saved registers, live in memory.)
    [[gnu::always_inline]] void decode(int64_t g) {
        const uint8_t* rec = records + g * P::kRecordBytes;
        prefetch_record<P>(rec);
        Step16 st = P::step(rec);
        to_signed<P>(st);
        ring[g & 3] = st;
    }
    // Block b of the current row tile.
    [[gnu::always_inline]] const Step16& operator()(int64_t b) {
        const int64_t g = base + b;
        if (g + 2 < total) decode(g + 2);
        return ring[g & 3];
    }
    void next_tile() { base += nb; }
};
#endif

// out[t][r] = row r of a tile against token t0 + t, t < T (decode: the steps decoded as they stream by), from
// each_step(f), which calls f(b, step) for the tile's blocks in order.
template <typename Dec, int T, typename Steps>
[[gnu::always_inline]] inline void decode_tokens(const QuantizedActs& q, int64_t t0, float (*out)[16],
                                                 Steps&& each_step) {
    __m512 acc[T];
    TokenActs ta[T];
    for (int t = 0; t < T; ++t) {
        ta[t] = TokenActs(q, t0 + t);
        acc[t] = _mm512_setzero_ps();
    }
    each_step([&](int64_t b, const Step16& st) __attribute__((always_inline)) {
        for (int t = 0; t < T; ++t) rows16_block<Dec>(st, ta[t], b, acc[t]);
    });
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

// decode_tokens over a packed tile's records.
template <typename P, int T>
void packed_decode(const uint8_t* tile, int64_t nb, const QuantizedActs& q, int64_t t0, float (*out)[16]) {
    decode_tokens<P, T>(q, t0, out, [&](auto&& f) __attribute__((always_inline)) {
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* rec = tile + b * P::kRecordBytes;
            prefetch_record<P>(rec);
            f(b, P::step(rec));
        }
    });
}

// Rows [r0, r1) of y for all tokens from PackedWeights: decode below kRows16MinTokens tokens; exactly one group of
// the tile layout (a 16-sequence decode step) in one pass, rows16_group; more decode each tile into steps once and
// run rows16_tile over them, or with Amx from kAmxMinTokens on amx_tile (tokens in chunks).
template <typename P, bool Amx>
void packed_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32, n_tokens = args.n_tokens;
    const auto* packed = static_cast<const uint8_t*>(w.packed);
    const int64_t tile_bytes = nb * P::kRecordBytes;
    auto* steps = reinterpret_cast<Step16*>(scratch);  // [nb] (scratch is 64-byte aligned)
    const bool prefill = n_tokens >= kRows16MinTokens;
#ifdef QUILL_AMX
    const bool amx = Amx && n_tokens >= kAmxMinTokens && q.tile_qs != nullptr;
    if (amx) configure_tiles();
    const int64_t chunk = amx ? amx_chunk_tokens(q) : n_tokens;
    std::optional<StepStream<P>> stream;  // one token group's records, across the row tiles
#else
    const int64_t chunk = n_tokens;
#endif
    for (int64_t c0 = 0; c0 < n_tokens; c0 += chunk) {
        const int64_t c1 = min64(n_tokens, c0 + chunk);
        for (int64_t r = r0; r < r1; r += 16) {
            const auto mask = static_cast<__mmask16>((1u << min64(16, r1 - r)) - 1);
            const uint8_t* tile = packed + (r / 16) * tile_bytes;
#ifdef QUILL_AMX
            if (amx && c1 - c0 <= 16) {  // one token group: each record decoded as the tile unit comes to it
                if (r == r0) stream.emplace(tile, nb, (r1 - r0 + 15) / 16);
                const int nt = static_cast<int>(c1 - c0);
                float* y = args.y + c0 * w.n_out + r;
                if (nt > 8) {
                    amx_tile<P, 16>(*stream, nb, q, c0, nt, y, w.n_out, mask);
                } else {
                    amx_tile<P, 8>(*stream, nb, q, c0, nt, y, w.n_out, mask);
                }
                stream->next_tile();
                continue;
            }
#endif
#ifdef QUILL_AMX
            if (amx) {
                for (int64_t b = 0; b < nb; ++b) {
                    const uint8_t* rec = tile + b * P::kRecordBytes;
                    prefetch_record<P>(rec);
                    steps[b] = P::step(rec);
                    to_signed<P>(steps[b]);
                }
                amx_tokens<P>(steps, nb, q, c0, c1, args.y + r, w.n_out, mask);
                continue;
            }
#endif
            if (prefill && c1 - c0 == kAmxGroup && q.tile_qs != nullptr && c0 % kAmxGroup == 0) {  // one whole group
                float out[kAmxGroup][16];
                // The next tile's records even past r1: a thread's next rows usually follow (UnitRanges).
                rows16_group<P>(nb, q, c0, out, {r + 16 < w.n_out ? tile + tile_bytes : nullptr, P::kRecordBytes},
                                tile);
                float* y = args.y + c0 * w.n_out + r;
                for (int j = 0; j < kAmxGroup; ++j) _mm512_mask_storeu_ps(y + j * w.n_out, mask, _mm512_loadu_ps(out[j]));
                continue;
            }
            for (int64_t t = c0; t < c1;) {
                float* y = args.y + t * w.n_out + r;
                float out[kRows16Tokens][16];
                int nt;
                if (prefill) {  // the first tokens' multiply decodes the tile; the first passes prefetch the next one
                    // With two passes or more, the first two take every other record each.
                    const bool split = c1 - c0 > kRows16Tokens;
                    const bool prefetching = r + 16 < w.n_out && (t == c0 || (split && t == c0 + kRows16Tokens));
                    const NextRecords next{prefetching ? tile + tile_bytes : nullptr, P::kRecordBytes, split ? 2 : 1,
                                           t == c0 ? 0 : 1};
                    nt = rows16_tokens<P>(steps, nullptr, 0, nb, q, t, c1 - t, out, next, t == c0 ? tile : nullptr);
                } else if (c1 - t >= 3) {
                    packed_decode<P, 3>(tile, nb, q, t, out), nt = 3;
                } else if (c1 - t == 2) {
                    packed_decode<P, 2>(tile, nb, q, t, out), nt = 2;
                } else {
                    packed_decode<P, 1>(tile, nb, q, t, out), nt = 1;
                }
                for (int j = 0; j < nt; ++j) _mm512_mask_storeu_ps(y + j * w.n_out, mask, _mm512_loadu_ps(out[j]));
                t += nt;
            }
        }
    }
#ifdef QUILL_AMX
    if (amx) _tile_release();
#endif
}

// ---- Packed Q4_K and Q5_K: generic::pack_tiles' layout, which the AVX2 kernels read too ----
// A tile is two eight-row halves, each its rows' super-blocks in order, each super-block's 16-byte chunks as the
// four vectors of AVX2's transpose of eight rows; the two halves' 32 bytes side by side are the vectors
// transpose_16x16 makes of the sixteen rows, two loads each instead of a transpose, so Dec16K4::steps gives the
// steps (and the bits) of the file's layout from one stream a half.
template <typename Dec>
struct PackedK16 {
    static constexpr int64_t kSuperBytes = 8 * Dec::kGroupBytes;  // a super-block of eight rows
    int64_t half;                                                  // from half 0 of a tile to half 1
    const uint8_t* tile;
    PackedK16(const WeightMatrix& w, int64_t r)
        : half(w.n_in / 256 * kSuperBytes), tile(static_cast<const uint8_t*>(w.packed) + r / 16 * 2 * half) {}

    // f(b, step) for the sub-blocks b of super-block g, in order; the same share of `next` (the next tile, or
    // null) prefetched into L2, so that the next tile is in cache when this one ends.
    template <typename F>
    [[gnu::always_inline]] void for_group(int64_t g, const uint8_t* next, F&& f) const {
        const uint8_t* sb = tile + g * kSuperBytes;
        constexpr int64_t kLines = (kSuperBytes + 63) / 64;
        int64_t line = 0;
        Dec::steps(g, [&](size_t at, __m512i x[4]) __attribute__((always_inline)) {
            for (int k = 0; k < 4; ++k) {
                const uint8_t* p = sb + 8 * at + 32 * k;
                x[k] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(p)), load256(p + half), 1);
            }
        }, [&](int64_t b, const Step16& st) __attribute__((always_inline)) {
            // An eighth of the lines a sub-block: all of a super-block's at once filled the line-fill buffers and
            // stalled the loads.
            const int64_t upto = kLines * (b % 8 + 1) / 8;
            for (; next != nullptr && line < upto; ++line) {
                _mm_prefetch(reinterpret_cast<const char*>(next + g * kSuperBytes + 64 * line), _MM_HINT_T1);
                _mm_prefetch(reinterpret_cast<const char*>(next + half + g * kSuperBytes + 64 * line), _MM_HINT_T1);
            }
            f(b, st);
        });
    }
};

// decode_tokens over a packed K tile's super-blocks (sixteen rows a vector; each lane's operations are those of
// rows8_block, the unpacked decode path's).
template <typename Dec, int T>
void packed_k_decode(const PackedK16<Dec>& src, const uint8_t* next, int64_t nb, const QuantizedActs& q, int64_t t0,
                     float (*out)[16]) {
    decode_tokens<Dec, T>(q, t0, out, [&](auto&& f) __attribute__((always_inline)) {
        for (int64_t g = 0; g < nb / Dec::kGroupSteps; ++g) src.for_group(g, next, f);
    });
}

// Rows [r0, r1) of y for all tokens from packed Q4_K or Q5_K: decode below kRows16MinTokens tokens; more decode
// each tile into steps once and run rows16_tile over them, or with Amx from kAmxMinTokens on amx_tile (tokens in
// chunks, a tile decoded again for each).
template <typename Dec, bool Amx>
void packed_k_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32, n_tokens = args.n_tokens;
    auto* steps = reinterpret_cast<Step16*>(scratch);  // [nb] (scratch is 64-byte aligned)
    // One group of the tile layout, 8 to 16 tokens (decode steps of that many sequences): each super-block decoded
    // once and multiplied by the tokens in one pass (group_tokens for 8, 12 or 16 of them), on AMX too: decoding the
    // tile into steps for amx_tile and reading them back took longer at every count from 8 to 16, as did the
    // AVX-512 kernels' passes of eight over the steps.
    const bool one_group = n_tokens <= kAmxGroup && q.tile_qs != nullptr;
#ifdef QUILL_AMX
    const bool amx = Amx && n_tokens >= kAmxMinTokens && q.tile_qs != nullptr && !one_group;
    if (amx) configure_tiles();
    const int64_t chunk = amx ? amx_chunk_tokens(q) : n_tokens;
#else
    const int64_t chunk = n_tokens;
#endif
    for (int64_t c0 = 0; c0 < n_tokens; c0 += chunk) {
        const int64_t c1 = min64(n_tokens, c0 + chunk);
        for (int64_t r = r0; r < r1; r += 16) {
            const auto mask = static_cast<__mmask16>((1u << min64(16, r1 - r)) - 1);
            const PackedK16<Dec> src(w, r);
            // The next tile even past r1: a thread's next rows usually follow (UnitRanges).
            const uint8_t* next = r + 16 < w.n_out ? src.tile + 2 * src.half : nullptr;
            float out[kRows16Tokens][16];
            if (n_tokens < kRows16MinTokens) {
                for (int64_t t = c0; t < c1;) {
                    int nt = 1;
                    if (c1 - t >= 3) {
                        packed_k_decode<Dec, 3>(src, next, nb, q, t, out), nt = 3;
                    } else if (c1 - t == 2) {
                        packed_k_decode<Dec, 2>(src, next, nb, q, t, out), nt = 2;
                    } else {
                        packed_k_decode<Dec, 1>(src, next, nb, q, t, out);
                    }
                    for (int j = 0; j < nt; ++j)
                        _mm512_mask_storeu_ps(args.y + (t + j) * w.n_out + r, mask, _mm512_loadu_ps(out[j]));
                    t += nt;
                }
                continue;
            }
            if (one_group) {
                float group[kAmxGroup][16];
                auto each_step = [&](auto&& f) __attribute__((always_inline)) {
                    for (int64_t g = 0; g < nb / Dec::kGroupSteps; ++g) src.for_group(g, next, f);
                };
                if (n_tokens > 12) {  // (the tile layout's padding tokens are zeros)
                    group_tokens<Dec>(q, 0, group, each_step);
                } else if (n_tokens > 8) {
                    group_tokens<Dec, 12>(q, 0, group, each_step);
                } else {
                    group_tokens<Dec, 8>(q, 0, group, each_step);
                }
                for (int j = 0; j < n_tokens; ++j)
                    _mm512_mask_storeu_ps(args.y + j * w.n_out + r, mask, _mm512_loadu_ps(group[j]));
                continue;
            }
            for (int64_t g = 0; g < nb / Dec::kGroupSteps; ++g) {
                src.for_group(g, next, [&](int64_t b, const Step16& st) {
                    steps[b] = st;
#ifdef QUILL_AMX
                    if (amx) to_signed<Dec>(steps[b]);
#endif
                });
            }
#ifdef QUILL_AMX
            if (amx) {
                amx_tokens<Dec>(steps, nb, q, c0, c1, args.y + r, w.n_out, mask);
                continue;
            }
#endif
            for (int64_t t = c0; t < c1;) {
                const int nt = rows16_tokens<Dec>(steps, nullptr, 0, nb, q, t, c1 - t, out);
                for (int j = 0; j < nt; ++j)
                    _mm512_mask_storeu_ps(args.y + (t + j) * w.n_out + r, mask, _mm512_loadu_ps(out[j]));
                t += nt;
            }
        }
    }
#ifdef QUILL_AMX
    if (amx) _tile_release();
#endif
}

// Q8_0: decode on the four-row kernels (exact blocks), more tokens sixteen rows at a time (the same arithmetic).
void q8_0_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    if (args.n_tokens < kRows16MinTokens) return quant_rows<DecQ8_0>(args, r0, r1, scratch);
    rows16<Dec16Q8_0>(args, r0, r1, scratch);
}

#ifdef QUILL_AMX
void q8_0_rows_amx(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    if (args.n_tokens < kRows16MinTokens) return quant_rows<DecQ8_0>(args, r0, r1, scratch);
    rows16_amx<Dec16Q8_0>(args, r0, r1, scratch);
}
#endif

// ---- float weights: 4 rows x T tokens, 16 elements per step, the row converted in registers ----

struct LoadF32 {
    static constexpr int64_t kBytes = 4;
    static __m512 load(const uint8_t* row, int64_t i) {
        return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    static __m512 load(const uint8_t* row, int64_t i, __mmask16 m) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
    }
};

struct LoadF16 {
    static constexpr int64_t kBytes = 2;
    static __m512 load(const uint8_t* row, int64_t i) { return _mm512_cvtph_ps(load256(row + 2 * i)); }
    static __m512 load(const uint8_t* row, int64_t i, __mmask16 m) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
    }
};

struct LoadBF16 {
    static constexpr int64_t kBytes = 2;
    static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
    static __m512 load(const uint8_t* row, int64_t i) { return widen(load256(row + 2 * i)); }
    static __m512 load(const uint8_t* row, int64_t i, __mmask16 m) {
        return widen(_mm256_maskz_loadu_epi16(m, row + 2 * i));
    }
};

template <typename Load, int T>
void float_tile(const uint8_t* const* rows, int64_t prefetch, const float* x, int64_t n_in, int64_t t0,
                float (*out)[kMaxTokens]) {
    const float* xt[T];  // [T][n_in]
    for (int t = 0; t < T; ++t) xt[t] = x + (t0 + t) * n_in;
    __m512 acc[4][T];
    for (auto& row : acc) {
        for (auto& v : row) v = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= n_in; i += 16) {
        __m512 xv[T];
        for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(xt[t] + i);
        for (int r = 0; r < 4; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(rows[r] + prefetch + i * Load::kBytes), _MM_HINT_T1);
            const __m512 wv = Load::load(rows[r], i);
            for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    if (i < n_in) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n_in - i)) - 1);
        __m512 xv[T];
        for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, xt[t] + i);
        for (int r = 0; r < 4; ++r) {
            const __m512 wv = Load::load(rows[r], i, m);
            for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < 4; ++r) {
        for (int t = 0; t < T; ++t) out[r][t] = _mm512_reduce_add_ps(acc[r][t]);
    }
}

template <typename Load>
void float_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    const WeightMatrix& w = *args.w;
    const auto* base = static_cast<const uint8_t*>(w.data);
    const int64_t prefetch = prefetch_distance(w.row_bytes);
    const int64_t block_rows = OutputBlock::rows_for(args.n_tokens);
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        OutputBlock block{scratch, args.n_tokens, rb, min64(block_rows, r1 - rb)};
        for (int64_t r = rb; r < rb + block.n_rows; r += 4) {
            const int nr = static_cast<int>(min64(4, r1 - r));
            const uint8_t* rows[4];  // a ragged tile repeats its last row
            for (int i = 0; i < 4; ++i) rows[i] = base + (r + min64(i, nr - 1)) * static_cast<int64_t>(w.row_bytes);
            for (int64_t t = 0; t < args.n_tokens; t += kMaxTokens) {
                const int nt = static_cast<int>(min64(kMaxTokens, args.n_tokens - t));
                float out[4][kMaxTokens];
                switch (nt) {
                    case 1:
                        float_tile<Load, 1>(rows, prefetch, args.x, w.n_in, t, out);
                        break;
                    case 2:
                        float_tile<Load, 2>(rows, prefetch, args.x, w.n_in, t, out);
                        break;
                    case 3:
                        float_tile<Load, 3>(rows, prefetch, args.x, w.n_in, t, out);
                        break;
                    default:
                        float_tile<Load, 4>(rows, prefetch, args.x, w.n_in, t, out);
                        break;
                }
                for (int i = 0; i < nr; ++i) {
                    for (int j = 0; j < nt; ++j) block.at(r + i, t + j) = out[i][j];
                }
            }
        }
        block.flush(args.y, w.n_out);
    }
}

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

// ---- Activation quantization, sixteen blocks at a time (quantize_rows) ----

// Index vectors for folding pairs of vectors that each hold 16 / P blocks of P partial maxima (block j's in lanes
// [j * P, (j + 1) * P)) into one vector of twice the blocks with half the partials, blocks in order: lo gathers each
// block's first P / 2 partials (the first vector's blocks, then the second's), hi the other P / 2.
struct FoldIndex {
    __m512i lo[4], hi[4];  // for P = 16, 8, 4, 2
    FoldIndex() {
        for (int s = 0; s < 4; ++s) {
            const int p = 16 >> s;
            alignas(64) int32_t l[16], h[16];
            for (int lane = 0; lane < 16; ++lane) {
                const int j = lane % 8 / (p / 2), k = lane % 8 % (p / 2);
                l[lane] = (lane >= 8 ? 16 : 0) + j * p + k;
                h[lane] = l[lane] + p / 2;
            }
            lo[s] = _mm512_load_si512(l);
            hi[s] = _mm512_load_si512(h);
        }
    }
};

// Lane i: the largest lane of m[i] (max is exact, so the folding order does not matter).
inline __m512 lane_max16(__m512* m, const FoldIndex& f) {
    for (int s = 0, n = 16; s < 4; ++s, n /= 2)
        for (int i = 0; i < n / 2; ++i)
            m[i] = _mm512_max_ps(_mm512_permutex2var_ps(m[2 * i], f.lo[s], m[2 * i + 1]),
                                 _mm512_permutex2var_ps(m[2 * i], f.hi[s], m[2 * i + 1]));
    return m[0];
}

// generic::quantize_block's q for sixteen values: x * inv clamped to -127..127 (NaN to 0), rounded half away from
// zero (truncate, then a step away from zero when the rest is at least 1/2), as int32 (|y| <= 127: all exact).
inline __m512i quantize16(__m512 x, __m512 inv) {
    const __m512 raw = _mm512_mul_ps(x, inv);
    const __m512 y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(raw, raw, _CMP_ORD_Q),
                                         _mm512_min_ps(_mm512_max_ps(raw, _mm512_set1_ps(-127.0f)),
                                                       _mm512_set1_ps(127.0f)));
    const __m512i ti = _mm512_cvttps_epi32(y);
    const __m512 rest = _mm512_abs_ps(_mm512_sub_ps(y, _mm512_cvtepi32_ps(ti)));
    const __mmask16 up = _mm512_cmp_ps_mask(rest, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __mmask16 neg = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_add_epi32(ti, up, ti, _mm512_mask_blend_epi32(neg, _mm512_set1_epi32(1), _mm512_set1_epi32(-1)));
}

// Blocks [b0, b0 + n) of token t's row xr (n <= 16), as quantize_activations writes them.
inline void quantize_group(const float* xr, int64_t t, int64_t b0, int n, const QuantizedActs& out,
                           const FoldIndex& fold) {
    __m512 m[16];
    for (int i = 0; i < 16; ++i) {
        m[i] = i < n ? _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xr + 32 * (b0 + i))),
                                     _mm512_abs_ps(_mm512_loadu_ps(xr + 32 * (b0 + i) + 16)))
                     : _mm512_setzero_ps();
    }
    const __m512 d = _mm512_div_ps(lane_max16(m, fold), _mm512_set1_ps(127.0f));
    const __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ),
                                           _mm512_set1_ps(1.0f), d);
    // The scale kept is rounded to fp16 (to nearest even, as fp32_to_fp16).
    const __m512 scale = _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    alignas(64) float inv_l[16];
    _mm512_store_ps(inv_l, inv);
    // h16[k] lane 2j + h: half h of block 8k + j as the sum of its q + 128 (vpsadbw), less 16 * 128 at the end.
    __m512i h16[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    const __m512i from_halves = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const bool rows = out.qs != nullptr;  // else the tile layout alone
    int8_t* qr = rows ? out.qs + t * out.qs_stride + 32 * b0 : nullptr;
    uint8_t* ur = rows && out.qs_u != nullptr ? out.qs_u + t * out.qs_stride + 32 * b0 : nullptr;
    for (int i = 0; i < n; ++i) {
        const float* xb = xr + 32 * (b0 + i);
        const __m512 vi = _mm512_set1_ps(inv_l[i]);
        const __m256i q = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm512_cvtsepi32_epi8(quantize16(_mm512_loadu_ps(xb), vi))),
            _mm512_cvtsepi32_epi8(quantize16(_mm512_loadu_ps(xb + 16), vi)), 1);
        const __m256i u = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
        if (rows) _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + 32 * i), q);
        if (ur != nullptr) _mm256_storeu_si256(reinterpret_cast<__m256i*>(ur + 32 * i), u);
        if (out.tile_qs != nullptr)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.tile_qs + 32 * tile_entry(out, t, b0 + i)), q);
        // The sums of the four 8-byte runs, added in pairs: dword 0 holds half 0, dword 4 half 1.
        const __m256i runs = _mm256_sad_epu8(u, _mm256_setzero_si256());
        const __m512i halves = _mm512_castsi256_si512(
            _mm256_add_epi64(runs, _mm256_shuffle_epi32(runs, _MM_PERM_BADC)));
        const auto lanes = static_cast<__mmask16>(3u << (2 * (i % 8)));
        if (i < 8) {
            h16[0] = _mm512_mask_permutexvar_epi32(h16[0], lanes, from_halves, halves);
        } else {
            h16[1] = _mm512_mask_permutexvar_epi32(h16[1], lanes, from_halves, halves);
        }
    }
    for (__m512i& h : h16) h = _mm512_sub_epi32(h, _mm512_set1_epi32(16 * 128));
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i isum = _mm512_add_epi32(_mm512_permutex2var_epi32(h16[0], even, h16[1]),
                                          _mm512_permutex2var_epi32(h16[0], _mm512_add_epi32(even, _mm512_set1_epi32(1)),
                                                                    h16[1]));
    const __m512 ds = _mm512_mul_ps(scale, _mm512_cvtepi32_ps(isum));
    const __m512i pair = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512 ds16_lo = _mm512_mul_ps(_mm512_permutexvar_ps(pair, scale), _mm512_cvtepi32_ps(h16[0]));
    const __m512 ds16_hi = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_add_epi32(pair, _mm512_set1_epi32(8)), scale),
                                         _mm512_cvtepi32_ps(h16[1]));
    if (rows) {
        const auto mask = static_cast<__mmask16>((1u << n) - 1);
        const int64_t at = t * out.blk_stride + b0;
        _mm512_mask_storeu_ps(out.d + at, mask, scale);
        _mm512_mask_storeu_ps(out.ds + at, mask, ds);
        _mm512_mask_storeu_epi32(out.isum + at, mask, isum);
        _mm512_mask_storeu_ps(out.ds16 + 2 * at, static_cast<__mmask16>((1u << min64(2 * n, 16)) - 1), ds16_lo);
        if (n > 8)
            _mm512_mask_storeu_ps(out.ds16 + 2 * at + 16, static_cast<__mmask16>((1u << (2 * n - 16)) - 1), ds16_hi);
    }
    if (out.tile_qs != nullptr) {
        alignas(64) float sl[16], dsl[16];
        alignas(64) int32_t il[16];
        _mm512_store_ps(sl, scale);
        _mm512_store_ps(dsl, ds);
        _mm512_store_si512(il, isum);
        write_tile_scales(out, t, b0, n, sl, dsl, il);
    }
}

}  // namespace

bool quantize_blocks(const float* x, int64_t n_in, int64_t t0, int64_t t1, int64_t b0, int64_t b1,
                     const QuantizedActs& out) {
    const FoldIndex fold;
    for (int64_t t = t0; t < t1; ++t) {
        const float* xr = x + t * n_in;
        for (int64_t b = b0; b < b1; b += 16) quantize_group(xr, t, b, static_cast<int>(min64(16, b1 - b)), out, fold);
    }
    return true;
}

bool quantize_rows(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out) {
    return quantize_rows_by_blocks(quantize_blocks, x, n_in, t0, t1, out);
}

#ifndef QUILL_AVX512_EMULATED  // (not in the tests' SIMDe build: the backend calls the native one alone)
// Sixteen lanes, each the largest value it has seen and the first index where it saw it (a larger value replaces
// it; an equal one, or NaN, does not), and the lanes' finiteness; then the largest of the lanes and the smallest
// index among the lanes that hold it: the first index of the row's largest value. One pass instead of three (the
// check, the maximum, the search for its first index): 16 rows of 49152 logits each step of a 16-sequence batch.
bool greedy_search(const float* x, int64_t n_search, int64_t n, int64_t* first, bool* finite) {
    constexpr int kNonFinite = 0x01 | 0x80 | 0x08 | 0x10;  // fpclass: QNaN, SNaN, +inf, -inf
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    __m512i vidx = _mm512_set1_epi32(-1), at = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __mmask16 bad = 0;
    int64_t i = 0;
    for (; i + 16 <= n_search; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        bad |= _mm512_fpclass_ps_mask(v, kNonFinite);
        const __mmask16 gt = _mm512_cmp_ps_mask(v, vmax, _CMP_GT_OQ);
        vmax = _mm512_mask_mov_ps(vmax, gt, v);
        vidx = _mm512_mask_mov_epi32(vidx, gt, at);
        at = _mm512_add_epi32(at, _mm512_set1_epi32(16));
    }
    if (i < n_search) {
        const auto m = static_cast<__mmask16>((1u << (n_search - i)) - 1);
        const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i);
        bad |= _mm512_mask_fpclass_ps_mask(m, v, kNonFinite);
        const __mmask16 gt = _mm512_mask_cmp_ps_mask(m, v, vmax, _CMP_GT_OQ);
        vmax = _mm512_mask_mov_ps(vmax, gt, v);
        vidx = _mm512_mask_mov_epi32(vidx, gt, at);
        i = n_search;
    }
    for (; i < n; i += 16) {  // past the search: the check alone
        const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
        bad |= _mm512_mask_fpclass_ps_mask(m, _mm512_maskz_loadu_ps(m, x + i), kNonFinite);
    }
    *finite = bad == 0;
    const float best = _mm512_reduce_max_ps(vmax);
    if (best == -INFINITY) {  // no lane took a value: every value -inf or NaN (as first_max: the first -inf, or 0)
        *first = 0;
        for (int64_t j = 0; j < n_search; ++j)
            if (x[j] == best) {
                *first = j;
                break;
            }
        return true;
    }
    *first = _mm512_mask_reduce_min_epu32(_mm512_cmp_ps_mask(vmax, _mm512_set1_ps(best), _CMP_EQ_OQ), vidx);
    return true;
}
#endif

Kernel find_kernel(GgmlType type) {
    switch (type) {
        case GgmlType::F32:
            return {float_rows<LoadF32>, false};
        case GgmlType::F16:
            return {float_rows<LoadF16>, false};
        case GgmlType::BF16:
            return {float_rows<LoadBF16>, false};
        case GgmlType::Q4_0:
            return {rows16<Dec16Q4_0>, true};
        case GgmlType::Q4_1:
            return {rows16<Dec16Q4_1>, true};
        case GgmlType::Q5_0:
            return {rows16<Dec16Q5_0>, true};
        case GgmlType::Q5_1:
            return {rows16<Dec16Q5_1>, true};
        case GgmlType::Q8_0:
            return {q8_0_rows, true};
        case GgmlType::Q4_K:
            return {rows16<Dec16Q4_K>, true};
        case GgmlType::Q5_K:
            return {rows16<Dec16Q5_K>, true};
        case GgmlType::Q6_K:
            return {quant_rows<DecQ6_K>, true};
        case GgmlType::IQ4_NL:
            return {rows16<Dec16Table<BlockIq4Nl>>, true};
        case GgmlType::IQ4_XS:
            return {rows16<Dec16Iq4Xs>, true};
        case GgmlType::MXFP4:
            return {rows16<Dec16Table<BlockMxfp4>>, true};
        default:
            return {};
    }
}

#ifndef QUILL_AVX512_EMULATED
#ifdef QUILL_AMX
bool amx_built() { return true; }

Kernel find_kernel_amx(GgmlType type) {
    switch (type) {
        case GgmlType::Q8_0:
            return {q8_0_rows_amx, true, false, true};
        case GgmlType::Q4_0:
            return {rows16_amx<Dec16Q4_0>, true, false, true};
        case GgmlType::Q4_1:
            return {rows16_amx<Dec16Q4_1>, true, false, true};
        case GgmlType::Q5_0:
            return {rows16_amx<Dec16Q5_0>, true, false, true};
        case GgmlType::Q5_1:
            return {rows16_amx<Dec16Q5_1>, true, false, true};
        case GgmlType::Q4_K:
            return {rows16_amx<Dec16Q4_K>, true, false, true};
        case GgmlType::Q5_K:
            return {rows16_amx<Dec16Q5_K>, true, false, true};
        case GgmlType::F16:
            return {float_rows_amx<LoadF16, 2>, false, true};
        case GgmlType::BF16:
            return {float_rows_amx<LoadBF16, 1>, false, true};
        default:
            return {};
    }
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
Kernel find_kernel_amx(GgmlType) { return {}; }
#endif

namespace {

// generic::pack_tiles' layout of Q4_K and Q5_K: each 16-byte chunk of sixteen rows' super-blocks transposed once,
// its vectors' two halves stored to the tile's two halves.
void pack_k_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    const auto block_bytes = static_cast<int64_t>(row_size(w.type, 256));
    const int64_t n_groups = w.n_in / 256, half_bytes = n_groups * block_bytes * 8;
    for (int64_t tile = tile0; tile < tile1; ++tile) {
        const uint8_t* rows[16];
        for (int r = 0; r < 16; ++r) {  // a ragged tile repeats its last row
            const int64_t row = min64(tile * 16 + r, w.n_out - 1);
            rows[r] = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
        }
        auto* half0 = static_cast<uint8_t*>(out) + 2 * tile * half_bytes;
        for (int64_t g = 0; g < n_groups; ++g) {
            for (int64_t c = 0; c < block_bytes / 16; ++c) {
                __m512i x[4];
                transpose_16x16(rows, static_cast<size_t>(g * block_bytes + 16 * c), x);
                for (int k = 0; k < 4; ++k) {
                    auto* at = reinterpret_cast<__m256i*>(half0 + g * 8 * block_bytes + 128 * c + 32 * k);
                    _mm256_storeu_si256(at, _mm512_castsi512_si256(x[k]));
                    _mm256_storeu_si256(at + half_bytes / 32, _mm512_extracti64x4_epi64(x[k], 1));
                }
            }
        }
    }
}

}  // namespace

bool pack_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    if (w.type == GgmlType::Q4_K || w.type == GgmlType::Q5_K) return pack_k_tiles(w, out, tile0, tile1), true;
    if (w.type != GgmlType::Q4_0 && w.type != GgmlType::Q4_1 && w.type != GgmlType::Q8_0) return false;
    const int64_t record = packed_record_bytes(w.type), nb = w.n_in / 32;
    const bool q8 = w.type == GgmlType::Q8_0, has_min = w.type == GgmlType::Q4_1;
    const int64_t value_bytes = q8 ? 512 : 256;  // per record
    const auto block_bytes = static_cast<int64_t>(row_size(w.type, 32));
    const size_t qs_at = has_min ? offsetof(BlockQ4_1, qs) : q8 ? offsetof(BlockQ8_0, qs) : offsetof(BlockQ4_0, qs);
    static_assert(offsetof(BlockQ4_0, d) == 0 && offsetof(BlockQ8_0, d) == 0 && offsetof(BlockQ4_1, m) == 2);
    for (int64_t tile = tile0; tile < tile1; ++tile) {
        const uint8_t* rows[16];
        for (int r = 0; r < 16; ++r) {  // a ragged tile repeats its last row
            const int64_t row = min64(tile * 16 + r, w.n_out - 1);
            rows[r] = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
        }
        auto* rec = static_cast<uint8_t*>(out) + tile * nb * record;
        for (int64_t b = 0; b < nb; ++b, rec += record) {
            const auto off = static_cast<size_t>(b * block_bytes);
            for (int64_t half = 0; half < value_bytes / 256; ++half) {  // 16 bytes of each row per transpose
                __m512i x[4];
                transpose_16x16(rows, off + qs_at + 16 * half, x);
                for (int j = 0; j < 4; ++j) _mm512_storeu_si512(rec + 256 * half + 64 * j, x[j]);
            }
            for (int r = 0; r < 16; ++r) {
                std::memcpy(rec + value_bytes + 2 * r, rows[r] + off, 2);                        // d
                if (has_min) std::memcpy(rec + value_bytes + 32 + 2 * r, rows[r] + off + 2, 2);  // m
            }
        }
    }
    return true;
}

Kernel find_kernel_packed(GgmlType type, bool amx) {
    const bool tiles = amx && amx_built();  // (packed_rows' AMX path: the tile layout alone)
    switch (type) {
        case GgmlType::Q4_0:
            return {amx ? packed_rows<Packed16<GgmlType::Q4_0>, true> : packed_rows<Packed16<GgmlType::Q4_0>, false>,
                    true, false, tiles};
        case GgmlType::Q4_1:
            return {amx ? packed_rows<Packed16<GgmlType::Q4_1>, true> : packed_rows<Packed16<GgmlType::Q4_1>, false>,
                    true, false, tiles};
        case GgmlType::Q8_0:
            return {amx ? packed_rows<Packed16<GgmlType::Q8_0>, true> : packed_rows<Packed16<GgmlType::Q8_0>, false>,
                    true, false, tiles};
        case GgmlType::Q5_0:
            return {amx ? packed_rows<Packed16<GgmlType::Q5_0>, true> : packed_rows<Packed16<GgmlType::Q5_0>, false>,
                    true, false, tiles};
        case GgmlType::Q5_1:
            return {amx ? packed_rows<Packed16<GgmlType::Q5_1>, true> : packed_rows<Packed16<GgmlType::Q5_1>, false>,
                    true, false, tiles};
        case GgmlType::Q4_K:
            return {amx ? packed_k_rows<Dec16Q4_K, true> : packed_k_rows<Dec16Q4_K, false>, true, false, tiles};
        case GgmlType::Q5_K:
            return {amx ? packed_k_rows<Dec16Q5_K, true> : packed_k_rows<Dec16Q5_K, false>, true, false, tiles};
        default:
            return {};
    }
}
#endif

}  // namespace quill::cpu::QUILL_AVX512_NS

#else  // built without AVX-512 support in the compiler flags

namespace quill::cpu::avx512 {
Kernel find_kernel(GgmlType) { return {}; }
bool quantize_rows(const float*, int64_t, int64_t, int64_t, const QuantizedActs&) { return false; }
bool greedy_search(const float*, int64_t, int64_t, int64_t*, bool*) { return false; }
bool quantize_blocks(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, const QuantizedActs&) { return false; }
Kernel find_kernel_amx(GgmlType) { return {}; }
bool amx_built() { return false; }
Kernel find_kernel_packed(GgmlType, bool) { return {}; }
bool pack_tiles(const WeightMatrix&, void*, int64_t, int64_t) { return false; }
bool pair_tiles(const float*, int64_t, int64_t, bool, const PairActs&, uint16_t*, int64_t, int64_t) { return false; }
}  // namespace quill::cpu::avx512

#endif
