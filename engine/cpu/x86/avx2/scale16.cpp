// The AVX2 eight-row kernels of packed Q3_K (kQ3SuperBytes in kernels.h), Q2_K (kQ2SuperBytes) and Q6_K
// (kQ6EightSuperBytes): rows in the 32-bit lanes, a scale per 16 elements; the AVX-512 families use the Q3_K and Q2_K
// ones too (they have no kernels of those types of their own; their Q6_K layout is the quads of their own kernel).
//
// The four-row kernels (rows.cpp) leave each row's four int32 lanes of a quarter (16 elements) holding the exact sums
// of (u - c) * a over its four-element groups, and each lane accumulates fma(float(sum), ws * da, acc) quarter by
// quarter; a row's result is (lane 0 + lane 1) + (lane 2 + lane 3). Here the vector of group k of a 32-block holds
// that sum for eight rows (lane r: row r), so four accumulators, acc[k % 4], take the same chains in the same order
// and their sum at the end is the same: the bits of the four-row kernels over the file's rows. Each activation group
// and scale product serves eight rows (two there), and the sums need no horizontal adds. Q2_K's minima, a float per
// 16 elements, are dotted with the activations' half sums as the four-row kernels' dot4_f32 dots each row (row_minima).
#include "engine/cpu/x86/avx2/common.h"

#ifdef QUILL_AVX2_BUILT

namespace quill::cpu::avx2 {

namespace {

// One 32-block of eight rows: lane r of u[k] the four unsigned values of elements 4k .. 4k + 3 of row r, lane r of
// ws[q] row r's scale d * sc of quarter q.
struct alignas(32) Step16 {
    __m256i u[8];
    __m256 ws[2];
};

// ws[q] of 32-block j: lane r = d * row r's scale of quarter q, from the super-block's signed scales [16][8].
[[gnu::always_inline]] inline void quarter_scales(const uint8_t* scales, int j, __m256 d, Step16& s) {
    for (int q = 0; q < 2; ++q) {
        const __m128i sc = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * (2 * j + q)));
        s.ws[q] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
    }
}

// Packed Q3_K's eight-row super-blocks (kQ3SuperBytes), w = d * sc * (u - 4).
struct PackedQ3_8 {
    static constexpr int kOffset = 4;
    static constexpr bool kMinima = false;
    static constexpr int64_t kSuperBytes = kQ3SuperBytes;

    static __m256 d(const uint8_t* sb) { return _mm256_cvtph_ps(load128(sb + kQ3DAt)); }

    // 32-block j of super-block sb, whose rows' d are d.
    [[gnu::always_inline]] static void decode(const uint8_t* sb, int j, __m256 d, Step16& s) {
        const uint8_t* x = sb + j * kQ3BlockBytes;
        const __m256i x0 = load256(x), x1 = load256(x + 32), x2 = load256(x + 64);
        const __m256i seven = _mm256_set1_epi8(7), three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
        // (16-bit shifts: the bits they bring in from the next byte fall outside each mask)
        s.u[0] = _mm256_and_si256(x0, seven);
        s.u[1] = _mm256_and_si256(_mm256_srli_epi16(x0, 3), seven);
        s.u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x0, 6), three),
                                 _mm256_and_si256(_mm256_srli_epi16(x2, 4), four));
        s.u[3] = _mm256_and_si256(x1, seven);
        s.u[4] = _mm256_and_si256(_mm256_srli_epi16(x1, 3), seven);
        s.u[5] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x1, 6), three),
                                 _mm256_and_si256(_mm256_srli_epi16(x2, 5), four));
        s.u[6] = _mm256_and_si256(x2, seven);
        s.u[7] = _mm256_and_si256(_mm256_srli_epi16(x2, 3), seven);
        quarter_scales(sb + kQ3ScalesAt, j, d, s);
    }
};

// Packed Q6_K's eight-row super-blocks (kQ6EightSuperBytes), w = d * sc * (u - 32).
struct PackedQ6_8 {
    static constexpr int kOffset = 32;
    static constexpr bool kMinima = false;
    static constexpr int64_t kSuperBytes = kQ6EightSuperBytes;

    static __m256 d(const uint8_t* sb) { return _mm256_cvtph_ps(load128(sb + kQ6EightDAt)); }

