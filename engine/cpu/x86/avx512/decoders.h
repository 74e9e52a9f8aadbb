// Weight decoders of the AVX-512 kernels. Included by the AVX-512 kernel files only (this folder), which alone are
// compiled with the AVX-512 flags; everything here has internal linkage.
//
// The four-row decoders (Q8_0, Q6_K) read four weight rows at once, 64 elements (two 32-blocks, four 16-element
// quarters) per step, and interleave them so that one vpdpbusd multiplies all four rows with a token's quarter
// broadcast to every lane: u[q] holds in its 128-bit lane r the 16 weights of quarter q of row r, as unsigned bytes
// in the unified form of kernels.h (w = ws * (u - c) + wm). The sixteen-row decoders (the 4- and 5-bit types) are
// at the end.
#pragma once

#ifndef QUILL_AVX512_EMULATED
#include <immintrin.h>
#endif

#include <cstddef>

#include "engine/cpu/kernels.h"
// The eight-row decoders: the sixteen-row ones below name them as their decode path (Dec8) and share in_gpr.
#include "engine/cpu/x86/avx2/decoders.h"

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

struct Step4 {
    __m512i u[4];  // quarter q, lane r: row r
    __m512 ws[4];  // scale of quarter q, lane 4r + g: row r (laid out like a vpdpbusd result)
    __m128 wc[2];  // kHasMin only: the minimum of 32-block j, element r: row r
};

using Rows = const uint8_t* const*;  // the 4 rows

inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Lane r = the 16 bytes at rows[r] + off.
inline __m512i load_4x16(Rows rows, size_t off) {
    __m512i v = _mm512_castsi128_si512(load128(rows[0] + off));
    v = _mm512_inserti32x4(v, load128(rows[1] + off), 1);
    v = _mm512_inserti32x4(v, load128(rows[2] + off), 2);
    return _mm512_inserti32x4(v, load128(rows[3] + off), 3);
}

// The 32 bytes at rows[r] + off as two quarter vectors: lo gets bytes 0..15 of each row, hi bytes 16..31.
inline void load_4x32(Rows rows, size_t off, __m512i& lo, __m512i& hi) {
    const __m512i r01 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(rows[0] + off)), load256(rows[1] + off), 1);
    const __m512i r23 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(rows[2] + off)), load256(rows[3] + off), 1);
    lo = _mm512_shuffle_i64x2(r01, r23, 0x88);
    hi = _mm512_shuffle_i64x2(r01, r23, 0xDD);
}

// The fp16 values at rows[r] + off as floats, element r.
inline __m128 half_4(Rows rows, size_t off) {
    uint64_t bits = 0;
    for (int r = 0; r < 4; ++r) bits |= uint64_t{load_unaligned<uint16_t>(rows[r] + off)} << (16 * r);
    return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(bits)));
}

inline __m512i low_nibbles(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
inline __m512i high_nibbles(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }

// Lane 4r + g takes element r of a 4-float vector.
inline __m512 expand_rows(__m128 v) {
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(v));
}

// Per-row values v[r][j] (j < 8) of 4 rows, held as [rows 0, 1] and [rows 2, 3] so that one permute picks column j
// for all rows.
struct RowColumns {
    __m512 r01, r23;

    void set(const __m256 (&v)[4]) {
        r01 = _mm512_insertf32x8(_mm512_castps256_ps512(v[0]), v[1], 1);
        r23 = _mm512_insertf32x8(_mm512_castps256_ps512(v[2]), v[3], 1);
    }
    // Lane 4r + g = v[r][j].
    __m512 expanded(int j) const {
        const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(24, 24, 24, 24, 16, 16, 16, 16, 8, 8, 8, 8, 0, 0, 0, 0),
                                             _mm512_set1_epi32(j));
        return _mm512_permutex2var_ps(r01, idx, r23);
    }
    // Element r = v[r][j].
    __m128 column(int j) const {
        const __m512i idx =
            _mm512_add_epi32(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24, 16, 8, 0), _mm512_set1_epi32(j));
        return _mm512_castps512_ps128(_mm512_permutex2var_ps(r01, idx, r23));
    }
};

