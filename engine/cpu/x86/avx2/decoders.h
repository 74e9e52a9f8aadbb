// Weight decoders of the AVX2 kernels. Included by the AVX2 kernel files only (this folder; and the AVX-512 one),
// which alone are compiled with the AVX2 flags; everything here has internal linkage.
//
// A decoder reads four weight rows at once, one 32-block (two 16-element quarters) per step, as two row pairs:
// u[q][p] holds in its 128-bit lane i the 16 weights of quarter q of row 2p + i, so that vpmaddubsw multiplies
// two rows with a token's quarter broadcast to both lanes (Q6_K, Q3_K, Q2_K). Bytes are unsigned in the unified
// form of kernels.h (w = ws * (u - c) + wm). The eight-row decoders below (Dec8, Dec8K4, Dec8Q8_0, Packed8) put
// eight rows in the lanes of a vector; Q8_0's values, which would saturate vpmaddubsw as unsigned, stay signed.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "engine/cpu/kernels.h"

namespace quill::cpu::avx2 {
namespace {

struct Step4 {
    __m256i u[2][2];  // [quarter][row pair]
    __m256 ws[2][2];  // [quarter][row pair]: lanes 0..3 the scale of row 2p, 4..7 of row 2p + 1
    __m128 wc;        // 32-block types, element r = row r: the block's minimum (kHasMin), else its scale
};

using Rows = const uint8_t* const*;  // the 4 rows

inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Lanes 0..127 from a, 128..255 from b: a load and an insert (vperm2i128, which would take them from two 256-bit
// loads, is 8 uops with a throughput of one per 3 cycles on some AVX2 cores).
inline __m256i load_2x16(const uint8_t* a, const uint8_t* b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(load128(a)), load128(b), 1);
}

// The 128-bit halves of a and b: low_halves = (a.lo, b.lo), high_halves = (a.hi, b.hi); vperm2i128's 0x20 and 0x31,
// as an insert and an extract, each one or two uops.
inline __m256i low_halves(__m256i a, __m256i b) { return _mm256_inserti128_si256(a, _mm256_castsi256_si128(b), 1); }
inline __m256i high_halves(__m256i a, __m256i b) {
    return _mm256_inserti128_si256(b, _mm256_extracti128_si256(a, 1), 0);
}
inline __m256 low_halves(__m256 a, __m256 b) { return _mm256_insertf128_ps(a, _mm256_castps256_ps128(b), 1); }
inline __m256 high_halves(__m256 a, __m256 b) { return _mm256_insertf128_ps(b, _mm256_extractf128_ps(a, 1), 0); }

// The 32 bytes at rows[2p + i] + off as two quarter vectors: lo gets bytes 0..15 of each row, hi bytes 16..31.
inline void load_2x32(Rows rows, int p, size_t off, __m256i& lo, __m256i& hi) {
    const uint8_t *a = rows[2 * p] + off, *b = rows[2 * p + 1] + off;
    lo = load_2x16(a, b);
    hi = load_2x16(a + 16, b + 16);
}

// The fp16 values at rows[r] + off as floats, element r.
inline __m128 half_4(Rows rows, size_t off) {
    uint64_t bits = 0;
    for (int r = 0; r < 4; ++r) bits |= uint64_t{load_unaligned<uint16_t>(rows[r] + off)} << (16 * r);
    return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(bits)));
}

// Lanes 0..3 = element 2p of v, lanes 4..7 = element 2p + 1.
inline __m256 expand_pair(__m128 v, int p) {
    const __m256i idx = _mm256_add_epi32(_mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0), _mm256_set1_epi32(2 * p));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), idx);
}

// Lanes 0..3 = *a, lanes 4..7 = *b.
inline __m256 pair_of(const float* a, const float* b) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_broadcast_ss(a)), _mm_broadcast_ss(b), 1);
}

inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
inline __m256i high_nibbles(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }

// ---- the decoders ----
//   kOffset            c of the unified form
//   kHasMin            blocks have a float minimum
//   kRowMinima         load_group writes each row's minima to wm (see below) instead of Step4::wc
//   kMinimaPer16       those minima are per 16 elements (Q2_K), dotted with the activations' half sums
//   kQuartersPerScale  quarters sharing one scale: 2 (a 32-block), 1 for Q6_K
//   kGroupSteps        steps (32-blocks) per group (a super-block for the k-quants)
//   kGroupBytes        bytes of a group in a row

