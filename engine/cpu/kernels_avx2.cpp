// AVX2 kernels (with FMA and F16C). This file alone is compiled with those flags (see CMakeLists.txt) and
// matmul.cpp calls into it only when the CPU has them. No std:: containers or fmt here (see kernels.h).
//
// The 4- and 5-bit types (Q4_0, Q4_1, Q5_0, Q5_1, and Q4_K, Q5_K as eight 32-blocks per super-block) and Q8_0 go
// eight rows at a time with the rows in the 32-bit lanes (Step8, rows8 below): each lane ends a block holding its
// row's exact integer dot product, so the float work of a block is one convert, multiply and fma for eight rows.
// vpmaddubsw saturates past 32767, so Q8_0 keeps signed weights and moves their signs onto the activations.
// The other quantized weights (Q6_K, Q3_K, Q2_K) go four rows at a time as two row pairs, interleaved by the decoders
// (kernels_avx2_decoders.h) so that one vpmaddubsw + vpmaddwd multiplies a 16-element quarter of a row pair (one
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
#include "engine/cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "engine/cpu/kernels_avx2_decoders.h"
#include "engine/cpu/kernels_iq4_avx2_decoders.h"

namespace quill::cpu::avx2 {

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

// The 4 rows of a tile, decoded as the tile walks them, with the same place in the rows a few tiles ahead
// prefetched into L2: rows are a few dozen cache lines, too short for the hardware prefetcher to learn each one,
// and prefetching into L2 rather than L1 lets many more misses be in flight.
template <typename Dec>
struct RowTile {
    static constexpr int64_t kStepBytes = Dec::kGroupBytes / Dec::kGroupSteps;
    const uint8_t* rows[4];
    float* wm;  // [4, wm_stride]: kRowMinima coefficients, written as groups are loaded
    int64_t wm_stride;
    int64_t prefetch;  // bytes from a row to the same place in a tile about kPrefetchBytes ahead
    typename Dec::State st;

    void begin_group(int64_t g) { Dec::load_group(rows, g, st, wm, wm_stride); }
    Step4 step(int64_t g, int k) {
        const int64_t at = prefetch + (g * Dec::kGroupSteps + k) * kStepBytes;
        static_assert(kStepBytes <= 64);  // one prefetch per step reaches every line
        for (int r = 0; r < 4; ++r) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + at), _MM_HINT_T1);
        return Dec::step(rows, g, k, st);
    }
};

inline __m256i broadcast_quarter(const int8_t* a) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
}

// ---- decode tile: 4 rows x T tokens, rows decoded on the fly ----

// out[r][t] = the dot of row r with token t0 + t over the first n_groups groups, except for the kRowMinima
// coefficients. Each vpmaddubsw multiplies a quarter of a row pair (lane i: row 2p + i) with the token's quarter
// broadcast to both lanes; c * (the lane's sum of a) is subtracted in int32, so each lane holds the exact sum of
// (u - c) * a that the prefill tile computes. The 32-block types' minima come in through accm = sum over blocks of
// wm * ds, in block order (add_block_minima repeats it for the prefill path).
template <typename Dec, int T>
void decode_tile(RowTile<Dec>& tile, const QuantizedActs& q, int64_t t0, int64_t n_groups, float (*out)[kMaxTokens]) {
    constexpr int QG = Dec::kQuartersPerScale;
    constexpr bool kBlockMinima = Dec::kHasMin && !Dec::kRowMinima;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i offset = _mm256_set1_epi8(static_cast<char>(Dec::kOffset));
    const int8_t* a0 = q.qs + t0 * q.qs_stride;   // [T][qs_stride]
    const float* d0 = q.d + t0 * q.blk_stride;    // [T][blk_stride]
    const float* ds0 = q.ds + t0 * q.blk_stride;  // [T][blk_stride]
    __m256 acc[T][2];                             // [token][row pair]: lanes 0..3 row 2p, 4..7 row 2p + 1
    __m128 accm[T];                               // element r: row r
    for (int t = 0; t < T; ++t) {
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
        accm[t] = _mm_setzero_ps();
    }
    for (int64_t g = 0; g < n_groups; ++g) {
        tile.begin_group(g);
#pragma GCC unroll 8
        for (int k = 0; k < Dec::kGroupSteps; ++k) {
            const int64_t s = g * Dec::kGroupSteps + k;  // the block: elements [32 s, 32 s + 32)
            const Step4 w = tile.step(g, k);
            for (int t = 0; t < T; ++t) {
                const __m256i a[2] = {broadcast_quarter(a0 + t * q.qs_stride + 32 * s),
                                      broadcast_quarter(a0 + t * q.qs_stride + 32 * s + 16)};
                const __m256 da = _mm256_broadcast_ss(d0 + t * q.blk_stride + s);
                // coff[j]: per int32 lane, c times the sum of the activations that lane multiplies (scale group j).
                __m256i coff[2] = {};
                if constexpr (Dec::kOffset != 0) {
                    if constexpr (QG == 2) {
                        coff[0] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(offset, a[0]),
                                                                     _mm256_maddubs_epi16(offset, a[1])),
                                                    ones);
                    } else {
                        for (int i = 0; i < 2; ++i) coff[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(offset, a[i]), ones);
                    }
                }
                for (int p = 0; p < 2; ++p) {
                    if constexpr (QG == 2) {
                        const __m256i prod = _mm256_add_epi16(_mm256_maddubs_epi16(w.u[0][p], a[0]),
                                                              _mm256_maddubs_epi16(w.u[1][p], a[1]));
                        __m256i dot = _mm256_madd_epi16(prod, ones);
                        if constexpr (Dec::kOffset != 0) dot = _mm256_sub_epi32(dot, coff[0]);
                        acc[t][p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(w.ws[0][p], da), acc[t][p]);
                    } else {
                        for (int i = 0; i < 2; ++i) {
                            __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w.u[i][p], a[i]), ones);
                            if constexpr (Dec::kOffset != 0) dot = _mm256_sub_epi32(dot, coff[i]);
                            acc[t][p] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(w.ws[i][p], da), acc[t][p]);
                        }
                    }
                }
                if constexpr (kBlockMinima)
                    accm[t] = _mm_fmadd_ps(w.wc, _mm_broadcast_ss(ds0 + t * q.blk_stride + s), accm[t]);
            }
        }
    }
    for (int t = 0; t < T; ++t) {
        alignas(16) float mins[4];
        _mm_store_ps(mins, accm[t]);
        for (int p = 0; p < 2; ++p) {
            const __m128 lo = _mm256_castps256_ps128(acc[t][p]), hi = _mm256_extractf128_ps(acc[t][p], 1);
            const __m128 sums = _mm_hadd_ps(_mm_hadd_ps(lo, hi), _mm_setzero_ps());  // [row 2p, row 2p + 1, 0, 0]
            out[2 * p][t] = _mm_cvtss_f32(sums);
            out[2 * p + 1][t] = _mm_cvtss_f32(_mm_movehdup_ps(sums));
            if constexpr (kBlockMinima) {
                out[2 * p][t] += mins[2 * p];
                out[2 * p + 1][t] += mins[2 * p + 1];
            }
        }
    }
}

// ---- prefill tile: the row tile decoded once, then up to 8 tokens at a time per row pair ----

// One 32-element step (one 32-block) of a 4-row tile as Step4 lays it out (w[p][q]: lane i = quarter q of row
// 2p + i), as signed bytes (u - c). The activations go in as unsigned bytes (a + 128), so vpmaddubsw adds
// 128 * sum(w); aux[p][j] = -128 * sum(w) per int32 lane over the quarters of scale group j removes it (QG
// quarters share a scale).
template <int QG>
struct alignas(32) PrefillStep {
    __m256i w[2][2];
    __m256i aux[2][2 / QG];
    __m256 ws[2][2 / QG];  // lanes 0..3: the scale of group j of row 2p, lanes 4..7 of row 2p + 1
};