// ---- the decoders ----
//   kOffset            c of the unified form
//   kHasMin            blocks have a float minimum (Step4::wm)
//   kQuartersPerScale  quarters sharing one scale: 2 (a 32-block), 1 for Q6_K
//   kGroupSteps        steps per group (a super-block for the k-quants), whose per-row data load_group reads
//   kGroupBytes        bytes of a group in a row

struct NoState {};

// Q8_0: a group is one step, two blocks. (The 4- and 5-bit types have their own kernels, with the sixteen-row
// decoders below.)
// Its decode (fewer than kRows16MinTokens tokens) ends each block with the block's exact integer dot per row
// (kExactBlocks) and one fma chain per row in block order, the arithmetic of the sixteen-row kernels that multiply
// more tokens (Dec16Q8_0), so that a token's outputs do not depend on the batch.
struct DecQ8_0 {
    static constexpr int kOffset = 128;  // signed bytes flipped to unsigned
    static constexpr bool kHasMin = false;
    static constexpr bool kExactBlocks = true;
    static constexpr int kQuartersPerScale = 2;
    static constexpr int kGroupSteps = 1;
    static constexpr int64_t kGroupBytes = 2 * sizeof(BlockQ8_0);
    using State = NoState;
    static void load_group(Rows, int64_t, State&) {}

    static Step4 step(Rows rows, int64_t g, int, const State&) {
        Step4 s;
        for (int i = 0; i < 2; ++i) {
            const size_t off = (2 * g + i) * sizeof(BlockQ8_0);
            load_4x32(rows, off + offsetof(BlockQ8_0, qs), s.u[2 * i], s.u[2 * i + 1]);
            s.u[2 * i] = _mm512_xor_si512(s.u[2 * i], _mm512_set1_epi8(static_cast<char>(0x80)));
            s.u[2 * i + 1] = _mm512_xor_si512(s.u[2 * i + 1], _mm512_set1_epi8(static_cast<char>(0x80)));
            s.ws[2 * i] = s.ws[2 * i + 1] = expand_rows(half_4(rows, off + offsetof(BlockQ8_0, d)));
        }
        return s;
    }
};

// Q6_K: w = d * sc_i * (q - 32) with a scale per 16 elements. Step k covers 32-blocks 2k and 2k + 1, both in the
// 128-element half k / 2: block 2k's low nibbles are ql[64 half + l], block 2k + 1's ql[64 half + 32 + l] (high
// nibbles when k is odd), and both take their top two bits from qh[32 half + l], at bit 4 (k % 2) for block 2k and
// 4 (k % 2) + 2 for block 2k + 1 (see engine/format/quant_k.cpp).
struct DecQ6_K {
    static constexpr int kOffset = 32;
    static constexpr bool kHasMin = false;
    static constexpr int kQuartersPerScale = 1;
    static constexpr int kGroupSteps = 4;
    static constexpr int64_t kGroupBytes = sizeof(BlockQ6_K);
    struct State {
        RowColumns ws[2];  // d * sc_i of each row, for sub-blocks i = 8h + j
    };

    static void load_group(Rows rows, int64_t g, State& st) {
        load_scales(Q6Heads::of_rows(rows, g), st);
    }