    // 32-block j of super-block sb, whose rows' d are d.
    [[gnu::always_inline]] static void decode(const uint8_t* sb, int j, __m256 d, Step16& s) {
        const uint8_t* x = sb + j * kQ6EightBlockBytes;
        __m256i v[6];
        const __m256i low6 = _mm256_set1_epi8(0x3F);
        for (int k = 0; k < 6; ++k) {
            v[k] = load256(x + 32 * k);
            s.u[k] = _mm256_and_si256(v[k], low6);
        }
        // u6 and u7 from the top two bits of X0..X2 and X3..X5 (16-bit shifts: the bits they bring in from the next
        // byte fall outside each mask)
        for (int m = 0; m < 2; ++m) {
            const __m256i* y = v + 3 * m;
            s.u[6 + m] = _mm256_or_si256(
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(y[0], 6), _mm256_set1_epi8(0x03)),
                                _mm256_and_si256(_mm256_srli_epi16(y[1], 4), _mm256_set1_epi8(0x0C))),
                _mm256_and_si256(_mm256_srli_epi16(y[2], 2), _mm256_set1_epi8(0x30)));
        }
        quarter_scales(sb + kQ6EightScalesAt, j, d, s);
    }
};

// Packed Q2_K's eight-row super-blocks (kQ2SuperBytes), w = d * sc * u - dmin * m, the minima apart (minima).
struct PackedQ2_8 {
    static constexpr int kOffset = 0;
    static constexpr bool kMinima = true;
    static constexpr int64_t kSuperBytes = kQ2SuperBytes;

    static __m256 d(const uint8_t* sb) { return _mm256_cvtph_ps(load128(sb + kQ2DAt)); }

    // 32-block j of super-block sb, whose rows' d are d.
    [[gnu::always_inline]] static void decode(const uint8_t* sb, int j, __m256 d, Step16& s) {
        const uint8_t* x = sb + j * kQ2BlockBytes;
        const __m256i three = _mm256_set1_epi8(3);
        for (int v = 0; v < 2; ++v) {  // (16-bit shifts: the bits they bring in from the next byte fall outside the mask)
            const __m256i xv = load256(x + 32 * v);
            s.u[4 * v] = _mm256_and_si256(xv, three);
            for (int k = 1; k < 4; ++k) s.u[4 * v + k] = _mm256_and_si256(_mm256_srli_epi16(xv, 2 * k), three);
        }
        for (int q = 0; q < 2; ++q) {
            const __m128i sc = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + kQ2ScalesAt + 8 * (2 * j + q)));
            s.ws[q] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(sc, _mm_set1_epi8(0x0F)))));
        }
    }

    // wm [16][8] (lane r: row r) = -dmin * m of each 16 elements of super-block sb, as the four-row decoder makes
    // them (the negated dmin times the minimum).
    static void minima(const uint8_t* sb, float* wm) {
        const __m256 dmin = _mm256_xor_ps(_mm256_cvtph_ps(load128(sb + kQ2DminAt)), _mm256_set1_ps(-0.0f));
        for (int i = 0; i < 16; ++i) {
            const __m128i sc = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + kQ2ScalesAt + 8 * i));
            const __m256i m = _mm256_srli_epi32(_mm256_cvtepu8_epi32(sc), 4);
            _mm256_storeu_ps(wm + 8 * i, _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(m)));
        }
    }
};

// Lane r: row r's minima wm [n16][8] dotted with a token's half sums ds16 [n16] as dot4_f32 dots a row (n16 a multiple
// of 8): lane l of eight accumulators takes elements l, l + 8, ... in order, then hsum adds them up.
inline __m256 row_minima(const float* wm, int64_t n16, const float* ds16) {
    __m256 acc[8];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    for (int64_t c = 0; c < n16; c += 8) {
        for (int l = 0; l < 8; ++l)
            acc[l] = _mm256_fmadd_ps(_mm256_loadu_ps(wm + 8 * (c + l)), _mm256_broadcast_ss(ds16 + c + l), acc[l]);
    }
    __m256 x[4];
    for (int k = 0; k < 4; ++k) x[k] = _mm256_add_ps(acc[k], acc[k + 4]);
    return _mm256_add_ps(_mm256_add_ps(x[0], x[2]), _mm256_add_ps(x[1], x[3]));
}

// Token t's activations as the kernel reads them: its int8 values, block scales, and off[g] = c * the sum of its
// four-value group g (offset_terms).
struct GroupActs {
    const int8_t* qs;    // [n_in]
    const float* d;      // [n_in / 32]
    const int32_t* off;  // [n_in / 4]
};

// off [n_in / 4] of token t: c times the sum of each four activations, the integer four-row kernels subtract.
template <int Offset>
void offset_terms(const QuantizedActs& q, int64_t t, int32_t* off) {
    const __m256i c = _mm256_set1_epi8(static_cast<char>(Offset)), ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < q.n_in; i += 32) {
        const __m256i a = load256(reinterpret_cast<const uint8_t*>(q.qs + t * q.qs_stride + i));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(off + i / 4),
                            _mm256_madd_epi16(_mm256_maddubs_epi16(c, a), ones));
    }
}