struct NoState {};

// Q6_K: w = d * sc_i * (q - 32) with a scale per 16 elements. 32-block j of the super-block lies in the
// 128-element half j / 4; with k = j % 4 its low nibbles are ql[64 half + 32 (k % 2) + l] (high nibbles when
// k >= 2) and its top two bits qh[32 half + l] at bit 2k (see engine/format/quant_k.cpp).
struct DecQ6_K {
    static constexpr int kOffset = 32;
    static constexpr bool kHasMin = false, kRowMinima = false, kMinimaPer16 = false;
    static constexpr int kQuartersPerScale = 1;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockQ6_K);
    struct State {
        float ws[4][16];  // [row][i]: d * sc_i
    };

    // The offset 32 is taken off in the integer products (see decode_tile), so there are no minima.
    static void load_group(Rows rows, int64_t g, State& st, float*, int64_t) {
        load_scales(Q6Heads::of_rows(rows, g), st);
    }

    // st from each row's sixteen int8 scales and fp16 d.
    static void load_scales(const Q6Heads& h, State& st) {
        for (int r = 0; r < 4; ++r) {
            const __m256 dr = _mm256_set1_ps(_cvtsh_ss(load_unaligned<uint16_t>(h.d[r])));
            for (int half = 0; half < 2; ++half) {
                const __m128i sc = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(h.scales[r] + 8 * half));
                _mm256_storeu_ps(st.ws[r] + 8 * half,
                                 _mm256_mul_ps(dr, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
            }
        }
    }

    static Step4 step(Rows rows, int64_t g, int j, const State& st) {
        const size_t off = g * sizeof(BlockQ6_K);
        const int half = j / 4, k = j % 4;
        __m256i ql[2][2], qh[2][2];  // [row pair][quarter]
        for (int p = 0; p < 2; ++p) {
            load_2x32(rows, p, off + offsetof(BlockQ6_K, ql) + 64 * half + 32 * (k % 2), ql[p][0], ql[p][1]);
            load_2x32(rows, p, off + offsetof(BlockQ6_K, qh) + 32 * half, qh[p][0], qh[p][1]);
        }
        return decode(ql, qh, j, st);
    }

    // 32-block j from its row pairs' ql and qh quarters (lane i of ql[p][q]: row 2p + i's quarter q of the block's
    // low nibbles, of qh[p][q] its quarter q of qh[32 half ..]).
    [[gnu::always_inline]] static Step4 decode(const __m256i (&ql)[2][2], const __m256i (&qh)[2][2], int j,
                                               const State& st) {
        const int k = j % 4;
        Step4 s;
        for (int p = 0; p < 2; ++p) {
            for (int q = 0; q < 2; ++q) {
                const __m256i nibbles = k >= 2 ? _mm256_srli_epi16(ql[p][q], 4) : ql[p][q];
                // The top two bits (at bit 2k of qh) moved to bits 4 and 5 by one shift, none for k = 2.
                const __m256i top = k < 2    ? _mm256_slli_epi16(qh[p][q], 4 - 2 * k)
                                    : k == 3 ? _mm256_srli_epi16(qh[p][q], 2)
                                             : qh[p][q];
                s.u[q][p] = _mm256_or_si256(_mm256_and_si256(nibbles, _mm256_set1_epi8(0x0F)),
                                            _mm256_and_si256(top, _mm256_set1_epi8(0x30)));
                s.ws[q][p] = pair_of(&st.ws[2 * p][2 * j + q], &st.ws[2 * p + 1][2 * j + q]);
            }
        }
        s.wc = _mm_setzero_ps();
        return s;
    }
};