    // st from each row's sixteen int8 scales and fp16 d.
    static void load_scales(const Q6Heads& h, State& st) {
        __m256 sc[2][4];  // [half of i][row]
        for (int r = 0; r < 4; ++r) {
            const __m512 dr = _mm512_set1_ps(_cvtsh_ss(load_unaligned<uint16_t>(h.d[r])));
            const __m512 s = _mm512_mul_ps(dr, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(h.scales[r]))));
            sc[0][r] = _mm512_castps512_ps256(s);
            sc[1][r] = _mm512_extractf32x8_ps(s, 1);
        }
        st.ws[0].set(sc[0]);
        st.ws[1].set(sc[1]);
    }

    static Step4 step(Rows rows, int64_t g, int k, const State& st) {
        const size_t b = g * sizeof(BlockQ6_K);
        const int half = k / 2;
        __m512i ql[4], qh[2];
        load_4x32(rows, b + offsetof(BlockQ6_K, ql) + 64 * half, ql[0], ql[1]);
        load_4x32(rows, b + offsetof(BlockQ6_K, ql) + 64 * half + 32, ql[2], ql[3]);
        load_4x32(rows, b + offsetof(BlockQ6_K, qh) + 32 * half, qh[0], qh[1]);
        return decode(ql, qh, k, st);
    }

    // Step k from its half's ql and qh (lane r: row r's ql[64 half + 16 c ..] in ql[c], qh[32 half + 16 c ..] in
    // qh[c]).
    // The top two bits move to bits 4 and 5 by one shift (none for bit 4), and one vpternlogd merges them with the
    // low nibble: u = (low & 0x0F) | (top & 0x30).
    [[gnu::always_inline]] static Step4 decode(const __m512i ql[4], const __m512i qh[2], int k, const State& st) {
        const int odd = k % 2;
        Step4 s;
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
            const __m512i low = odd != 0 ? _mm512_srli_epi16(ql[q], 4) : ql[q];
            const int bit = 4 * odd + 2 * (q / 2);  // of the top two bits in qh
            const __m512i top = bit < 4   ? _mm512_slli_epi16(qh[q % 2], 4 - bit)
                                : bit > 4 ? _mm512_srli_epi16(qh[q % 2], bit - 4)
                                          : qh[q % 2];
            // 0xEA: (A & B) | C, with A = low, B = 0x0F, C = the top bits at 4 and 5
            s.u[q] = _mm512_ternarylogic_epi32(low, _mm512_set1_epi8(0x0F),
                                               _mm512_and_si512(top, _mm512_set1_epi8(0x30)), 0xEA);
            const int i = 4 * k + q;  // the 16-element sub-block
            s.ws[q] = st.ws[i / 8].expanded(i % 8);
        }
        return s;
    }
};

// Packed Q6_K (kQ6QuadBytes in kernels.h): a quad's super-block g gives DecQ6_K's steps with one load per vector,
// the same Step4s and so the same bits as the file's four rows.
struct PackedQ6_K {
    using State = DecQ6_K::State;
    static constexpr int kGroupSteps = DecQ6_K::kGroupSteps;

    static void load_group(const uint8_t* quad, int64_t g, State& st) {
        DecQ6_K::load_scales(Q6Heads::of_quad(quad, g), st);
    }

    static Step4 step(const uint8_t* quad, int64_t g, int k, const State& st) {
        const uint8_t* half = quad + g * kQ6QuadBytes + (k / 2) * kQ6HalfBytes;
        __m512i ql[4], qh[2];
        for (int c = 0; c < 4; ++c) ql[c] = _mm512_loadu_si512(half + 64 * c);
        for (int c = 0; c < 2; ++c) qh[c] = _mm512_loadu_si512(half + 256 + 64 * c);
        return DecQ6_K::decode(ql, qh, k, st);
    }
};

// ---- sixteen rows in lanes: the 4- and 5-bit types ----
// One 32-block of sixteen rows with the rows in the 32-bit lanes: w[k] holds in lane r the four bytes u[4k .. 4k + 3]
// of row r's block, so that one vpdpbusd multiplies all sixteen rows with a token's four activations a[4k .. 4k + 3]
// broadcast to every lane, and lane r ends the block holding row r's whole sum u * a, exactly. The float work of a
// block (convert, scale, accumulate) is then one instruction each for sixteen rows.
struct Step16 {
    __m512i w[8];  // unsigned u (0..15, or 0..31 with a fifth bit)
    __m512 ws;     // lane r: row r's scale
    __m512 wm;     // lane r: row r's minimum (kHasMin)
};