// Quarter q of block s of eight rows (st) against T tokens: group k's exact sum of (u - c) * a into acc[t][k % 4],
// scaled by the quarter's ws * da. Each weight vector serves the T tokens.
template <int T, bool Offset>
[[gnu::always_inline]] inline void add_quarter(const Step16& st, int q, const GroupActs* ta, int64_t s,
                                               __m256 (&acc)[T][4]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 scale[T];
    for (int t = 0; t < T; ++t) scale[t] = _mm256_mul_ps(st.ws[q], _mm256_broadcast_ss(ta[t].d + s));
    for (int l = 0; l < 4; ++l) {
        const int k = 4 * q + l;
        for (int t = 0; t < T; ++t) {
            const __m256i a = _mm256_set1_epi32(load_unaligned<int32_t>(ta[t].qs + 32 * s + 4 * k));
            __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(st.u[k], a), ones);
            if constexpr (Offset) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(ta[t].off[8 * s + k]));
            acc[t][l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale[t], acc[t][l]);
        }
    }
}

// out[t] (lane r: row r) = the four accumulators of token t summed as the four-row kernels sum a row's lanes.
template <int T>
inline void store_sums(__m256 (&acc)[T][4], float (*out)[8]) {
    for (int t = 0; t < T; ++t)
        _mm256_storeu_ps(out[t], _mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])));
}

// Decode: the eight rows of `half` against T tokens, decoded as they stream by, the stream prefetched kPrefetchBytes
// ahead a block's share of lines at a time.
template <typename P, int T>
void decode_rows(const uint8_t* half, int64_t n_groups, const GroupActs* ta, float (*out)[8]) {
    constexpr int64_t kLines = (P::kSuperBytes + 63) / 64;
    __m256 acc[T][4];
    for (int t = 0; t < T; ++t)
        for (int l = 0; l < 4; ++l) acc[t][l] = _mm256_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        const uint8_t* sb = half + g * P::kSuperBytes;
        const __m256 d = P::d(sb);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            for (int64_t line = kLines * j / 8; line < kLines * (j + 1) / 8; ++line)
                _mm_prefetch(reinterpret_cast<const char*>(sb + kPrefetchBytes + 64 * line), _MM_HINT_T1);
            Step16 st;
            P::decode(sb, j, d, st);
            for (int q = 0; q < 2; ++q) add_quarter<T, P::kOffset != 0>(st, q, ta, 8 * g + j, acc);
        }
    }
    store_sums<T>(acc, out);
}

// Prefill: a block of the row tile decoded once with signed weights w = u - c against the unsigned activations a + 128
// (QuantizedActs::qs_u), aux[k] = -128 * the sum of group k's weights removing what the 128 adds: the same exact sums,
// with nothing per token but its activations.
struct alignas(32) PrefillStep16 {
    __m256i w[8];
    __m256i aux[8];
    __m256 ws[2];
};

template <int Offset>
void to_prefill_step(const Step16& st, PrefillStep16& out) {
    const __m256i c = _mm256_set1_epi8(static_cast<char>(Offset));
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int k = 0; k < 8; ++k) {
        out.w[k] = _mm256_sub_epi8(st.u[k], c);
        const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, out.w[k]), ones16);
        out.aux[k] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum, 7));
    }
    out.ws[0] = st.ws[0];
    out.ws[1] = st.ws[1];
}

// out[t] = the eight rows of the prefill steps [nb] against token t0 + t, t < T, with decode_rows' float operations in
// its order.
template <int T>
void prefill_rows(const PrefillStep16* steps, int64_t nb, const QuantizedActs& q, int64_t t0, float (*out)[8]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const uint8_t* a0 = q.qs_u + t0 * q.qs_stride;  // [T][qs_stride]
    const float* d0 = q.d + t0 * q.blk_stride;      // [T][blk_stride]
    __m256 acc[T][4];
    for (int t = 0; t < T; ++t)
        for (int l = 0; l < 4; ++l) acc[t][l] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nb; ++s) {
        const PrefillStep16& st = steps[s];
        for (int qr = 0; qr < 2; ++qr) {
            __m256 scale[T];
            for (int t = 0; t < T; ++t) scale[t] = _mm256_mul_ps(st.ws[qr], _mm256_broadcast_ss(d0 + t * q.blk_stride + s));
            for (int l = 0; l < 4; ++l) {
                const int k = 4 * qr + l;
                for (int t = 0; t < T; ++t) {
                    const __m256i a = _mm256_set1_epi32(load_unaligned<int32_t>(a0 + t * q.qs_stride + 32 * s + 4 * k));
                    const __m256i dot =
                        _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(a, st.w[k]), ones), st.aux[k]);
                    acc[t][l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale[t], acc[t][l]);
                }
            }
        }
    }
    store_sums<T>(acc, out);
}