// Q3_K: w = d * sc_i * (u - 4) with a scale per 16 elements, u = the two low bits of qs[32 half + l] at bit 2k
// plus 4 when bit j of hmask[l] is set, for 32-block j (half = j / 4, k = j % 4; see decode_q3_k in
// engine/cpu/generic/rows.cpp).
struct DecQ3_K {
    static constexpr int kOffset = 4;
    static constexpr bool kHasMin = false, kRowMinima = false, kMinimaPer16 = false;
    static constexpr int kQuartersPerScale = 1;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockQ3_K);
    // The group's bit planes as Step4 lays them out, arranged once per group rather than for each of its eight
    // 32-blocks (each reads the same hmask and one of two qs halves).
    struct State {
        __m256i hm[2][2];     // [pair][quarter]: hmask
        __m256i qs[2][2][2];  // [half][pair][quarter]: qs[32 half ..]
        float ws[4][16];      // [row][i]: d * sc_i
    };

    // The 16 scales (q3_k_scale) four at a time: word w of the result holds scales 4w .. 4w + 3, their low
    // nibbles from word w % 2 of the 12 bytes (shifted by 4 for w >= 2) and top bits from word 2 at 2w.
    static void load_group(Rows rows, int64_t g, State& st, float*, int64_t) {
        for (int r = 0; r < 4; ++r) {
            const uint8_t* b = rows[r] + g * sizeof(BlockQ3_K);
            uint32_t w[3];
            std::memcpy(w, b + offsetof(BlockQ3_K, scales), 12);
            const uint32_t low4 = 0x0F0F0F0F, top2 = 0x03030303;
            auto word = [&](int k) {
                return static_cast<int>(((w[k % 2] >> (4 * (k / 2))) & low4) | (((w[2] >> (2 * k)) & top2) << 4));
            };
            // Built in registers: four scalar stores read back as one vector would stall store forwarding.
            const __m128i u = _mm_sub_epi8(_mm_set_epi32(word(3), word(2), word(1), word(0)), _mm_set1_epi8(32));
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_unaligned<uint16_t>(b + offsetof(BlockQ3_K, d))));
            _mm256_storeu_ps(st.ws[r], _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(u))));
            _mm256_storeu_ps(st.ws[r] + 8,
                             _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(u, 8)))));
        }
        const size_t off = g * sizeof(BlockQ3_K);
        for (int p = 0; p < 2; ++p) {
            load_2x32(rows, p, off + offsetof(BlockQ3_K, hmask), st.hm[p][0], st.hm[p][1]);
            for (int half = 0; half < 2; ++half)
                load_2x32(rows, p, off + offsetof(BlockQ3_K, qs) + 32 * half, st.qs[half][p][0], st.qs[half][p][1]);
        }
    }

    static Step4 step(Rows, int64_t, int j, const State& st) {
        const int half = j / 4, k = j % 4;
        const __m128i shift = _mm_cvtsi32_si128(2 * k);
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j)), four = _mm256_set1_epi8(4);
        Step4 s;
        for (int p = 0; p < 2; ++p) {
            for (int q = 0; q < 2; ++q) {
                const __m256i low = _mm256_and_si256(_mm256_srl_epi16(st.qs[half][p][q], shift), _mm256_set1_epi8(3));
                const __m256i high =
                    _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(st.hm[p][q], bit), bit), four);
                s.u[q][p] = _mm256_or_si256(low, high);
                s.ws[q][p] = pair_of(&st.ws[2 * p][2 * j + q], &st.ws[2 * p + 1][2 * j + q]);
            }
        }
        s.wc = _mm_setzero_ps();
        return s;
    }
};

// Q2_K: w = d * sc_i * u - dmin * m_i per 16 elements i, u the two bits of qs[32 (j / 4) + l] at bit 2 (j % 4) for
// 32-block j (see decode_q2_k in generic/rows.cpp); the minima go to wm, one per 16 elements.
struct DecQ2_K {
    static constexpr int kOffset = 0;
    static constexpr bool kHasMin = true, kRowMinima = true, kMinimaPer16 = true;
    static constexpr int kQuartersPerScale = 1;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockQ2_K);
    struct State {
        __m256i qs[2][2][2];  // [half][pair][quarter]: qs[32 half ..] as Step4 lays it out, once per group
        float ws[4][16];      // [row][i]: d * sc_i
    };

    // Minima -dmin * m_i go to wm[r * wm_stride + 16 g + i].
    static void load_group(Rows rows, int64_t g, State& st, float* wm, int64_t wm_stride) {
        for (int r = 0; r < 4; ++r) {
            const uint8_t* b = rows[r] + g * sizeof(BlockQ2_K);
            const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(BlockQ2_K, scales)));
            const __m128i lo = _mm_and_si128(sc, _mm_set1_epi8(0x0F));
            const __m128i hi = _mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0F));
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_unaligned<uint16_t>(b + offsetof(BlockQ2_K, d))));
            const __m256 dmin = _mm256_set1_ps(-_cvtsh_ss(load_unaligned<uint16_t>(b + offsetof(BlockQ2_K, dmin))));
            for (int h = 0; h < 2; ++h) {
                const __m128i l8 = h == 0 ? lo : _mm_srli_si128(lo, 8), m8 = h == 0 ? hi : _mm_srli_si128(hi, 8);
                _mm256_storeu_ps(st.ws[r] + 8 * h, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(l8))));
                _mm256_storeu_ps(wm + r * wm_stride + 16 * g + 8 * h,
                                 _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8))));
            }
        }
        for (int p = 0; p < 2; ++p) {
            for (int half = 0; half < 2; ++half) {
                load_2x32(rows, p, g * sizeof(BlockQ2_K) + offsetof(BlockQ2_K, qs) + 32 * half, st.qs[half][p][0],
                          st.qs[half][p][1]);
            }
        }
    }

    static Step4 step(Rows, int64_t, int j, const State& st) {
        const __m128i shift = _mm_cvtsi32_si128(2 * (j % 4));
        Step4 s;
        for (int p = 0; p < 2; ++p) {
            for (int q = 0; q < 2; ++q) {
                s.u[q][p] = _mm256_and_si256(_mm256_srl_epi16(st.qs[j / 4][p][q], shift), _mm256_set1_epi8(3));
                s.ws[q][p] = pair_of(&st.ws[2 * p][2 * j + q], &st.ws[2 * p + 1][2 * j + q]);
            }
        }
        s.wc = _mm_setzero_ps();
        return s;
    }
};