using Rows16 = const uint8_t* const*;  // the 16 rows

using avx2::in_gpr;  // keeps a gathered value in an integer register (see x86/avx2/decoders.h)

// The 16 bytes at rows[r] + off as four vectors of four-byte groups: lane r of x[k] holds bytes 4k .. 4k + 3 of
// row r (four rows to a 512-bit vector, then a 4 x 4 transpose of 32-bit elements within each 128-bit lane).
inline void transpose_16x16(Rows16 rows, size_t off, __m512i x[4]) {
    __m512i z[4];  // 128-bit lane l: row i + 4 l
    for (int i = 0; i < 4; ++i) {
        const uint8_t* const four[4] = {rows[i], rows[i + 4], rows[i + 8], rows[i + 12]};
        z[i] = load_4x16(four, off);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    x[0] = _mm512_unpacklo_epi64(t0, t2);
    x[1] = _mm512_unpackhi_epi64(t0, t2);
    x[2] = _mm512_unpacklo_epi64(t1, t3);
    x[3] = _mm512_unpackhi_epi64(t1, t3);
}

// The 32 bits at rows[r] + off in lane r, put together two rows to a 64-bit integer register.
inline __m512i gather_u32_16(Rows16 rows, size_t off) {
    long long pairs[8];
    for (int i = 0; i < 8; ++i) {
        const uint64_t lo = load_unaligned<uint32_t>(rows[2 * i] + off), hi = load_unaligned<uint32_t>(rows[2 * i + 1] + off);
        pairs[i] = static_cast<long long>(in_gpr(lo | (hi << 32)));
    }
    return _mm512_set_epi64(pairs[7], pairs[6], pairs[5], pairs[4], pairs[3], pairs[2], pairs[1], pairs[0]);
}

// The fp16 values at rows[r] + off as floats, lane r.
inline __m512 half_16(Rows16 rows, size_t off) {

    uint64_t quads[4] = {0, 0, 0, 0};
    for (int r = 0; r < 16; ++r)
        quads[r / 4] |= in_gpr(uint64_t{load_unaligned<uint16_t>(rows[r] + off)}) << (16 * (r % 4));
    return _mm512_cvtph_ps(_mm256_set_epi64x(static_cast<long long>(in_gpr(quads[3])),
                                             static_cast<long long>(in_gpr(quads[2])),
                                             static_cast<long long>(in_gpr(quads[1])),
                                             static_cast<long long>(in_gpr(quads[0]))));
}

// Two fp16 values per 32-bit lane (lane r: row r's pair, low half first) as floats: lo the low halves, hi the high.
inline void halves_to_float(__m512i v, __m512& lo, __m512& hi) {
    // Within each 128-bit lane the low halves to bytes 0..7 and the high ones to 8..15, then the lanes' low
    // quadwords to the low 256 bits.
    const __m512i split = _mm512_shuffle_epi8(
        v, _mm512_set4_epi32(0x0F0E0B0A, 0x07060302, 0x0D0C0908, 0x05040100));
    const __m512i halves = _mm512_permutexvar_epi64(_mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0), split);
    lo = _mm512_cvtph_ps(_mm512_castsi512_si256(halves));
    hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(halves, 1));
}

//   kOffset         c of the unified form (w = ws * (u - c) + wm)
//   kHasMin         blocks have a float minimum
//   kGroupSteps     32-blocks per group (a super-block for the k-quants), whose steps for_group makes in order
//   kGroupBytes     bytes of a group in a row
template <typename Block, int Offset>
struct Dec16 {
    static constexpr int kOffset = Offset;
    static constexpr bool kHasMin = requires(Block b) { b.m; };
    static constexpr bool kHigh = requires(Block b) { b.qh; };
    static constexpr int kGroupSteps = 1;
    static constexpr int64_t kGroupBytes = sizeof(Block);
    using Dec8 = avx2::Dec8<Block, Offset>;  // the same blocks eight rows at a time (the decode path)