// Decodes the whole row tile into out [n_groups * kGroupSteps]; the minima of the 32-block types go to wm.
template <typename Dec, int QG = Dec::kQuartersPerScale>
void repack_tile(RowTile<Dec>& tile, int64_t n_groups, PrefillStep<QG>* out) {
    const __m256i offset = _mm256_set1_epi8(static_cast<char>(Dec::kOffset));
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < n_groups; ++g) {
        tile.begin_group(g);
        for (int k = 0; k < Dec::kGroupSteps; ++k) {
            const int64_t s = g * Dec::kGroupSteps + k;
            const Step4 w = tile.step(g, k);
            PrefillStep<QG>& step = out[s];
            for (int p = 0; p < 2; ++p) {
                for (int i = 0; i < 2; ++i) step.w[p][i] = _mm256_sub_epi8(w.u[i][p], offset);
                for (int j = 0; j < 2 / QG; ++j) {
                    step.ws[p][j] = w.ws[j * QG][p];
                    __m256i sum = _mm256_setzero_si256();
                    for (int i = 0; i < QG; ++i) {
                        const __m256i pairs = _mm256_maddubs_epi16(ones8, step.w[p][j * QG + i]);
                        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, ones16));
                    }
                    step.aux[p][j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum, 7));
                }
            }
            if constexpr (Dec::kHasMin && !Dec::kRowMinima) _mm_storeu_ps(tile.wm + 4 * s, w.wc);  // [nb, 4]
        }
    }
}

// out[2 x + i][t] = the dot of row 2 (p0 + x) + i of the repacked tile with token t0 + t over n_steps steps,
// minima excluded, for the NP row pairs from p0. With both pairs of the tile in one pass (NP = 2), each token's
// activation loads and scale broadcast serve four rows, and the activations stream through once per tile instead
// of once per pair. Every output lane is computed by the same operations in the same order whatever NP and T are.
template <int QG, int T, int NP>
void prefill_tile(const PrefillStep<QG>* steps, int p0, int64_t n_steps, const QuantizedActs& q, int64_t t0,
                  float (*out)[kPrefillTokens]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const uint8_t* a0 = q.qs_u + t0 * q.qs_stride;  // [T][qs_stride]: activations + 128
    const float* d0 = q.d + t0 * q.blk_stride;    // [T][blk_stride]
    // acc[x][t] is indexed by the unrolled loops only, so the accumulators stay in registers (a loop the compiler
    // kept would leave them on the stack, with a store and a reload around every fma).
    __m256 acc[NP][T];  // lanes 0..3: row 2p, 4..7: row 2p + 1
#pragma GCC unroll 2
    for (int x = 0; x < NP; ++x)
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) acc[x][t] = _mm256_setzero_ps();
    for (int64_t s = 0; s < n_steps; ++s) {
        const PrefillStep<QG>& st = steps[s];
#pragma GCC unroll 2
        for (int j = 0; j < 2 / QG; ++j) {
            // One pointer walks the tokens' activations and one their scales.
            const uint8_t* a = a0 + 32 * s + 16 * j * QG;
            const float* d = d0 + s;
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t, a += q.qs_stride, d += q.blk_stride) {
                __m256i ai[2];
#pragma GCC unroll 2
                for (int i = 0; i < QG; ++i)
                    ai[i] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * i)));
                const __m256 dt = _mm256_broadcast_ss(d);
#pragma GCC unroll 2
                for (int x = 0; x < NP; ++x) {
                    const int p = p0 + x;
                    __m256i pairs = _mm256_setzero_si256();
                    for (int i = 0; i < QG; ++i)
                        pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(ai[i], st.w[p][j * QG + i]));
                    const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), st.aux[p][j]);
                    acc[x][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(st.ws[p][j], dt), acc[x][t]);
                }
            }
        }
    }
    for (int x = 0; x < NP; ++x) {
        for (int t = 0; t < T; ++t) {
            const __m128 lo = _mm256_castps256_ps128(acc[x][t]), hi = _mm256_extractf128_ps(acc[x][t], 1);
            const __m128 sums = _mm_hadd_ps(_mm_hadd_ps(lo, hi), _mm_setzero_ps());  // [row 2p, row 2p + 1, 0, 0]
            out[2 * x][t] = _mm_cvtss_f32(sums);
            out[2 * x + 1][t] = _mm_cvtss_f32(_mm_movehdup_ps(sums));
        }
    }
}

// Both pairs of the tile for up to 3 tokens (six accumulators: with eight the compiler spills them); returns the
// tokens done.
template <int QG>
int prefill_tokens(const PrefillStep<QG>* steps, int64_t n_steps, const QuantizedActs& q, int64_t t0, int64_t left,
                   float (*out)[kPrefillTokens]) {
    if (left >= 3) return prefill_tile<QG, 3, 2>(steps, 0, n_steps, q, t0, out), 3;
    if (left >= 2) return prefill_tile<QG, 2, 2>(steps, 0, n_steps, q, t0, out), 2;
    return prefill_tile<QG, 1, 2>(steps, 0, n_steps, q, t0, out), 1;
}

// ---- quantized rows ----

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
void flush_block(const OutputBlock& block, float* y, int64_t n_out) {
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

// out[r] = the dot of row r of a [4, stride] with b over n elements: per row, 8 lanes accumulated in order, then
// their sum and the tail. The four rows' chains interleave (one chain alone waits on each fma's latency); each
// row's operations are those of a lone dot, so its bits are too.
void dot4_f32(const float* a, int64_t stride, const float* b, int64_t n, float out[4]) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 bv = _mm256_loadu_ps(b + i);
        for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * stride + i), bv, acc[r]);
    }
    for (int r = 0; r < 4; ++r) {
        float sum = hsum(acc[r]);
        for (int64_t k = i; k < n; ++k) sum += a[r * stride + k] * b[k];
        out[r] = sum;
    }
}

// The scratch of a quantized kernel: the row tile's minima, its repacked steps and the output block.
template <typename Step>
struct QuantScratch {
    float* wm;  // [4, wm_stride]
    int64_t wm_stride;
    Step* repacked;       // [n_in / 32]
    float* output_block;  // see OutputBlock

    QuantScratch(float* scratch, int64_t n_in) {
        wm = scratch;
        wm_stride = n_in / 16 + 16;
        float* p = scratch + (4 * wm_stride + 15) / 16 * 16;
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
    const int64_t n_groups = nb / Dec::kGroupSteps;
    const QuantScratch<PrefillStep<QG>> sc(scratch, w.n_in);
    const bool prefill = args.n_tokens >= kPrefillMinTokens && q.qs_u != nullptr;
    const auto* base = static_cast<const uint8_t*>(w.data);
    const int64_t block_rows = OutputBlock::rows_for(args.n_tokens);
    // The k-quants' row minima of the tile dotted with token t's block sums (the same call on both paths), or 0.
    auto row_minima = [&](int64_t t, float m[4]) {
        if constexpr (Dec::kMinimaPer16)  // one minimum per 16 elements, against the half sums
            dot4_f32(sc.wm, sc.wm_stride, q.ds16 + 2 * t * q.blk_stride, 2 * nb, m);
        else if constexpr (Dec::kRowMinima)
            dot4_f32(sc.wm, sc.wm_stride, q.ds + t * q.blk_stride, nb, m);
        else
            m[0] = m[1] = m[2] = m[3] = 0.0f;
    };
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        OutputBlock block{sc.output_block, args.n_tokens, rb, min64(block_rows, r1 - rb)};
        for (int64_t r = rb; r < rb + block.n_rows; r += 4) {
            const int nr = static_cast<int>(min64(4, r1 - r));
            RowTile<Dec> tile;  // its decoder state is written by begin_group before a step reads it: not zeroed
            tile.wm = sc.wm;
            tile.wm_stride = sc.wm_stride;
            tile.prefetch = prefetch_distance(w.row_bytes);
            for (int i = 0; i < 4; ++i) {  // a ragged tile repeats its last row
                tile.rows[i] = base + (r + min64(i, nr - 1)) * static_cast<int64_t>(w.row_bytes);
            }
            if (!prefill) {
                for (int64_t t = 0; t < args.n_tokens; t += kMaxTokens) {
                    const int nt = static_cast<int>(min64(kMaxTokens, args.n_tokens - t));
                    float out[4][kMaxTokens];
                    if (nt == 1) {
                        decode_tile<Dec, 1>(tile, q, t, n_groups, out);
                    } else {
                        decode_tile<Dec, 2>(tile, q, t, n_groups, out);
                    }
                    for (int j = 0; j < nt; ++j) {
                        float m[4];
                        row_minima(t + j, m);
                        for (int i = 0; i < nr; ++i)
                            block.at(r + i, t + j) = Dec::kRowMinima ? out[i][j] + m[i] : out[i][j];
                    }
                }
                continue;
            }
            repack_tile(tile, n_groups, sc.repacked);
            for (int64_t t = 0; t < args.n_tokens;) {  // all four rows (a ragged tile's copies are not written)
                float out[4][kPrefillTokens];
                const int nt = prefill_tokens<QG>(sc.repacked, nb, q, t, args.n_tokens - t, out);
                for (int j = 0; j < nt; ++j) {
                    float m[4];
                    row_minima(t + j, m);
                    for (int i = 0; i < nr; ++i)
                        block.at(r + i, t + j) = Dec::kRowMinima ? out[i][j] + m[i] : out[i][j];
                }
                t += nt;
            }
            if constexpr (Dec::kHasMin && !Dec::kRowMinima) {
                add_block_minima(block, sc.wm, q, nb, r, nr);
            }
        }
        flush_block(block, args.y, w.n_out);
    }
}