// ---- eight rows in lanes: the 4- and 5-bit 32-block types ----
// One 32-block of eight rows with the rows in the 32-bit lanes: w[k] holds in lane r the four bytes u[4k .. 4k + 3]
// of row r's block, so that one vpmaddubsw multiplies all eight rows with a token's four activations a[4k .. 4k + 3]
// broadcast to every lane. Summing the eight products in int16 and one vpmaddwd leaves lane r holding row r's whole
// block, sum u * a, exactly: no lanes to add up later, and the float work of a block (convert, scale, accumulate)
// is one instruction each for eight rows.
struct Step8 {
    __m256i w[8];  // unsigned u (0..15, or 0..31 with a fifth bit)
    __m256 ws;     // lane r: row r's scale
    __m256 wm;     // lane r: row r's minimum (kHasMin)
};

inline uint32_t load_u32(const uint8_t* p) { return load_unaligned<uint32_t>(p); }

// Keeps v in an integer register: without it the compiler vectorizes the gathers below into many more vector
// instructions (inserts, widenings, shifts) than the integer units need for them.
template <typename T>
inline T in_gpr(T v) {
    asm("" : "+r"(v));
    return v;
}

// (R: the eight rows, an array of pointers or anything with rows[r].)
// The 32 bits at rows[r] + off in lane r, put together two rows to a 64-bit integer register: the integer units
// do the gathering, and the vector units, which the kernels keep busy, only insert four quadwords.
template <typename R>
inline __m256i gather_u32(const R& rows, size_t off) {
    uint64_t pairs[4];
    for (int i = 0; i < 4; ++i)
        pairs[i] = in_gpr(uint64_t{load_u32(rows[2 * i] + off)} | (uint64_t{load_u32(rows[2 * i + 1] + off)} << 32));
    return _mm256_setr_epi64x(static_cast<long long>(pairs[0]), static_cast<long long>(pairs[1]),
                              static_cast<long long>(pairs[2]), static_cast<long long>(pairs[3]));
}

// The 16 bits at rows[r] + off in 16-bit lane r of 128 bits, gathered like gather_u32.
template <typename R>
inline __m128i gather_u16(const R& rows, size_t off) {
    uint64_t quads[2] = {0, 0};
    for (int r = 0; r < 8; ++r)
        quads[r / 4] |= in_gpr(uint64_t{load_unaligned<uint16_t>(rows[r] + off)}) << (16 * (r % 4));
    return _mm_set_epi64x(static_cast<long long>(in_gpr(quads[1])), static_cast<long long>(in_gpr(quads[0])));
}

// The 16 bytes at rows[r] + off as four vectors of four-byte groups: lane r of x[k] holds bytes 4k .. 4k + 3 of
// row r (two rows to a 256-bit load, then a 4 x 4 transpose of 32-bit elements within each 128-bit half).
template <typename R>
inline void transpose_16(const R& rows, size_t off, __m256i x[4]) {
    __m256i y[4];  // lane 0: row i, lane 1: row i + 4
    for (int i = 0; i < 4; ++i)
        y[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(rows[i] + off)), load128(rows[i + 4] + off), 1);
    const __m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
    x[0] = _mm256_unpacklo_epi64(t0, t2);
    x[1] = _mm256_unpackhi_epi64(t0, t2);
    x[2] = _mm256_unpacklo_epi64(t1, t3);
    x[3] = _mm256_unpackhi_epi64(t1, t3);
}