// Tokens of the decode path at a time: their offset terms, each [n_in / 4], in the scratch.
constexpr int64_t kDecodeTokens = kPrefillMinTokens - 1;

// Rows [r0, r1) of y for all tokens, eight rows at a time from the packed halves, written a block of rows at a time.
template <typename P>
void packed8_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32, n_groups = w.n_in / 256;
    // (without the unsigned activations, which an input has from two tokens on, every token goes the decode way)
    const bool prefill = args.n_tokens >= kPrefillMinTokens && q.qs_u != nullptr;
    auto* steps = reinterpret_cast<PrefillStep16*>(scratch);  // [nb] (scratch is 64-byte aligned)
    auto* offsets = reinterpret_cast<int32_t*>(steps + nb);   // [kDecodeTokens][n_in / 4]
    float* wm = reinterpret_cast<float*>(offsets) + (kDecodeTokens * w.n_in / 4 + 15) / 16 * 16;  // [2 nb][8]
    float* output_block = wm + 16 * nb;
    static_assert(sizeof(PrefillStep16) % 64 == 0);
    const auto* packed = static_cast<const uint8_t*>(w.packed);
    const int64_t chunk = prefill ? args.n_tokens : kDecodeTokens;
    for (int64_t c0 = 0; c0 < args.n_tokens; c0 += chunk) {
        const int64_t nt = min64(chunk, args.n_tokens - c0);
        GroupActs ta[kDecodeTokens];
        for (int64_t t = 0; t < nt && !prefill; ++t) {
            if constexpr (P::kOffset != 0) offset_terms<P::kOffset>(q, c0 + t, offsets + t * (w.n_in / 4));
            ta[t] = {q.qs + (c0 + t) * q.qs_stride, q.d + (c0 + t) * q.blk_stride, offsets + t * (w.n_in / 4)};
        }
        const int64_t block_rows = OutputBlock::rows_for(nt);
        for (int64_t rb = r0; rb < r1; rb += block_rows) {
            OutputBlock block{output_block, nt, rb, min64(block_rows, r1 - rb)};
            for (int64_t r = rb; r < rb + block.n_rows; r += 8) {
                const int nr = static_cast<int>(min64(8, rb + block.n_rows - r));
                const uint8_t* half = packed + r / 8 * n_groups * P::kSuperBytes;
                if constexpr (P::kMinima) {
                    for (int64_t g = 0; g < n_groups; ++g) P::minima(half + g * P::kSuperBytes, wm + 128 * g);
                }
                if (prefill) {
                    for (int64_t g = 0; g < n_groups; ++g) {
                        const uint8_t* sb = half + g * P::kSuperBytes;
                        const __m256 d = P::d(sb);
                        for (int j = 0; j < 8; ++j) {
                            Step16 st;
                            P::decode(sb, j, d, st);
                            to_prefill_step<P::kOffset>(st, steps[8 * g + j]);
                        }
                    }
                }
                // Two tokens at a time: their eight accumulators and a block's operands fill the registers.
                for (int64_t t = 0; t < nt;) {
                    float out[2][8];
                    const int n = nt - t >= 2 ? 2 : 1;
                    if (prefill) {
                        if (n == 2) prefill_rows<2>(steps, nb, q, c0 + t, out);
                        else prefill_rows<1>(steps, nb, q, c0 + t, out);
                    } else {
                        if (n == 2) decode_rows<P, 2>(half, n_groups, ta + t, out);
                        else decode_rows<P, 1>(half, n_groups, ta + t, out);
                    }
                    for (int j = 0; j < n; ++j) {
                        if constexpr (P::kMinima) {  // the four-row kernels' sum: the dot, then its minima
                            const float* ds16 = q.ds16 + 2 * (c0 + t + j) * q.blk_stride;
                            _mm256_storeu_ps(out[j], _mm256_add_ps(_mm256_loadu_ps(out[j]), row_minima(wm, 2 * nb, ds16)));
                        }
                        for (int i = 0; i < nr; ++i) block.at(r + i, t + j) = out[j][i];
                    }
                    t += n;
                }
            }
            flush_block(block, args.y + c0 * w.n_out, w.n_out);
        }
    }
}

}  // namespace

void add_scale16_kernels(KernelTable& table) {
    entry(table.packed, GgmlType::Q3_K) = {packed8_rows<PackedQ3_8>, true};
    entry(table.packed, GgmlType::Q6_K) = {packed8_rows<PackedQ6_8>, true};
    entry(table.packed, GgmlType::Q2_K) = {packed8_rows<PackedQ2_8>, true};
}

}  // namespace quill::cpu::avx2

#endif