// ---- the 4- and 5-bit types: eight rows in lanes (Step8) ----
// One arithmetic on both paths, so that it is batch invariant: for row r and token t, block by block in order,
// I = the exact int32 sum over the block of (u - c) * qa, acc = fma(float(I), ws * da, acc), then with a minimum
// acc = fma(wm, ds, acc); y = acc. (One accumulator per token: with a second one for the minima, four tokens'
// accumulators no longer fit the registers beside a block's weights.) The decode path decodes each block of the eight rows as it goes; the
// prefill path decodes the row tile once into Step8 form and runs up to kRows8Tokens tokens at a time over it.

constexpr int kRows8Tokens = 4;

// Token t's activations: its int8 blocks, their scales and (for c != 0) integer sums.
struct TokenActs {
    const int8_t* qs;
    const float* d;
    const int32_t* isum;
    TokenActs(const QuantizedActs& q, int64_t t)
        : qs(q.qs + t * q.qs_stride), d(q.d + t * q.blk_stride), isum(q.isum + t * q.blk_stride) {}
    const float* ds(const QuantizedActs& q) const { return d - q.d + q.ds; }
};

// The exact int32 sum of a 32-block's products, weights w(k) against activations a(k) for the four-byte groups
// k = 0..7 (one side broadcast, the other in lanes): unsigned weights u against signed activations, kGroupsPerMadd
// groups summed in int16 before vpmaddwd; Q8_0 (kSigned) moves the weights' signs onto the activations and widens
// each product pair at once (two pairs of 128 x 127 overflow int16). Every path of rows8 sums through this.
template <typename Dec, typename W, typename A>
[[gnu::always_inline]] inline __m256i block_idot(W&& w, A&& a) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i dot = _mm256_setzero_si256();
    if constexpr (Dec::kSigned) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            const __m256i wk = w(k);
            const __m256i prod = _mm256_maddubs_epi16(_mm256_sign_epi8(wk, wk), _mm256_sign_epi8(a(k), wk));
            dot = _mm256_add_epi32(dot, _mm256_madd_epi16(prod, ones));
        }
    } else {
        constexpr int G = Dec::kGroupsPerMadd;
#pragma GCC unroll 2
        for (int h = 0; h < 8 / G; ++h) {
            __m256i p = _mm256_maddubs_epi16(w(h * G), a(h * G));
#pragma GCC unroll 8
            for (int k = h * G + 1; k < h * G + G; ++k) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w(k), a(k)));
            dot = _mm256_add_epi32(dot, _mm256_madd_epi16(p, ones));
        }
    }
    return dot;
}

// Adds block b of N groups of eight rows (st[i], N = 1 or the two halves of a packed tile) to a token's
// accumulators acc[i] (ds: the token's ds row, for the minima). The token's activation groups are broadcast once for
// all N; each group of rows gets the same operations in the same order whatever N is.
template <typename Dec, int N = 1>
[[gnu::always_inline]] inline void rows8_block(const Step8* const* st, const TokenActs& ta, const float* ds, int64_t b,
                                               __m256* acc) {
    const int8_t* a = ta.qs + 32 * b;  // [32]
    __m256i ak[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) ak[k] = _mm256_set1_epi32(load_unaligned<int32_t>(a + 4 * k));
    const __m256 d = _mm256_broadcast_ss(ta.d + b);
#pragma GCC unroll 2
    for (int i = 0; i < N; ++i) {
        __m256i dot = block_idot<Dec>([&](int k) { return st[i]->w[k]; }, [&](int k) { return ak[k]; });
        if constexpr (Dec::kOffset != 0) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(Dec::kOffset * ta.isum[b]));
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(st[i]->ws, d), acc[i]);
        if constexpr (Dec::kHasMin) acc[i] = _mm256_fmadd_ps(st[i]->wm, _mm256_broadcast_ss(ds + b), acc[i]);
    }
}

template <typename Dec>
inline void rows8_block(const Step8& st, const TokenActs& ta, const float* ds, int64_t b, __m256& acc) {
    const Step8* const one[1] = {&st};
    rows8_block<Dec, 1>(one, ta, ds, b, &acc);
}

// out[j][r] = row r of the tile against token t0 + j, j < T, from the repacked blocks.
template <typename Dec, int T>
void rows8_tile(const Step8* steps, int64_t nb, const QuantizedActs& q, int64_t t0, float (*out)[8]) {
    __m256 acc[T];
    const TokenActs ta[4] = {TokenActs(q, t0), TokenActs(q, t0 + (T > 1)), TokenActs(q, t0 + 2 * (T > 2)),
                             TokenActs(q, t0 + 3 * (T > 3))};
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) rows8_block<Dec>(steps[b], ta[t], ta[t].ds(q), b, acc[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(out[t], acc[t]);
}

// Prefetches the eight rows `prefetch` bytes ahead of each byte below `end` (from row starts) not prefetched yet;
// *done: how far that has gone, a cache line at a time.
inline void prefetch_rows8(Rows rows, int64_t prefetch, int64_t end, int64_t* done) {
    for (; *done < end; *done += 64) {
        for (int r = 0; r < 8; ++r) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + prefetch + *done), _MM_HINT_T1);
    }
}

// The next tile's share of a weight stream, prefetched a block at a time as a lane kernel goes through its blocks
// (rows8_lanes), so that the next tile's loads overlap the arithmetic: issued all at once by the repack, they waited
// on memory with nothing else to do (the repack took a fifth of a sixteen-token Q4_1 product). Empty: nothing to
// prefetch.
struct Ahead {
    const uint8_t* at = nullptr;  // the next tile's first block
    int64_t block_bytes = 0;      // bytes of the stream per 32-block
    void block(int64_t b) const {
        if (at == nullptr) return;
        for (int64_t o = 0; o < block_bytes; o += 64)
            _mm_prefetch(reinterpret_cast<const char*>(at + b * block_bytes + o), _MM_HINT_T1);
    }
};

// Where the eight rows of a tile come from: for_group(g, f) calls f(b, step) for the blocks b of group g in order;
// next(nb, r1) the stream of the tile after this one for Ahead, where there is one below row r1 and the rows are one
// stream (no longer prefetched by for_group then).
// FileRows8: the file's rows, decoded by D, each row prefetched kPrefetchBytes ahead (rounded up to whole tiles).
template <typename D>
struct FileRows8 {
    using Dec = D;
    static constexpr bool kPacked = false;
    const uint8_t* rows[8];
    int64_t prefetch, prefetched = 0;

    FileRows8(const WeightMatrix& w, int64_t r, int nr) {
        const auto* base = static_cast<const uint8_t*>(w.data);
        for (int i = 0; i < 8; ++i) rows[i] = base + (r + min64(i, nr - 1)) * static_cast<int64_t>(w.row_bytes);
        const auto tile_bytes = 8 * static_cast<int64_t>(w.row_bytes);  // (a ragged tile repeats its last row)
        prefetch = (kPrefetchBytes + tile_bytes - 1) / tile_bytes * tile_bytes;
    }
    template <typename F>
    void for_group(int64_t g, F&& f) {
        prefetch_rows8(rows, prefetch, (g + 1) * Dec::kGroupBytes, &prefetched);
        Dec::for_group(rows, g, f);
    }
    Ahead next(int64_t, int64_t) { return {}; }
};

// PackedRows8: rows 8h .. 8h + 7 of a sixteen-row tile of PackedWeights, its records one after the other (P decodes
// them). The pass over the first half prefetches the stream kPrefetchBytes ahead; the second half's pass finds the
// tile's lines in cache.
template <typename P>
struct PackedRows8 {
    using Dec = P;
    static constexpr bool kPacked = true;
    const uint8_t* tile;
    int64_t r;
    int h;
    bool prefetch = true;  // for_group's own prefetch of the stream (off once next() hands it to Ahead)

    PackedRows8(const WeightMatrix& w, int64_t r, int) : r(r) {
        tile = static_cast<const uint8_t*>(w.packed) + r / 16 * (w.n_in / 32) * P::kRecordBytes;
        h = static_cast<int>(r / 8 % 2);
    }
    // The next sixteen rows' records, from the first half (the second finds the tile's records in cache).
    Ahead next(int64_t nb, int64_t r1) {
        if (h != 0 || r + 16 >= r1) return {};
        prefetch = false;
        return {tile + nb * P::kRecordBytes, P::kRecordBytes};
    }
    // Record b, its lines kPrefetchBytes ahead prefetched when `prefetch`.
    const uint8_t* record(int64_t b, bool prefetch) const {
        const uint8_t* rec = tile + b * P::kRecordBytes;
        if (prefetch) {
            for (int64_t o = 0; o < P::kRecordBytes; o += 64)
                _mm_prefetch(reinterpret_cast<const char*>(rec + kPrefetchBytes + o), _MM_HINT_T1);
        }
        return rec;
    }
    template <typename F>
    void for_group(int64_t b, F&& f) {
        f(b, P::load(record(b, prefetch && h == 0), h));
    }
};

// PackedK8: rows 8h .. 8h + 7 of a sixteen-row tile of packed Q4_K or Q5_K (generic::pack_tiles): the half's
// super-blocks one after the other, each 16-byte chunk already in transpose_16's vectors, so the decoder loads what
// it would transpose (the same Step8s, so the same bits as FileRows8); the stream prefetched kPrefetchBytes ahead.
// kPacked is false: the paths for Packed8's records (one token over both halves at once, decoding again for every
// three tokens) do not apply, and from kPrefillMinTokens tokens a tile is repacked as from the file's rows.
template <typename D>
struct PackedK8 {
    using Dec = D;
    static constexpr bool kPacked = false;
    static constexpr int64_t kSuperBytes = 8 * Dec::kGroupBytes;  // a super-block of eight rows
    const uint8_t* half;
    int64_t r;
    bool prefetch = true;  // as PackedRows8's

    PackedK8(const WeightMatrix& w, int64_t r, int) : r(r) {
        half = static_cast<const uint8_t*>(w.packed) + r / 8 * (w.n_in / 256) * kSuperBytes;
    }
    Ahead next(int64_t nb, int64_t r1) {
        if (r + 8 >= r1) return {};
        prefetch = false;
        return {half + nb / 8 * kSuperBytes, kSuperBytes / 8};
    }
    // The super-block's lines kPrefetchBytes ahead an eighth a sub-block (all at once, they filled the line-fill
    // buffers and stalled the loads: see PackedK16 in the AVX-512 file).
    template <typename F>
    void for_group(int64_t g, F&& f) {
        const uint8_t* sb = half + g * kSuperBytes;
        constexpr int64_t kLines = (kSuperBytes + 63) / 64;
        int64_t line = 0;
        Dec::steps(g, [&](size_t at, __m256i x[4]) {
            for (int k = 0; k < 4; ++k) x[k] = load256(sb + 8 * at + 32 * k);
        }, [&](int64_t b, const Step8& st) {
            for (const int64_t upto = kLines * (b % 8 + 1) / 8; prefetch && line < upto; ++line)
                _mm_prefetch(reinterpret_cast<const char*>(sb + kPrefetchBytes + 64 * line), _MM_HINT_T1);
            f(b, st);
        });
    }
};

// The decode path on eight rows decoded as they stream by.
template <typename Src, int T>
void rows8_decode(Src& src, int64_t nb, const QuantizedActs& q, int64_t t0, float (*out)[8]) {
    using Dec = typename Src::Dec;
    static_assert(T <= 3);
    __m256 acc[T];
    const TokenActs ta[3] = {TokenActs(q, t0), TokenActs(q, t0 + (T > 1)), TokenActs(q, t0 + 2 * (T > 2))};
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < nb / Dec::kGroupSteps; ++g) {
        src.for_group(g, [&](int64_t b, const Step8& st) {
            for (int t = 0; t < T; ++t) rows8_block<Dec>(st, ta[t], ta[t].ds(q), b, acc[t]);
        });
    }
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(out[t], acc[t]);
}

// One token against both halves of a packed tile at once (rows r .. r + 15; decode of one sequence): one pass over
// its records, in order, the token's activation groups broadcast once for the sixteen rows (a single-thread decode
// of a memory-resident Q4_1 matrix: 42-47 against 52-55 cycles per block of eight rows, Q8_0 70-74 against
// 97-104). out[i] = row r + i; each half gets rows8_decode's operations in its order, so the bits are those of
// the eight-row path. (For two or three tokens, six accumulators beside the weights cost more than they save.)
template <typename P>
void rows16_decode(const PackedRows8<P>& src, int64_t nb, const QuantizedActs& q, int64_t t, float out[16]) {
    const TokenActs ta(q, t);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = src.record(b, true);
        const Step8 lo = P::load(rec, 0), hi = P::load(rec, 1);
        const Step8* const halves[2] = {&lo, &hi};
        rows8_block<P, 2>(halves, ta, ta.ds(q), b, acc);
    }
    _mm256_storeu_ps(out, acc[0]);
    _mm256_storeu_ps(out + 8, acc[1]);
}

// The tile's nb blocks decoded into steps, for the paths that reuse them for many tokens.
template <typename Src>
void repack_rows8(Src& src, int64_t nb, Step8* steps) {
    for (int64_t g = 0; g < nb / Src::Dec::kGroupSteps; ++g)
        src.for_group(g, [&](int64_t b, const Step8& st) { steps[b] = st; });
}

// Tokens [t0, t0 + T) for T = min(left, kRows8Tokens); returns T.
template <typename Dec>
int rows8_tokens(const Step8* steps, int64_t nb, const QuantizedActs& q, int64_t t0, int64_t left, float (*out)[8]) {
    if (left >= 4) return rows8_tile<Dec, 4>(steps, nb, q, t0, out), 4;
    if (left == 3) return rows8_tile<Dec, 3>(steps, nb, q, t0, out), 3;
    if (left == 2) return rows8_tile<Dec, 2>(steps, nb, q, t0, out), 2;
    return rows8_tile<Dec, 1>(steps, nb, q, t0, out), 1;
}

// The same decoding the rows as it goes: fewer than kPrefillMinTokens tokens, or packed rows and fewer than
// kLaneTokens.
template <typename Src>
int rows8_decode_tokens(Src& src, int64_t nb, const QuantizedActs& q, int64_t t0, int64_t left, float (*out)[8]) {
    static_assert(kPrefillMinTokens <= 4);
    if (left >= 3) return rows8_decode<Src, 3>(src, nb, q, t0, out), 3;
    if (left == 2) return rows8_decode<Src, 2>(src, nb, q, t0, out), 2;
    return rows8_decode<Src, 1>(src, nb, q, t0, out), 1;
}

// ---- eight tokens in lanes: prefill, and decode steps of eight sequences or more ----
// With the rows in lanes each token's activations are broadcast for every eight rows; here the activations of eight
// tokens are in the lanes (laid out once per input by its quantization: QuantizedActs::lanes), and each weight row's
// four bytes are broadcast against them. Every output lane gets rows8_block's operations in its order (the same
// exact int32 block sums, then fma(float(I), ws * da, acc) and fma(wm, ds, acc)), so the bits are those of the other
// paths.

constexpr int64_t kLaneChunk = 32;  // tokens per pass over a thread's rows (their lane blocks stay in L1 and L2)

// Block b of a group of eight tokens (QuantizedActs::lanes, written by the quantization) as vectors: qs[k] lane j =
// bytes 4k .. 4k + 3 of token j's block, then each token's scale, d * sum and sum.
struct LaneBlock {
    __m256i qs[8];
    __m256 d, ds;
    __m256i isum;
};
static_assert(sizeof(LaneBlock) == sizeof(LaneActs));

// The c * sum(a) of the unified form, c = Offset (8 or 16), for the eight tokens.
template <int Offset>
inline __m256i lane_offsets(const LaneBlock& a) {
    static_assert(Offset == 8 || Offset == 16);
    return _mm256_slli_epi32(a.isum, Offset == 8 ? 3 : 4);
}

// Where the lane kernels read a tile's weights: block b's values, group k of row r at values(b) + kStride * k + 4r;
// its eight rows' scales and minima as floats. StepWeights: the tile repacked into Step8s.
struct StepWeights {
    static constexpr int64_t kStride = 32;
    const Step8* steps;
    const uint8_t* values(int64_t b) const { return reinterpret_cast<const uint8_t*>(steps[b].w); }
    const float* scales(int64_t b, float*) const { return reinterpret_cast<const float*>(&steps[b].ws); }
    const float* minima(int64_t b) const { return reinterpret_cast<const float*>(&steps[b].wm); }
};