// Two fp16 values per 32-bit lane (lane r: row r's pair, low half first) as floats: lo the low halves, hi the high.
inline void halves_to_float(__m256i v, __m256& lo, __m256& hi) {
    const __m256i halves = _mm256_permute4x64_epi64(
        _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9,
                                                12, 13, 2, 3, 6, 7, 10, 11, 14, 15)),
        0xD8);
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(halves));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1));
}

// Q5_0 / Q5_1: element e's fifth bit is bit e of the block's qh word (lane r of h: row r's); the group of four
// bytes w[k] (elements 4k .. 4k + 3) gets bits 4k .. 4k + 3 as 16s, from byte k / 2 of the word.
inline void add_fifth_bits(__m256i h, __m256i w[8]) {
    const __m256i sixteen = _mm256_set1_epi8(16);
    for (int k = 0; k < 8; ++k) {
        const char src = static_cast<char>(k / 2);  // the byte of each lane holding the group's bits
        const __m256i idx = _mm256_setr_epi8(src, src, src, src, src + 4, src + 4, src + 4, src + 4, src + 8, src + 8,
                                             src + 8, src + 8, src + 12, src + 12, src + 12, src + 12, src, src, src,
                                             src, src + 4, src + 4, src + 4, src + 4, src + 8, src + 8, src + 8,
                                             src + 8, src + 12, src + 12, src + 12, src + 12);
        const __m256i bit = _mm256_set1_epi32(static_cast<int>(0x08040201u << (4 * (k % 2))));
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(h, idx), bit), bit);
        w[k] = _mm256_or_si256(w[k], _mm256_and_si256(set, sixteen));
    }
}

//   kOffset         c of the unified form (w = ws * (u - c) + wm)
//   kHasMin         blocks have a float minimum
//   kGroupsPerMadd  four-byte groups whose products an int16 lane can sum without overflow: 8 x 2 x 15 x 127 and
//                   4 x 2 x 31 x 127 stay below 32767
template <typename Block, int Offset>
struct Dec8 {
    static constexpr int kOffset = Offset;
    static constexpr bool kSigned = false;
    static constexpr bool kHasMin = requires(Block b) { b.m; };
    static constexpr bool kHigh = requires(Block b) { b.qh; };
    static constexpr int kGroupsPerMadd = kHigh ? 4 : 8;

    static constexpr int kGroupSteps = 1;  // a group is one block
    static constexpr int64_t kGroupBytes = sizeof(Block);

    // f(b, step) for block b of the eight rows.
    template <typename R, typename F>
    static void for_group(const R& rows, int64_t b, F&& f) {
        f(b, load(rows, b));
    }

    // Block b of the eight rows. The nibbles of the 8 x 16 bytes are transposed as bytes of four: lane r of x[j]
    // is bytes 4j .. 4j + 3 of row r, whose low nibbles are elements 4j .. 4j + 3 and high ones 16 + 4j ...
    template <typename R>
    static Step8 load(const R& rows, int64_t b) {
        const size_t off = static_cast<size_t>(b) * sizeof(Block);
        __m256i x[4];
        transpose_16(rows, off + offsetof(Block, qs), x);
        Step8 s;
        for (int j = 0; j < 4; ++j) {
            s.w[j] = low_nibbles(x[j]);
            s.w[4 + j] = high_nibbles(x[j]);
        }
        if constexpr (kHigh) add_fifth_bits(gather_u32(rows, off + offsetof(Block, qh)), s.w);
        if constexpr (kHasMin) {  // the fp16 scale and minimum of each row, low halves to the first 128 bits
            static_assert(offsetof(Block, m) == offsetof(Block, d) + 2);
            halves_to_float(gather_u32(rows, off + offsetof(Block, d)), s.ws, s.wm);
        } else {
            s.ws = _mm256_cvtph_ps(gather_u16(rows, off + offsetof(Block, d)));
        }
        return s;
    }
};