    // f(b, step) for block b of the sixteen rows. The nibbles of the 16 x 16 bytes are transposed as bytes of
    // four: lane r of x[j] is bytes 4j .. 4j + 3 of row r, whose low nibbles are elements 4j .. 4j + 3 and high
    // ones 16 + 4j ...
    template <typename F>
    static void for_group(Rows16 rows, int64_t b, F&& f) {
        const size_t off = static_cast<size_t>(b) * sizeof(Block);
        __m512i x[4];
        transpose_16x16(rows, off + offsetof(Block, qs), x);
        Step16 s;
        for (int j = 0; j < 4; ++j) {
            s.w[j] = low_nibbles(x[j]);
            s.w[4 + j] = high_nibbles(x[j]);
        }
        if constexpr (kHigh) {  // element e's fifth bit is bit e of qh: group k's are bits 4k .. 4k + 3, in byte k / 2
            const __m512i h = gather_u32_16(rows, off + offsetof(Block, qh));
            for (int k = 0; k < 8; ++k) {
                const char src = static_cast<char>(k / 2);  // the byte of each lane holding the group's bits
                const __m512i idx = _mm512_set4_epi32(0x01010101 * (src + 12), 0x01010101 * (src + 8),
                                                      0x01010101 * (src + 4), 0x01010101 * src);
                const __m512i bit = _mm512_set1_epi32(static_cast<int>(0x08040201u << (4 * (k % 2))));
                const __mmask64 set = _mm512_test_epi8_mask(_mm512_shuffle_epi8(h, idx), bit);
                s.w[k] = _mm512_mask_add_epi8(s.w[k], set, s.w[k], _mm512_set1_epi8(16));
            }
        }
        if constexpr (kHasMin) {
            static_assert(offsetof(Block, m) == offsetof(Block, d) + 2);
            halves_to_float(gather_u32_16(rows, off + offsetof(Block, d)), s.ws, s.wm);
        } else {
            s.ws = half_16(rows, off + offsetof(Block, d));
        }
        f(b, s);
    }
};

// Q8_0 sixteen rows in lanes (the prefill side of DecQ8_0): the 32 bytes of a block transposed as two halves of
// 16, flipped to unsigned (u = q + 128).
struct Dec16Q8_0 {
    static constexpr int kOffset = 128;
    static constexpr bool kHasMin = false;
    static constexpr int kGroupSteps = 1;
    static constexpr int64_t kGroupBytes = sizeof(BlockQ8_0);

    template <typename F>
    static void for_group(Rows16 rows, int64_t b, F&& f) {
        const size_t off = static_cast<size_t>(b) * sizeof(BlockQ8_0);
        Step16 s;
        transpose_16x16(rows, off + offsetof(BlockQ8_0, qs), s.w);
        transpose_16x16(rows, off + offsetof(BlockQ8_0, qs) + 16, s.w + 4);
        for (__m512i& v : s.w) v = _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
        s.ws = half_16(rows, off + offsetof(BlockQ8_0, d));
        f(b, s);
    }
};

using Dec16Q4_0 = Dec16<BlockQ4_0, 8>;
using Dec16Q4_1 = Dec16<BlockQ4_1, 0>;
using Dec16Q5_0 = Dec16<BlockQ5_0, 16>;
using Dec16Q5_1 = Dec16<BlockQ5_1, 0>;

