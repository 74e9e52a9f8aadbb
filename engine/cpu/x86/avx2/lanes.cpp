// The AVX2 eight-row kernels of the 4- and 5-bit types and Q8_0 (rows in the 32-bit lanes), over the file's rows
// and over PackedWeights, and eight tokens in lanes for prefill and wide decode.
#include "engine/cpu/x86/avx2/common.h"
#include "engine/cpu/x86/avx2/iq1_decoders.h"
#include "engine/cpu/x86/avx2/iq2_decoders.h"
#include "engine/cpu/x86/avx2/iq3_decoders.h"
#include "engine/cpu/x86/avx2/iq4_decoders.h"

#ifdef QUILL_AVX2_BUILT

namespace quill::cpu::avx2 {

namespace {

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
        __m256i dot;
        if constexpr (kIq2HalfScales<Dec>)
            dot = iq2_half_idot(*st[i], ak);
        else
            dot = block_idot<Dec>([&](int k) { return st[i]->w[k]; }, [&](int k) { return ak[k]; });
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

// PackedK8: rows 8h .. 8h + 7 of a sixteen-row tile of packed Q4_K, Q5_K or IQ4_XS (generic::pack_tiles): the half's
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
    // buffers and stalled the loads: see PackedK16 in x86/avx512/pack.cpp).
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
    static_assert(P::kSigned && P::kRecordValues && !P::kHasMin);
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
                if constexpr (Src::kPacked && requires { requires Dec::kRecordValues; }) {  // Q8_0's, in place
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
    using Dec = typename Src::Dec;
    if constexpr (!kIq2HalfScales<Dec>) {  // (the lane kernels have no scales per 16 elements)
        if (args.n_tokens >= kLaneTokens) return rows8_lanes<Src>(args, r0, r1, scratch);
    }
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

}  // namespace

void add_lanes_kernels(KernelTable& table) {
    entry(table.rows, GgmlType::Q4_0) = {rows8<FileRows8<Dec8Q4_0>>, true};
    entry(table.rows, GgmlType::Q4_1) = {rows8<FileRows8<Dec8Q4_1>>, true};
    entry(table.rows, GgmlType::Q5_0) = {rows8<FileRows8<Dec8Q5_0>>, true};
    entry(table.rows, GgmlType::Q5_1) = {rows8<FileRows8<Dec8Q5_1>>, true};
    entry(table.rows, GgmlType::Q8_0) = {rows8<FileRows8<Dec8Q8_0>>, true};
    entry(table.rows, GgmlType::Q4_K) = {rows8<FileRows8<Dec8Q4_K>>, true};
    entry(table.rows, GgmlType::Q5_K) = {rows8<FileRows8<Dec8Q5_K>>, true};
    entry(table.rows, GgmlType::IQ4_NL) = {rows8<FileRows8<Dec8Table<BlockIq4Nl, false>>>, true};
    entry(table.rows, GgmlType::IQ4_XS) = {rows8<FileRows8<Dec8Iq4Xs<false>>>, true};
    entry(table.rows, GgmlType::MXFP4) = {rows8<FileRows8<Dec8Table<BlockMxfp4, false>>>, true};
    entry(table.rows, GgmlType::IQ3_XXS) = {rows8<FileRows8<Dec8Iq3Xxs<false>>>, true};
    entry(table.rows, GgmlType::IQ3_S) = {rows8<FileRows8<Dec8Iq3S<false>>>, true};
    entry(table.rows, GgmlType::IQ2_XXS) = {rows8<FileRows8<Dec8Iq2Xxs<false>>>, true};
    entry(table.rows, GgmlType::IQ2_XS) = {rows8<FileRows8<Dec8Iq2Xs<>>>, true};
    entry(table.rows, GgmlType::IQ2_S) = {rows8<FileRows8<Dec8Iq2S<>>>, true};
    entry(table.rows, GgmlType::IQ1_S) = {rows8<FileRows8<Dec8Iq1S<false>>>, true};
    entry(table.rows, GgmlType::IQ1_M) = {rows8<FileRows8<Dec8Iq1M<>>>, true};
    entry(table.packed, GgmlType::Q4_0) = {rows8<PackedRows8<Packed8<GgmlType::Q4_0>>>, true};
    entry(table.packed, GgmlType::Q4_1) = {rows8<PackedRows8<Packed8<GgmlType::Q4_1>>>, true};
    entry(table.packed, GgmlType::Q5_0) = {rows8<PackedRows8<Packed8<GgmlType::Q5_0>>>, true};
    entry(table.packed, GgmlType::Q5_1) = {rows8<PackedRows8<Packed8<GgmlType::Q5_1>>>, true};
    entry(table.packed, GgmlType::Q8_0) = {rows8<PackedRows8<Packed8<GgmlType::Q8_0>>>, true};
    entry(table.packed, GgmlType::Q4_K) = {rows8<PackedK8<Dec8Q4_K>>, true};
    entry(table.packed, GgmlType::Q5_K) = {rows8<PackedK8<Dec8Q5_K>>, true};
    entry(table.packed, GgmlType::IQ4_NL) = {rows8<PackedRows8<Packed8Iq4Nl>>, true};
    entry(table.packed, GgmlType::IQ4_XS) = {rows8<PackedK8<Dec8Iq4Xs<false>>>, true};
}

}  // namespace quill::cpu::avx2

#endif