// Q8_0 with eight rows in lanes: w[k] holds the signed bytes 4k .. 4k + 3 of each row (kSigned: the kernels move
// their signs onto the activations, as vpmaddubsw wants one unsigned side, and sum each product pair in int32).
struct Dec8Q8_0 {
    static constexpr int kOffset = 0;
    static constexpr bool kSigned = true, kHasMin = false;
    static constexpr int kGroupsPerMadd = 1;
    static constexpr int kGroupSteps = 1;
    static constexpr int64_t kGroupBytes = sizeof(BlockQ8_0);

    template <typename R, typename F>
    static void for_group(const R& rows, int64_t b, F&& f) {
        const size_t off = static_cast<size_t>(b) * sizeof(BlockQ8_0);
        Step8 s;
        transpose_16(rows, off + offsetof(BlockQ8_0, qs), s.w);
        transpose_16(rows, off + offsetof(BlockQ8_0, qs) + 16, s.w + 4);
        s.ws = _mm256_cvtph_ps(gather_u16(rows, off + offsetof(BlockQ8_0, d)));
        f(b, s);
    }
};

// Half h (rows 8h .. 8h + 7) of a record of PackedWeights: each 64 bytes of values hold four bytes of each of the
// sixteen rows, rows 0..7 in the low 32, so that half h of value group j is the x[j] of Dec8::load (Q4_0, Q4_1, Q5_0,
// Q5_1; the w[j] of Dec8Q8_0), the same Step8 with no transposes; for Q5_0 and Q5_1 then the sixteen rows' qh words,
// each reordered so that bit 8i + k is the fifth bit of element 4k + i (one shift puts group k's four bits at bit 4
// of their bytes: add_fifth_bits's result in three operations instead of five); then the sixteen fp16 scales and,
// for Q4_1 and Q5_1, the sixteen minima.
template <GgmlType Type>
struct Packed8 {
    static_assert(Type == GgmlType::Q4_0 || Type == GgmlType::Q4_1 || Type == GgmlType::Q5_0 ||
                  Type == GgmlType::Q5_1 || Type == GgmlType::Q8_0);
    static constexpr bool kHigh = Type == GgmlType::Q5_0 || Type == GgmlType::Q5_1;
    static constexpr int kOffset = Type == GgmlType::Q4_0 ? 8 : Type == GgmlType::Q5_0 ? 16 : 0;
    static constexpr bool kSigned = Type == GgmlType::Q8_0;
    static constexpr bool kHasMin = Type == GgmlType::Q4_1 || Type == GgmlType::Q5_1;
    static constexpr bool kRecordValues = kSigned;  // Q8_0's records hold Step8's values as they are (RecordWeights)
    static constexpr int kGroupsPerMadd = kSigned ? 1 : kHigh ? 4 : 8;  // as Dec8's
    static constexpr int kGroupSteps = 1;
    static constexpr int64_t kRecordBytes = packed_record_bytes(Type);
    static constexpr int64_t kValueBytes = kSigned ? 512 : 256;
    static constexpr int64_t kScalesAt = kValueBytes + (kHigh ? 64 : 0);

    static Step8 load(const uint8_t* rec, int h) {
        Step8 s;
        if constexpr (kSigned) {
            for (int k = 0; k < 8; ++k) s.w[k] = load256(rec + 64 * k + 32 * h);
        } else {
            for (int j = 0; j < 4; ++j) {
                const __m256i x = load256(rec + 64 * j + 32 * h);
                s.w[j] = low_nibbles(x);
                s.w[4 + j] = high_nibbles(x);
            }
        }
        if constexpr (kHigh) {
            const __m256i bits = load256(rec + kValueBytes + 32 * h), sixteen = _mm256_set1_epi8(16);
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                const __m256i at4 = k <= 4 ? _mm256_slli_epi32(bits, 4 - k) : _mm256_srli_epi32(bits, k - 4);
                s.w[k] = _mm256_or_si256(s.w[k], _mm256_and_si256(at4, sixteen));
            }
        }
        s.ws = _mm256_cvtph_ps(load128(rec + kScalesAt + 16 * h));
        if constexpr (kHasMin) s.wm = _mm256_cvtph_ps(load128(rec + kScalesAt + 32 + 16 * h));
        return s;
    }
};

using Dec8Q4_0 = Dec8<BlockQ4_0, 8>;
using Dec8Q4_1 = Dec8<BlockQ4_1, 0>;
using Dec8Q5_0 = Dec8<BlockQ5_0, 16>;
using Dec8Q5_1 = Dec8<BlockQ5_1, 0>;