// Half h of a tile of packed Q8_0 records, read in place: its values are Step8's already, 64 bytes apart, and only
// the fp16 scales need converting (into buf), so the tile is not repacked: a batched decode then copies none of the
// records, of which the output matrix has the most.
template <typename P>
struct RecordWeights {
    static_assert(P::kSigned && !P::kHasMin);
    static constexpr int64_t kStride = 64;
    const uint8_t* tile;
    int h;
    const uint8_t* values(int64_t b) const { return tile + b * P::kRecordBytes + 32 * h; }
    const float* scales(int64_t b, float* buf) const {
        _mm256_store_ps(buf, _mm256_cvtph_ps(load128(tile + b * P::kRecordBytes + P::kScalesAt + 16 * h)));
        return buf;
    }
    const float* minima(int64_t) const { return nullptr; }
};

// out[r][j] = row r of the tile against token j of the group. side(b) runs after block b's products (rows8_lanes:
// the next tile's repack).
template <typename Dec, typename W, typename S>
void lanes_tile(const W& weights, int64_t nb, const LaneBlock* lanes, float (*out)[8], const Ahead& ahead, S&& side) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        ahead.block(b);
        const LaneBlock& a = lanes[b];
        const uint8_t* w = weights.values(b);
        alignas(32) float buf[8];
        const float* ws = weights.scales(b, buf);
        const float* wm = weights.minima(b);
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) {
            __m256i dot = block_idot<Dec>(
                [&](int k) { return _mm256_set1_epi32(load_unaligned<int32_t>(w + W::kStride * k + 4 * r)); },
                [&](int k) { return a.qs[k]; });
            if constexpr (Dec::kOffset != 0) dot = _mm256_sub_epi32(dot, lane_offsets<Dec::kOffset>(a));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(_mm256_broadcast_ss(ws + r), a.d), acc[r]);
            if constexpr (Dec::kHasMin) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(wm + r), a.ds, acc[r]);
        }
        side(b);
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(out[r], acc[r]);
}

// The exact int32 block sums of rows r0 .. r0 + 3 of block w (group k of row r at w + stride * k + 4r) against two
// groups' lanes: d[r][g] (the sums of block_idot: exact whatever the order of their int16 and int32 additions).
// between(k) runs after group k's products (lanes_tile2 finishes the pass before there).
template <typename Dec, int64_t kStride, typename B>
[[gnu::always_inline]] inline void block_idot_4x2(const uint8_t* w, int r0, const LaneBlock& a0,
                                                  const LaneBlock& a1, __m256i (&d)[4][2], B&& between) {
    static_assert(Dec::kSigned || Dec::kGroupsPerMadd == 8);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i y[4][2];  // int32 sums (kSigned), or the int16 sums of the whole block
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) y[r][0] = y[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
        const __m256i x0 = a0.qs[k], x1 = a1.qs[k];
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
            const __m256i wk = _mm256_set1_epi32(load_unaligned<int32_t>(w + kStride * k + 4 * (r0 + r)));
            if constexpr (Dec::kSigned) {
                const __m256i u = _mm256_sign_epi8(wk, wk);  // (as block_idot: the signs moved onto x)
                const __m256i p0 = _mm256_maddubs_epi16(u, _mm256_sign_epi8(x0, wk));
                const __m256i p1 = _mm256_maddubs_epi16(u, _mm256_sign_epi8(x1, wk));
                y[r][0] = _mm256_add_epi32(y[r][0], _mm256_madd_epi16(p0, ones));
                y[r][1] = _mm256_add_epi32(y[r][1], _mm256_madd_epi16(p1, ones));
            } else {
                y[r][0] = _mm256_add_epi16(y[r][0], _mm256_maddubs_epi16(wk, x0));
                y[r][1] = _mm256_add_epi16(y[r][1], _mm256_maddubs_epi16(wk, x1));
            }
            asm("" : "+x"(y[r][0]), "+x"(y[r][1]));  // (keeps GCC from computing every product first, into the stack)
        }
        between(k);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
        for (int g = 0; g < 2; ++g) d[r][g] = Dec::kSigned ? y[r][g] : _mm256_madd_epi16(y[r][g], ones);
}

// lanes_tile for two groups of eight tokens at once (out[g][r][j]: row r against token j of group g), four rows at a
// time: each broadcast weight group meets both groups' activations, and each activation vector loaded meets four
// rows, so a block takes 6 loads for every 8 vpmaddubsw instead of 16 (one group's lanes_tile is bound by its loads
// on a core with two load ports and one integer multiplier). Each output gets lanes_tile's float operations in its
// order: the same bits.
// Q8_0 scales each pass's block sums into acc one (row, group) at a time between the next pass's groups of
// products: issued all at once after a pass, those float operations took the one multiplier pipe from the next
// pass's products, of which Q8_0 has two per product pair (vpmaddubsw, vpmaddwd). The 4-bit types scale each pass
// after it: interleaved, their activations spilled.
template <typename Dec, typename W, typename S>
void lanes_tile2(const W& weights, int64_t nb, const LaneBlock* lanes0, const LaneBlock* lanes1, float (*out)[8][8],
                 const Ahead& ahead, S&& side) {
    constexpr bool kInterleave = Dec::kSigned;
    alignas(32) float acc[2][8][8] = {};  // [group][row][token]
    alignas(32) int32_t pending_dot[4][2][8];  // the block sums of the pass to scale
    // finish(e) of a pass: scales (row, group) e's sums into acc; its pointers held by value, so that they stay in
    // registers through the stores into acc.
    auto finisher = [&pending_dot, &acc](const float* ws, const float* wm, const LaneBlock* a0, const LaneBlock* a1,
                                         int r0) {
        return [=, &pending_dot, &acc](int e) {
            const int r = e / 2, g = e % 2;
            const LaneBlock* a = g == 0 ? a0 : a1;
            __m256i d = _mm256_load_si256(reinterpret_cast<const __m256i*>(pending_dot[r][g]));
            if constexpr (Dec::kOffset != 0) d = _mm256_sub_epi32(d, lane_offsets<Dec::kOffset>(*a));
            float* y = acc[g][r0 + r];
            __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(_mm256_broadcast_ss(ws + r0 + r), a->d),
                                       _mm256_load_ps(y));
            if constexpr (Dec::kHasMin) v = _mm256_fmadd_ps(_mm256_broadcast_ss(wm + r0 + r), a->ds, v);
            _mm256_store_ps(y, v);
        };
    };
    alignas(32) float buf[2][8];  // a block's scales where converted, for two blocks in turn
    const float* prev_ws = nullptr;
    const float* prev_wm = nullptr;
    for (int64_t b = 0; b < nb; ++b) {
        ahead.block(b);
        const LaneBlock* a0 = lanes0 + b;
        const LaneBlock* a1 = lanes1 + b;
        const uint8_t* w = weights.values(b);
        const float* ws = weights.scales(b, buf[b % 2]);
        const float* wm = weights.minima(b);
        auto pass = [&](int r0, auto&& between) {
            __m256i dot[4][2];
            block_idot_4x2<Dec, W::kStride>(w, r0, *a0, *a1, dot, between);
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r)
                for (int g = 0; g < 2; ++g)
                    _mm256_store_si256(reinterpret_cast<__m256i*>(pending_dot[r][g]), dot[r][g]);
        };
        if constexpr (kInterleave) {
            if (b == 0)
                pass(0, [](int) {});
            else
                pass(0, finisher(prev_ws, prev_wm, a0 - 1, a1 - 1, 4));
            pass(4, finisher(ws, wm, a0, a1, 0));
            side(b);
        } else {
#pragma GCC unroll 2
            for (int r0 = 0; r0 < 8; r0 += 4) {
                pass(r0, [](int) {});
                const auto finish = finisher(ws, wm, a0, a1, r0);
#pragma GCC unroll 8
                for (int e = 0; e < 8; ++e) finish(e);
                if (r0 == 0) side(b);  // (between the passes, where no vector register is live)
            }
        }
        prev_ws = ws;
        prev_wm = wm;
    }
    if (kInterleave && nb > 0) {
        const auto finish = finisher(prev_ws, prev_wm, lanes0 + nb - 1, lanes1 + nb - 1, 4);
        for (int e = 0; e < 8; ++e) finish(e);
    }
    std::memcpy(out, acc, sizeof(acc));
}