// Q4_K / Q5_K with sixteen rows in lanes: a group is a super-block, whose eight 32-blocks (sub-blocks) become
// Step16s one after the other. Sub-block j has scale d * sc_j and minimum -dmin * m_j; its values are the low (j
// even) or high (j odd) nibbles of qs[32 (j / 2) .. + 32), with Q5_K's fifth bit of element l at bit j of qh[l].
// The 16 bytes before the values (d, dmin and the 12 bytes of packed scales) are transposed like the values, so
// that one lane's three words of scales unpack as unpack_k4_scales does, sixteen rows at once.
template <typename Block>
struct Dec16K4 {
    static constexpr int kOffset = 0;
    static constexpr bool kHasMin = true;
    static constexpr bool kHigh = requires(Block b) { b.qh; };
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(Block);
    static_assert(offsetof(Block, dmin) == 2 && offsetof(Block, scales) == 4 && sizeof(Block::scales) == 12);
    using Dec8 = avx2::Dec8K4<Block>;  // the same super-blocks eight rows at a time (the decode path)

    // f(8 g + j, step) for the sub-blocks j of super-block g of the sixteen rows, in order.
    template <typename F>
    static void for_group(Rows16 rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(Block);
        steps(g, [&](size_t at, __m512i x[4]) { transpose_16x16(rows, off + at, x); }, f);
    }

    // The same from chunk(at, x), which sets x to the four vectors transpose_16x16 makes of the sixteen rows'
    // bytes at + 0 .. 15 of super-block g (the packed layout has them as they lie: PackedK16).
    template <typename C, typename F>
    [[gnu::always_inline]] static void steps(int64_t g, C&& chunk, F&& f) {
        __m512i head[4];  // lane r: row r's d and dmin, then its scale words w[0], w[1], w[2]
        chunk(0, head);
        __m512 d, dmin;
        halves_to_float(head[0], d, dmin);
        const __m512 neg_dmin = _mm512_castsi512_ps(
            _mm512_xor_si512(_mm512_castps_si512(dmin), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
        const __m512i low6 = _mm512_set1_epi8(0x3F), low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x03);
        // Bytes of sc[0..3], m[0..3], sc[4..7], m[4..7] in each lane.
        const __m512i packed[4] = {
            _mm512_and_si512(head[1], low6), _mm512_and_si512(head[2], low6),
            _mm512_or_si512(_mm512_and_si512(head[3], low4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(head[1], 6), top2), 4)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(head[3], 4), low4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(head[2], 6), top2), 4))};
        __m512i qh[8];  // Q5_K: lane r of qh[k] = qh[4k .. 4k + 3] of row r
        if constexpr (kHigh) {
            chunk(offsetof(Block, qh), qh);
            chunk(offsetof(Block, qh) + 16, qh + 4);
        }
        for (int i = 0; i < 4; ++i) {  // the sub-block pair 2i, 2i + 1: the nibbles of qs[32 i .. + 32)
            __m512i x[8];
            chunk(offsetof(Block, qs) + 32 * i, x);
            chunk(offsetof(Block, qs) + 32 * i + 16, x + 4);
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * i + h;
                const __m512i byte = _mm512_set1_epi32(0xFF);
                const unsigned shift = 8 * (j % 4);
                const __m512 sc =
                    _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(packed[2 * (j / 4)], shift), byte));
                const __m512 mn =
                    _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(packed[2 * (j / 4) + 1], shift), byte));
                Step16 s;
                s.ws = _mm512_mul_ps(d, sc);
                s.wm = _mm512_mul_ps(neg_dmin, mn);
                for (int k = 0; k < 8; ++k) {
                    s.w[k] = h == 0 ? low_nibbles(x[k]) : high_nibbles(x[k]);
                    if constexpr (kHigh) {
                        const __mmask64 set = _mm512_test_epi8_mask(qh[k], _mm512_set1_epi8(static_cast<char>(1 << j)));
                        s.w[k] = _mm512_mask_add_epi8(s.w[k], set, s.w[k], _mm512_set1_epi8(16));
                    }
                }
                f(static_cast<int64_t>(g) * kGroupSteps + j, s);
            }
        }
    }
};

using Dec16Q4_K = Dec16K4<BlockQ4_K>;
using Dec16Q5_K = Dec16K4<BlockQ5_K>;

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS
