// The AVX2 four-row kernels over the file's rows (Q6_K, Q3_K, Q2_K): quant_rows, its decode and prefill
// tiles, as two row pairs.
#include "engine/cpu/x86/avx2/common.h"

#ifdef QUILL_AVX2_BUILT

namespace quill::cpu::avx2 {

namespace {

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

    // Rows [r, r + nr) of w (a ragged tile repeats its last row); wm and wm_stride left to the caller.
    static RowTile at(const WeightMatrix& w, int64_t r, int nr) {
        RowTile tile;  // its decoder state is written by begin_group before a step reads it: not zeroed
        tile.prefetch = prefetch_distance(w.row_bytes);
        for (int i = 0; i < 4; ++i)
            tile.rows[i] = static_cast<const uint8_t*>(w.data) + (r + min64(i, nr - 1)) * static_cast<int64_t>(w.row_bytes);
        return tile;
    }
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
template <typename Dec, int T, typename Tile>
void decode_tile(Tile& tile, const QuantizedActs& q, int64_t t0, int64_t n_groups, float (*out)[kMaxTokens]) {
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
template <typename Dec, int QG = Dec::kQuartersPerScale, typename Tile>
void repack_tile(Tile& tile, int64_t n_groups, PrefillStep<QG>* out) {
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

// Rows [r0, r1) of y for all tokens, a tile of 4 rows at a time (from Tile: the file's rows), written a block of rows
// at a time.
template <typename Dec, typename Tile = RowTile<Dec>>
void quant_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    constexpr int QG = Dec::kQuartersPerScale;
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32;
    const int64_t n_groups = nb / Dec::kGroupSteps;
    const QuantScratch<PrefillStep<QG>> sc(scratch, w.n_in);
    const bool prefill = args.n_tokens >= kPrefillMinTokens && q.qs_u != nullptr;
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
            Tile tile = Tile::at(w, r, nr);
            if constexpr (requires { tile.wm; }) {  // the file's rows: the decoder's minima go there
                tile.wm = sc.wm;
                tile.wm_stride = sc.wm_stride;
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
            repack_tile<Dec>(tile, n_groups, sc.repacked);
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

}  // namespace

void add_rows_kernels(KernelTable& table) {
    entry(table.rows, GgmlType::Q6_K) = {quant_rows<DecQ6_K>, true};
    entry(table.rows, GgmlType::Q3_K) = {quant_rows<DecQ3_K>, true};
    entry(table.rows, GgmlType::Q2_K) = {quant_rows<DecQ2_K>, true};
}

}  // namespace quill::cpu::avx2

#endif