// rows8 for kLaneTokens tokens or more: kLaneChunk tokens at a time, their whole groups of eight in lanes and the
// rest (fewer than eight) by rows8_tokens, each row tile repacked once per chunk. Packed 4-bit tiles are repacked
// during the products of the tile before (side(b) of the lane kernels: the next tile's block b, its records in cache,
// the first half's being this tile's and the next pair's prefetched by Ahead): a burst of its own, the repack's loads
// and stores left the multiplier idle.
template <typename Src>
void rows8_lanes(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    using Dec = typename Src::Dec;
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32;
    auto* steps = reinterpret_cast<Step8*>(scratch);  // [2][nb] (scratch is 64-byte aligned): this tile's, the next's
    Step8* next_steps = steps + nb;
    auto* output_block = reinterpret_cast<float*>(steps + 2 * nb);
    static_assert(sizeof(Step8) % 64 == 0);
    for (int64_t c0 = 0; c0 < args.n_tokens; c0 += kLaneChunk) {
        // (without the lane layout, which an input quantized for another ISA lacks, every token goes the row way)
        const int64_t nt = min64(kLaneChunk, args.n_tokens - c0), n_groups = q.lanes ? nt / kLaneTokens : 0;
        const auto* lanes = q.lanes ? reinterpret_cast<const LaneBlock*>(q.lanes + c0 / kLaneTokens * nb) : nullptr;
        // The groups' outputs go straight to y; the tokens after them (fewer than eight) through an output block.
        const int64_t t_rest = n_groups * kLaneTokens, n_rest = nt - t_rest;
        const int64_t block_rows = n_rest > 0 ? OutputBlock::rows_for(n_rest) : r1 - r0;
        for (int64_t rb = r0; rb < r1; rb += block_rows) {
            OutputBlock block{output_block, n_rest, rb, min64(block_rows, r1 - rb)};
            bool repacked = false;  // steps already holds the tile (repacked during the tile before's products)
            for (int64_t r = rb; r < rb + block.n_rows; r += 8) {
                const int nr = static_cast<int>(min64(8, rb + block.n_rows - r));
                Src src(w, r, nr);
                Ahead ahead = src.next(nb, r1);  // prefetched during the tile's first kernel
                float* y = args.y + c0 * w.n_out + r;  // token c0's output of row r
                // The lane kernels, the first with `side`.
                auto groups = [&](const auto& weights, auto&& side) {
                    const auto none = [](int64_t) {};
                    int64_t g = 0;
                    if constexpr (Dec::kSigned || Dec::kGroupsPerMadd == 8) {
                        for (; g + 2 <= n_groups; g += 2) {
                            float out[2][8][8];
                            if (g == 0)
                                lanes_tile2<Dec>(weights, nb, lanes, lanes + nb, out, ahead, side);
                            else
                                lanes_tile2<Dec>(weights, nb, lanes + g * nb, lanes + (g + 1) * nb, out, ahead, none);
                            ahead = {};
                            store_transposed(out[0][0], 8, y + 8 * g * w.n_out, w.n_out, nr);
                            store_transposed(out[1][0], 8, y + (8 * g + 8) * w.n_out, w.n_out, nr);
                        }
                    }
                    for (; g < n_groups; ++g) {
                        float out[8][8];
                        if (g == 0)
                            lanes_tile<Dec>(weights, nb, lanes, out, ahead, side);
                        else
                            lanes_tile<Dec>(weights, nb, lanes + g * nb, out, ahead, none);
                        ahead = {};
                        store_transposed(out[0], 8, y + 8 * g * w.n_out, w.n_out, nr);
                    }
                };
                if constexpr (Src::kPacked && Dec::kSigned) {  // Q8_0's records read in place
                    groups(RecordWeights<Dec>{src.tile, src.h}, [](int64_t) {});
                    if (n_rest > 0) repack_rows8(src, nb, steps);
                } else if constexpr (Src::kPacked) {
                    if (!repacked) repack_rows8(src, nb, steps);
                    repacked = n_groups > 0 && r + 8 < rb + block.n_rows;
                    if (repacked) {
                        const Src next(w, r + 8, static_cast<int>(min64(8, rb + block.n_rows - r - 8)));
                        groups(StepWeights{steps},
                               [&](int64_t b) { next_steps[b] = Dec::load(next.record(b, false), next.h); });
                    } else {
                        groups(StepWeights{steps}, [](int64_t) {});
                    }
                } else {
                    repack_rows8(src, nb, steps);
                    groups(StepWeights{steps}, [](int64_t) {});
                }
                for (int64_t t = 0; t < n_rest;) {
                    float out[kRows8Tokens][8];
                    const int n = rows8_tokens<Dec>(steps, nb, q, c0 + t_rest + t, n_rest - t, out);
                    for (int j = 0; j < n; ++j)
                        for (int i = 0; i < nr; ++i) block.at(r + i, t + j) = out[j][i];
                    t += n;
                }
                if (repacked) std::swap(steps, next_steps);
            }
            if (n_rest > 0) flush_block(block, args.y + (c0 + t_rest) * w.n_out, w.n_out);
        }
    }
}

// Rows [r0, r1) of y for all tokens, eight rows at a time (from Src: FileRows8 or PackedRows8), written a block of
// rows at a time.
template <typename Src>
void rows8(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    if (args.n_tokens >= kLaneTokens) return rows8_lanes<Src>(args, r0, r1, scratch);
    using Dec = typename Src::Dec;
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32;
    // Packed records decode with no transposes: for fewer than kLaneTokens tokens, decoding them again for every
    // three tokens costs less than a repacked tile (measured from four to seven tokens); the file's rows, transposed
    // as they are decoded, are repacked from kPrefillMinTokens tokens.
    const bool prefill = !Src::kPacked && args.n_tokens >= kPrefillMinTokens;
    static_assert(kRowTile % 16 == 0);  // so that a packed tile's halves start at multiples of 8
    auto* steps = reinterpret_cast<Step8*>(scratch);  // [nb]: the repacked row tile (scratch is 64-byte aligned)
    float* output_block = scratch + (nb * static_cast<int64_t>(sizeof(Step8)) / 4 + 15) / 16 * 16;
    const int64_t block_rows = OutputBlock::rows_for(args.n_tokens);  // a multiple of kRowTile, so of 8
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        OutputBlock block{output_block, args.n_tokens, rb, min64(block_rows, r1 - rb)};
        for (int64_t r = rb; r < rb + block.n_rows; r += 8) {
            const int nr = static_cast<int>(min64(8, rb + block.n_rows - r));
            Src src(w, r, nr);
            if constexpr (Src::kPacked) {
                if (args.n_tokens == 1 && r % 16 == 0 && rb + block.n_rows - r >= 16) {
                    rows16_decode(src, nb, q, 0, &block.at(r, 0));
                    r += 8;  // both halves done
                    continue;
                }
            }
            if (prefill) repack_rows8(src, nb, steps);
            for (int64_t t = 0; t < args.n_tokens;) {
                float out[kRows8Tokens][8];
                const int nt = prefill ? rows8_tokens<Dec>(steps, nb, q, t, args.n_tokens - t, out)
                                       : rows8_decode_tokens(src, nb, q, t, args.n_tokens - t, out);
                for (int j = 0; j < nt; ++j)
                    for (int i = 0; i < nr; ++i) block.at(r + i, t + j) = out[j][i];
                t += nt;
            }
        }
        flush_block(block, args.y, w.n_out);
    }
}

// ---- float weights: 4 rows x T tokens, 8 elements per step, the row converted in registers ----

struct LoadF32 {
    static constexpr int64_t kBytes = 4;
    static __m256 load(const uint8_t* row, int64_t i) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    static float at(const uint8_t* row, int64_t i) { return load_unaligned<float>(row + 4 * i); }
};

struct LoadF16 {
    static constexpr int64_t kBytes = 2;
    static __m256 load(const uint8_t* row, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    }
    static float at(const uint8_t* row, int64_t i) { return _cvtsh_ss(load_unaligned<uint16_t>(row + 2 * i)); }
};

struct LoadBF16 {
    static constexpr int64_t kBytes = 2;
    static __m256 load(const uint8_t* row, int64_t i) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    static float at(const uint8_t* row, int64_t i) {
        const uint32_t bits = uint32_t{load_unaligned<uint16_t>(row + 2 * i)} << 16;
        float f;
        std::memcpy(&f, &bits, sizeof(f));
        return f;
    }
};

