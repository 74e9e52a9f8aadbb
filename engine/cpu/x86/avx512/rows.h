// The AVX-512 four-row kernels (Q6_K; Q8_0 below four tokens): quant_rows and its decode and prefill tiles.
#pragma once

#include "engine/cpu/x86/avx512/common.h"

#ifdef QUILL_AVX512_BUILT

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

// ---- decode tile: 4 rows x T tokens, rows decoded on the fly ----

// Whether the decoder's blocks end in an exact integer dot per row (see DecQ8_0).
template <typename Dec>
constexpr bool kExactBlocks = requires { requires Dec::kExactBlocks; };

// out[r][t] = the dot of row r with token t0 + t over the first n_groups groups. Each vpdpbusd multiplies a
// quarter of all 4 rows (lane r) with the token's quarter broadcast; c * (the lane's sum of a) is subtracted in
// int32, so each lane holds the exact sum of (u - c) * a that the prefill tile computes. The float minima come in
// through accm = sum over blocks (sub-blocks for the k-quants) of wm * ds, in block order (add_block_minima repeats
// it for the prefill path).
// With Offsets (one quarter a scale), each dot starts from its -c * sum(a) in `offsets` (offset_terms of tokens
// [t0, t0 + T)) instead of subtracting a second vpdpbusd's: the same exact integers.
template <typename Dec, int T, bool Offsets = false, typename Tile>
void decode_tile(Tile& tile, const QuantizedActs& q, int64_t t0, int64_t n_groups, float (*out)[kMaxTokens],
                 const int32_t* offsets = nullptr) {
    static_assert(!Offsets || (Dec::kQuartersPerScale == 1 && Dec::kOffset != 0));
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
                    if constexpr (Offsets) {
                        const int32_t* o = offsets + t * (q.n_in / 4) + 16 * s + 4 * j;
                        dot = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
                    }
                    for (int i = 0; i < QG; ++i) {
                        const __m512i ai =
                            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * i)));
                        dot = _mm512_dpbusd_epi32(dot, w.u[j * QG + i], ai);
                        if constexpr (Dec::kOffset != 0 && !Offsets) coff = _mm512_dpbusd_epi32(coff, offset, ai);
                    }
                    if constexpr (Dec::kOffset != 0 && !Offsets) dot = _mm512_sub_epi32(dot, coff);
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

// decode_tile's offsets: -c times the sum of each four activation bytes of tokens [t0, t0 + n), out [n][n_in / 4]
// (the bytes 4 i .. 4 i + 3 at i), made once for all of a range's row tiles.
template <int Offset>
void offset_terms(const QuantizedActs& q, int64_t t0, int64_t n, int32_t* out) {
    static_assert(Offset > 0 && Offset < 128);
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i + 64 <= q.n_in; i += 64) {
            const __m512i a = _mm512_loadu_si512(q.qs + (t0 + t) * q.qs_stride + i);
            const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(Offset), a);
            _mm512_storeu_si512(out + t * (q.n_in / 4) + i / 4, _mm512_sub_epi32(_mm512_setzero_si512(), sum));
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
template <typename Dec, int QG = Dec::kQuartersPerScale, typename Tile>
void repack_tile(Tile& tile, int64_t n_groups, PrefillStep<QG>* out, float* wm) {
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

// Rows [r, r + nr) of a file's tile: its 32-blocks from nb_main on (a trailing odd one) added to every token's
// outputs, after everything else (with exact blocks, the chain's last fma).
template <typename Dec>
void add_odd_blocks(const RowTile<Dec>& tile, const KernelArgs& args, int64_t nb_main, int64_t r, int nr,
                    OutputBlock& block) {
    const QuantizedActs& q = *args.q;
    for (int64_t b = nb_main; b < args.w->n_in / 32; ++b) {
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
                    block.at(r + i, t) += generic::block_dot(args.w->type, tile.rows[i], b, q, t);
                }
            }
        }
    }
}

// Rows [r0, r1) of y for all tokens, a tile of 4 rows at a time (from Tile: the file's rows, or packed Q6_K's quads),
// written a block of rows at a time.
template <typename Dec, typename Tile = RowTile<Dec>>
void quant_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    constexpr int QG = Dec::kQuartersPerScale;
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32;
    const int64_t n_groups = nb / (2 * Dec::kGroupSteps);
    const int64_t n_steps = n_groups * Dec::kGroupSteps, nb_main = 2 * n_steps;
    const QuantScratch<PrefillStep<QG>> sc(scratch, w.n_in);
    const bool prefill = args.n_tokens >= kPrefillMinTokens && q.qs_u != nullptr;
    const int64_t block_rows = OutputBlock::rows_for(args.n_tokens);
    // Decode's offset terms of every token (one quarter a scale), in the room of the repacked steps it does not use.
    constexpr bool kOffsetTerms = QG == 1 && Dec::kOffset != 0;
    const int32_t* offsets = nullptr;
    if constexpr (kOffsetTerms) {
        if (!prefill && args.n_tokens * w.n_in <= n_steps * static_cast<int64_t>(sizeof(PrefillStep<QG>))) {
            offset_terms<Dec::kOffset>(q, 0, args.n_tokens, reinterpret_cast<int32_t*>(sc.repacked));
            offsets = reinterpret_cast<const int32_t*>(sc.repacked);
        }
    }
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        OutputBlock block{sc.output_block, args.n_tokens, rb, min64(block_rows, r1 - rb)};
        for (int64_t r = rb; r < rb + block.n_rows; r += 4) {
            const int nr = static_cast<int>(min64(4, r1 - r));
            Tile tile = Tile::at(w, r, nr);
            if (prefill) repack_tile<Dec>(tile, n_groups, sc.repacked, sc.wm);
            for (int64_t t = 0; t < args.n_tokens;) {
                float out[4][kPrefillTokens];
                int nt;
                if (prefill) {
                    nt = prefill_tokens(sc.repacked, n_steps, q, t, args.n_tokens - t, out);
                } else {
                    nt = static_cast<int>(min64(kMaxTokens, args.n_tokens - t));
                    float part[4][kMaxTokens];
                    auto decode = [&]<int T>() {
                        if constexpr (kOffsetTerms) {
                            if (offsets != nullptr)
                                return decode_tile<Dec, T, true>(tile, q, t, n_groups, part, offsets + t * (w.n_in / 4));
                        }
                        decode_tile<Dec, T>(tile, q, t, n_groups, part);
                    };
                    switch (nt) {
                        case 1:
                            decode.template operator()<1>();
                            break;
                        case 2:
                            decode.template operator()<2>();
                            break;
                        case 3:
                            decode.template operator()<3>();
                            break;
                        default:
                            decode.template operator()<4>();
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
            // A trailing odd 32-block, after everything else on both paths (packed Q6_K has none: whole super-blocks).
            if constexpr (std::is_same_v<Tile, RowTile<Dec>>) add_odd_blocks<Dec>(tile, args, nb_main, r, nr, block);
        }
        block.flush(args.y, w.n_out);
    }
}

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS

#endif  // QUILL_AVX512_BUILT