// Q4_K / Q5_K with eight rows in lanes: a group is a super-block, whose eight 32-blocks (sub-blocks) become Step8s
// one after the other. Sub-block j has scale d * sc_j and minimum -dmin * m_j (the same floats as the reference kernels'); its
// values are the low (j even) or high (j odd) nibbles of qs[32 (j / 2) .. + 32), with Q5_K's fifth bit of element l
// at bit j of qh[l]. The 16 bytes before the values (d, dmin and the 12 bytes of packed scales) are transposed like
// the values, so that one lane's three words of scales unpack as unpack_k4_scales does, eight rows at once.
template <typename Block>
struct Dec8K4 {
    static constexpr int kOffset = 0;
    static constexpr bool kSigned = false;
    static constexpr bool kHasMin = true;
    static constexpr bool kHigh = requires(Block b) { b.qh; };
    static constexpr int kGroupsPerMadd = kHigh ? 4 : 8;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(Block);
    static_assert(offsetof(Block, dmin) == 2 && offsetof(Block, scales) == 4 && sizeof(Block::scales) == 12);

    // f(8 g + j, step) for the sub-blocks j of super-block g of the eight rows, in order.
    template <typename R, typename F>
    static void for_group(const R& rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(Block);
        steps(g, [&](size_t at, __m256i x[4]) { transpose_16(rows, off + at, x); }, f);
    }

    // The same from a super-block whose 16-byte chunks come transposed: chunk(at, x) sets x to the transpose of the
    // eight rows' bytes at + 0 .. 15 of the super-block (transpose_16's vectors).
    template <typename C, typename F>
    static void steps(int64_t g, C&& chunk, F&& f) {
        __m256i head[4];  // lane r: row r's d and dmin, then its scale words w[0], w[1], w[2]
        chunk(0, head);
        __m256 d, dmin;
        halves_to_float(head[0], d, dmin);
        const __m256 neg_dmin = _mm256_xor_ps(dmin, _mm256_set1_ps(-0.0f));
        const __m256i low6 = _mm256_set1_epi8(0x3F), low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x03);
        // Bytes of sc[0..3], m[0..3], sc[4..7], m[4..7] in each lane.
        const __m256i packed[4] = {
            _mm256_and_si256(head[1], low6), _mm256_and_si256(head[2], low6),
            _mm256_or_si256(_mm256_and_si256(head[3], low4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(head[1], 6), top2), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(head[3], 4), low4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(head[2], 6), top2), 4))};
        __m256i qh[8];  // Q5_K: lane r of qh[k] = qh[4k .. 4k + 3] of row r
        if constexpr (kHigh) {
            chunk(offsetof(Block, qh), qh);
            chunk(offsetof(Block, qh) + 16, qh + 4);
        }
        for (int i = 0; i < 4; ++i) {  // the sub-block pair 2i, 2i + 1: the nibbles of qs[32 i .. + 32)
            __m256i x[8];
            chunk(offsetof(Block, qs) + 32 * i, x);
            chunk(offsetof(Block, qs) + 32 * i + 16, x + 4);
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * i + h;
                const __m256i byte = _mm256_set1_epi32(0xFF);
                const int shift = 8 * (j % 4);
                const __m256 sc = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(packed[2 * (j / 4)], shift), byte));
                const __m256 mn =
                    _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(packed[2 * (j / 4) + 1], shift), byte));
                Step8 s;
                s.ws = _mm256_mul_ps(d, sc);
                s.wm = _mm256_mul_ps(neg_dmin, mn);
                for (int k = 0; k < 8; ++k) {
                    s.w[k] = h == 0 ? low_nibbles(x[k]) : high_nibbles(x[k]);
                    if constexpr (kHigh) {  // bit j of each byte to bit 4
                        const __m256i bit = j <= 4 ? _mm256_slli_epi16(qh[k], 4 - j) : _mm256_srli_epi16(qh[k], j - 4);
                        s.w[k] = _mm256_or_si256(s.w[k], _mm256_and_si256(bit, _mm256_set1_epi8(16)));
                    }
                }
                f(static_cast<int64_t>(g) * kGroupSteps + j, s);
            }
        }
    }
};

using Dec8Q4_K = Dec8K4<BlockQ4_K>;
using Dec8Q5_K = Dec8K4<BlockQ5_K>;

}  // namespace
}  // namespace quill::cpu::avx2