template <typename Load, int T>
void float_tile(const uint8_t* const* rows, int64_t prefetch, const float* x, int64_t n_in, int64_t t0,
                float (*out)[kMaxTokens]) {
    const float* xt[T];  // [T][n_in]
    for (int t = 0; t < T; ++t) xt[t] = x + (t0 + t) * n_in;
    __m256 acc[4][T];
    for (auto& row : acc) {
        for (auto& v : row) v = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 8 <= n_in; i += 8) {
        __m256 xv[T];
        for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(xt[t] + i);
        for (int r = 0; r < 4; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(rows[r] + prefetch + i * Load::kBytes), _MM_HINT_T1);
            const __m256 wv = Load::load(rows[r], i);
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < 4; ++r) {
        for (int t = 0; t < T; ++t) {
            float sum = hsum(acc[r][t]);
            for (int64_t e = i; e < n_in; ++e) sum += Load::at(rows[r], e) * xt[t][e];
            out[r][t] = sum;
        }
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
                if (nt == 1) {
                    float_tile<Load, 1>(rows, prefetch, args.x, w.n_in, t, out);
                } else {
                    float_tile<Load, 2>(rows, prefetch, args.x, w.n_in, t, out);
                }
                for (int i = 0; i < nr; ++i) {
                    for (int j = 0; j < nt; ++j) block.at(r + i, t + j) = out[i][j];
                }
            }
        }
        flush_block(block, args.y, w.n_out);
    }
}

}  // namespace

Kernel find_kernel(GgmlType type) {
    switch (type) {
        case GgmlType::F32:
            return {float_rows<LoadF32>, false};
        case GgmlType::F16:
            return {float_rows<LoadF16>, false};
        case GgmlType::BF16:
            return {float_rows<LoadBF16>, false};
        case GgmlType::Q4_0:
            return {rows8<FileRows8<Dec8Q4_0>>, true};
        case GgmlType::Q4_1:
            return {rows8<FileRows8<Dec8Q4_1>>, true};
        case GgmlType::Q5_0:
            return {rows8<FileRows8<Dec8Q5_0>>, true};
        case GgmlType::Q5_1:
            return {rows8<FileRows8<Dec8Q5_1>>, true};
        case GgmlType::Q8_0:
            return {rows8<FileRows8<Dec8Q8_0>>, true};
        case GgmlType::Q4_K:
            return {rows8<FileRows8<Dec8Q4_K>>, true};
        case GgmlType::Q5_K:
            return {rows8<FileRows8<Dec8Q5_K>>, true};
        case GgmlType::Q6_K:
            return {quant_rows<DecQ6_K>, true};
        case GgmlType::Q3_K:
            return {quant_rows<DecQ3_K>, true};
        case GgmlType::Q2_K:
            return {quant_rows<DecQ2_K>, true};
        case GgmlType::IQ4_NL:
            return {rows8<FileRows8<Dec8Table<BlockIq4Nl, false>>>, true};
        case GgmlType::IQ4_XS:
            return {rows8<FileRows8<Dec8Iq4Xs<false>>>, true};
        case GgmlType::MXFP4:
            return {rows8<FileRows8<Dec8Table<BlockMxfp4, false>>>, true};
        default:
            return {};
    }
}

Kernel find_kernel_packed(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_0:
            return {rows8<PackedRows8<Packed8<GgmlType::Q4_0>>>, true};
        case GgmlType::Q4_1:
            return {rows8<PackedRows8<Packed8<GgmlType::Q4_1>>>, true};
        case GgmlType::Q5_0:
            return {rows8<PackedRows8<Packed8<GgmlType::Q5_0>>>, true};
        case GgmlType::Q5_1:
            return {rows8<PackedRows8<Packed8<GgmlType::Q5_1>>>, true};
        case GgmlType::Q8_0:
            return {rows8<PackedRows8<Packed8<GgmlType::Q8_0>>>, true};
        case GgmlType::Q4_K:
            return {rows8<PackedK8<Dec8Q4_K>>, true};
        case GgmlType::Q5_K:
            return {rows8<PackedK8<Dec8Q5_K>>, true};
        default:
            return {};
    }
}

float quantize_block(const float* x, int8_t* q, int32_t* sums) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int c = 0; c < 4; ++c) {
        v[c] = _mm256_loadu_ps(x + 8 * c);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[c]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127.0f;
    const __m256 inv = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    const __m256 below_half = _mm256_set1_ps(0.49999997f);  // the float just below 1/2
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i iv[4];
    for (int c = 0; c < 4; ++c) {
        // clamped to -127..127 with NaN as 0, as generic::quantize_block (inputs that are not finite, tiny scales)
        const __m256 raw = _mm256_mul_ps(v[c], inv);
        const __m256 y = _mm256_and_ps(_mm256_min_ps(_mm256_max_ps(raw, lo), hi), _mm256_cmp_ps(raw, raw, _CMP_ORD_Q));
        // round half away from zero, exactly: y + (the float below 1/2, with y's sign), truncated. The sum rounds up
        // to the next integer exactly when y's fraction is 1/2 or more (at 1/2 itself the exact sum lies halfway
        // between two floats and rounds to the even one, the integer); below 1/2 it stays below.
        const __m256 nudge = _mm256_or_ps(_mm256_and_ps(y, sign), below_half);
        iv[c] = _mm256_cvttps_epi32(_mm256_add_ps(y, nudge));
    }
    __m128i half_sums[2];
    for (int h = 0; h < 2; ++h) {
        const __m256i s8 = _mm256_add_epi32(iv[2 * h], iv[2 * h + 1]);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_hadd_epi32(s4, s4);
        half_sums[h] = _mm_hadd_epi32(s4, s4);
    }
    // One 8-byte store: the caller reads both sums at once, and two 4-byte stores would not forward to that load.
    _mm_storel_epi64(reinterpret_cast<__m128i*>(sums), _mm_unpacklo_epi32(half_sums[0], half_sums[1]));
    // packs interleave the 128-bit lanes; the permutation puts the 32 bytes back in order
    const __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    const __m256i ordered = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
    return d;
}

