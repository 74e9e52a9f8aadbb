// The AVX-512 sixteen-row kernels of the 4- and 5-bit types and Q8_0 (rows in the 32-bit lanes): rows16 and its
// decode and prefill paths, which the packed and AMX kernels share.
#pragma once

#include "engine/cpu/x86/avx512/common.h"

#ifdef QUILL_AVX512_BUILT

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

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

// Whether a decoder's steps have a scale per 16 elements (IQ2_XS, IQ2_S, IQ1_M: iq2_decoders.h's Dec16Half): wm then
// holds, as int32 lanes, each row's integer half scales (the first 16 values' in the low 16 bits), ws the rest of the
// scale, and the exact integer dot of a block is the sum of each half's dot times its half scale.
template <typename Dec>
constexpr bool kHalfScaleSteps = requires { Dec::kHalfScales; };

// The sum of the first 16 of a block's 32 int8 values a (vpsadbw of the values plus 128).
[[gnu::always_inline]] inline int32_t first_half_sum(const int8_t* a) {
    const __m128i u = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)), _mm_set1_epi8(-128));
    const __m128i sad = _mm_sad_epu8(u, _mm_setzero_si128());
    return _mm_cvtsi128_si32(sad) + _mm_extract_epi16(sad, 4) - 16 * 128;
}

// kHalfScaleSteps: the exact int32 dot of a block of the sixteen rows with one token's 32 values a (their sum isum):
// each half's chain starts from -c times the half's sum, then is multiplied by the half's scale (wm's low 16 bits for
// the first half, its high 16 for the second). The AVX2 kernels of these types, which decode fewer than
// kRows16MinTokens tokens (avx512/rows.cpp), sum to the same integer, so a token's outputs have the same bits on both.
template <typename Dec>
[[gnu::always_inline]] inline __m512i half_scaled_dot(const Step16& st, const int8_t* a, int32_t isum) {
    const int32_t lo_sum = first_half_sum(a);
    __m512i lo = _mm512_set1_epi32(-Dec::kOffset * lo_sum), hi = _mm512_set1_epi32(-Dec::kOffset * (isum - lo_sum));
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
        lo = dpbusd_broadcast(lo, st.w[k], a + 4 * k);
        hi = dpbusd_broadcast(hi, st.w[k + 4], a + 16 + 4 * k);
    }
    const __m512i sc = _mm512_castps_si512(st.wm);
    return _mm512_add_epi32(_mm512_mullo_epi32(lo, _mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF))),
                            _mm512_mullo_epi32(hi, _mm512_srli_epi32(sc, 16)));
}

// The exact integer dots of a block of the sixteen rows with one token's 32 values a (their sum isum), the first
// chain starting from -c * isum (the unsigned weights' offset). Two chains halve the latency of a token's block;
// one saves their sum where other tokens' blocks hide the latency (rows16_group).
template <typename Dec, int Chains = 2>
[[gnu::always_inline]] inline __m512i block_dot(const Step16& st, const int8_t* a, int32_t isum) {
    static_assert(Chains == 1 || Chains == 2);
    if constexpr (kHalfScaleSteps<Dec>) return half_scaled_dot<Dec>(st, a, isum);
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
    if constexpr (kHalfScaleSteps<Dec>) {  // (a token at a time: two chains each already)
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) scale_block<Dec>(st, block_dot<Dec>(st, a + 32 * t, isum[t]), d[t], ds[t], acc[t]);
        return;
    }
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

// The decode path, eight rows at a time in 256-bit vectors, decoded as it goes by the AVX2 folder's eight-row
// decoders (Dec::Dec8, x86/avx2/decoders.h): with sixteen rows the sixteen row pointers and the gathers'
// temporaries no longer fit the integer registers, and the spills made decode slower than the four-row kernels
// before them (this form runs about level with those: Q4_K faster, Q4_0 slower). Each lane computes exactly what
// a lane of rows16_block computes (the same exact integer dot, then the same float operations), so a token's
// outputs have the same bits on both paths.
template <typename Dec>
inline void rows8_block(const avx2::Step8& st, const TokenActs& ta, int64_t b, __m256& acc) {
    const int8_t* a = ta.qs + 32 * b;  // [32]
    // (the types with a scale per 16 values decode fewer than four tokens on the AVX2 kernels, not here)
    static_assert(!kHalfScaleSteps<Dec>);
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
    // (Q8_0 decodes on the four-row kernels, q8_0_rows; the types with half scales on the AVX2 ones, half_scale_rows)
    if constexpr (requires { typename Dec::Dec8; } && !kHalfScaleSteps<Dec>) {
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

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS

#endif  // QUILL_AVX512_BUILT