namespace {

// Blocks [b0, b0 + n) of token t's row xr (n <= 8), as quantize_activation_blocks writes them with quantize_block,
// eight blocks at a time: each block's maximum, scale and sums go through vectors of eight blocks (quantize_block
// spent most of its time in one block's chain of reductions, divisions and conversions). The same operations on
// every block's numbers, so the same bytes and floats: each lane's maximum is quantize_block's
// max(max(max(l0, l4), max(l2, l6)), max(max(l1, l5), max(l3, l7))) with the same operand order (which matters only
// for NaN), the division, the fp16 rounding of the scale (vcvtps2ph, to nearest even, as fp32_to_fp16) and the
// products of the sums are IEEE operations, and the sums are exact.
void quantize_group8(const float* xr, int64_t t, int64_t b0, int n, const QuantizedActs& out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
        m[i] = _mm256_setzero_ps();
        if (i < n)
            for (int c = 0; c < 4; ++c)
                m[i] = _mm256_max_ps(m[i], _mm256_andnot_ps(sign, _mm256_loadu_ps(xr + 32 * (b0 + i) + 8 * c)));
    }
    // h: max(lanes 0-3, lanes 4-7) of blocks 2k (low half) and 2k + 1 (high half)
    __m256 h[4];
    for (int k = 0; k < 4; ++k)
        h[k] = _mm256_max_ps(_mm256_permute2f128_ps(m[2 * k], m[2 * k + 1], 0x20),
                             _mm256_permute2f128_ps(m[2 * k], m[2 * k + 1], 0x31));
    // g: max(lanes 0-1, lanes 2-3) of each block's four: blocks 4k and 4k + 2 (low), 4k + 1 and 4k + 3 (high)
    __m256 g[2];
    for (int k = 0; k < 2; ++k)
        g[k] = _mm256_max_ps(_mm256_shuffle_ps(h[2 * k], h[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(h[2 * k], h[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // max(lane 0, lane 1) of each: blocks 0, 2, 4, 6 (low), 1, 3, 5, 7 (high), then in order
    const __m256 amax = _mm256_permutevar8x32_ps(
        _mm256_max_ps(_mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1))),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m256 d = _mm256_div_ps(amax, _mm256_set1_ps(127.0f));
    const __m256 inv = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), d),
                                     _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_UQ));  // (d != 0: NaN too)
    const __m256 scale = _mm256_cvtph_ps(_mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    alignas(32) float inv_l[8];
    _mm256_store_ps(inv_l, inv);
    const __m256 below_half = _mm256_set1_ps(0.49999997f), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    int8_t* qr = out.qs + t * out.qs_stride + 32 * b0;
    uint8_t* ur = out.qs_u != nullptr ? out.qs_u + t * out.qs_stride + 32 * b0 : nullptr;
    __m256i runs[8];  // each block's vpsadbw of q + 128: the sums of its four runs of eight bytes, in 64-bit lanes
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
        if (i >= n) {
            runs[i] = _mm256_setzero_si256();
            continue;
        }
        const float* xb = xr + 32 * (b0 + i);
        const __m256 vi = _mm256_broadcast_ss(inv_l + i);
        __m256i iv[4];
        for (int c = 0; c < 4; ++c) {  // quantize_block's operations
            const __m256 raw = _mm256_mul_ps(_mm256_loadu_ps(xb + 8 * c), vi);
            const __m256 y =
                _mm256_and_ps(_mm256_min_ps(_mm256_max_ps(raw, lo), hi), _mm256_cmp_ps(raw, raw, _CMP_ORD_Q));
            iv[c] = _mm256_cvttps_epi32(_mm256_add_ps(y, _mm256_or_ps(_mm256_and_ps(y, sign), below_half)));
        }
        const __m256i q = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3])),
            _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        const __m256i u = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));  // q + 128
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + 32 * i), q);
        if (ur != nullptr) _mm256_storeu_si256(reinterpret_cast<__m256i*>(ur + 32 * i), u);
        if (out.tile_qs != nullptr)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.tile_qs + 32 * tile_entry(out, t, b0 + i)), q);
        runs[i] = _mm256_sad_epu8(u, _mm256_setzero_si256());
    }
    // Each half's sum of q + 128, less 16 * 128, for the eight blocks, in registers: the sums' scalar stores, read
    // back as a vector, failed to forward (and their array's zeroing was a rep stos): half of this function's time
    // in a 16-sequence decode step. With runs r_i = [a_i, b_i | c_i, d_i] (64-bit lanes; a + b half 0, c + d half 1),
    // each pair [a_i, a_i+1, b_i, b_i+1 | c_i, c_i+1, d_i, d_i+1] as 32-bit lanes (each run's sum is below 2^11).
    const auto pair = [&](int i) { return _mm256_or_si256(runs[i], _mm256_slli_epi64(runs[i + 1], 32)); };
    const auto quad = [&](int i) {  // [half 0 of blocks i .. i + 3 | half 1 of them]
        const __m256i lo = pair(i), hi = pair(i + 2);
        return _mm256_add_epi32(_mm256_unpacklo_epi64(lo, hi), _mm256_unpackhi_epi64(lo, hi));
    };
    const __m256i q0 = quad(0), q4 = quad(4), bias = _mm256_set1_epi32(16 * 128);
    const __m256i s0 = _mm256_sub_epi32(_mm256_permute2x128_si256(q0, q4, 0x20), bias);
    const __m256i s1 = _mm256_sub_epi32(_mm256_permute2x128_si256(q0, q4, 0x31), bias);
    const __m256i isum = _mm256_add_epi32(s0, s1);
    const __m256 ds = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(isum));
    const __m256 ds0 = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(s0)), ds1 = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(s1));
    const __m256 pairs_lo = _mm256_unpacklo_ps(ds0, ds1), pairs_hi = _mm256_unpackhi_ps(ds0, ds1);
    const __m256 ds16[2] = {_mm256_permute2f128_ps(pairs_lo, pairs_hi, 0x20),   // blocks 0-3, each half 0 then 1
                            _mm256_permute2f128_ps(pairs_lo, pairs_hi, 0x31)};  // blocks 4-7
    const int64_t at = t * out.blk_stride + b0;
    if (n == 8) {  // (plain stores: a masked store can be about twenty micro-ops, and this is the common case)
        _mm256_storeu_ps(out.d + at, scale);
        _mm256_storeu_ps(out.ds + at, ds);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.isum + at), isum);
        _mm256_storeu_ps(out.ds16 + 2 * at, ds16[0]);
        _mm256_storeu_ps(out.ds16 + 2 * at + 8, ds16[1]);
    } else {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const auto first = [&](int k) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), lane); };  // lanes below k
        _mm256_maskstore_ps(out.d + at, first(n), scale);
        _mm256_maskstore_ps(out.ds + at, first(n), ds);
        _mm256_maskstore_epi32(out.isum + at, first(n), isum);
        _mm256_maskstore_ps(out.ds16 + 2 * at, first(2 * n), ds16[0]);
        if (n > 4) _mm256_maskstore_ps(out.ds16 + 2 * at + 8, first(2 * n - 8), ds16[1]);
    }
    if (out.tile_qs != nullptr) {
        alignas(32) float sl[8], dsl[8];
        alignas(32) int32_t il[8];
        _mm256_store_ps(sl, scale);
        _mm256_store_ps(dsl, ds);
        _mm256_store_si256(reinterpret_cast<__m256i*>(il), isum);
        write_tile_scales(out, t, b0, n, sl, dsl, il);
    }
}

}  // namespace

bool quantize_blocks(const float* x, int64_t n_in, int64_t t0, int64_t t1, int64_t b0, int64_t b1,
                     const QuantizedActs& out) {
    for (int64_t t = t0; t < t1; ++t)
        for (int64_t b = b0; b < b1; b += 8) quantize_group8(x + t * n_in, t, b, static_cast<int>(min64(8, b1 - b)), out);
    return true;
}

bool quantize_rows(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out) {
    return quantize_rows_by_blocks(quantize_blocks, x, n_in, t0, t1, out);
}

void lay_out_lanes(const QuantizedActs& q, int64_t t0, int64_t t1, int64_t b0, int64_t b1) {
    const int64_t nb = q.n_in / 32;
    const __m256i rows = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);  // times blk_stride: eight tokens' scales
    const __m256i scales = _mm256_mullo_epi32(rows, _mm256_set1_epi32(static_cast<int32_t>(q.blk_stride)));
    for (int64_t t = t0; t + kLaneTokens <= t1 && t + kLaneTokens <= q.n_tokens; t += kLaneTokens) {
        for (int64_t b = b0; b < b1; ++b) {
            __m256i r[8], u[8];
            for (int j = 0; j < 8; ++j)
                r[j] = load256(reinterpret_cast<const uint8_t*>(q.qs + (t + j) * q.qs_stride + 32 * b));
            for (int j = 0; j < 8; j += 4) {  // u[j + i]: dwords i and 4 + i of tokens j .. j + 3 (one per lane half)
                const __m256i lo01 = _mm256_unpacklo_epi32(r[j], r[j + 1]);
                const __m256i hi01 = _mm256_unpackhi_epi32(r[j], r[j + 1]);
                const __m256i lo23 = _mm256_unpacklo_epi32(r[j + 2], r[j + 3]);
                const __m256i hi23 = _mm256_unpackhi_epi32(r[j + 2], r[j + 3]);
                u[j] = _mm256_unpacklo_epi64(lo01, lo23);
                u[j + 1] = _mm256_unpackhi_epi64(lo01, lo23);
                u[j + 2] = _mm256_unpacklo_epi64(hi01, hi23);
                u[j + 3] = _mm256_unpackhi_epi64(hi01, hi23);
            }
            auto& out = reinterpret_cast<LaneBlock&>(q.lanes[t / kLaneTokens * nb + b]);
            for (int i = 0; i < 4; ++i) {
                out.qs[i] = low_halves(u[i], u[4 + i]);
                out.qs[4 + i] = high_halves(u[i], u[4 + i]);
            }
            const int64_t first = t * q.blk_stride + b;  // token t's block b
            out.d = _mm256_i32gather_ps(q.d + first, scales, 4);
            out.ds = _mm256_i32gather_ps(q.ds + first, scales, 4);
            out.isum = _mm256_i32gather_epi32(q.isum + first, scales, 4);
        }
    }
}

}  // namespace quill::cpu::avx2

#else  // built without AVX2 in the compiler flags

namespace quill::cpu::avx2 {
Kernel find_kernel(GgmlType) { return {}; }
Kernel find_kernel_packed(GgmlType) { return {}; }
float quantize_block(const float* x, int8_t* q, int32_t* sums) { return generic::quantize_block(x, q, sums); }
bool quantize_blocks(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, const QuantizedActs&) { return false; }
bool quantize_rows(const float*, int64_t, int64_t, int64_t, const QuantizedActs&) { return false; }
void lay_out_lanes(const QuantizedActs& q, int64_t t0, int64_t t1, int64_t b0, int64_t b1) {
    generic::lay_out_lanes(q, t0, t1, b0, b1);
}
}  // namespace quill::cpu::avx2

#endif
