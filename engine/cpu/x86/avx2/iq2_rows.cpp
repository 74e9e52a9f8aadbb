// The AVX2 kernels of IQ2_XS and IQ2_S (engine/format/quant_iq2.h), whose 4-bit scales are per 16 elements: a row
// at a time, each 32-block decoded into one vector of 32 signed values (four grid entries, looked up by index, with
// their signs) and the two half scales 2 s + 1 as int16 lanes (elements 0..15 in the low 128 bits, 16..31 in the
// high), kept for the row's tokens. For a token's block: vpmaddubsw (signs moved onto the activations) and vpmaddwd
// by the half scales give eight exact int32 partial sums, and acc = fma(float(partial), d / 8 * da, acc) in eight
// float lanes, summed at the row's end. Every token's output takes the same operations in the same order alone or
// in a batch. The AVX-512 families run these too (no kernel of their own for the types).
#include "engine/cpu/x86/avx2/common.h"
#include "engine/format/quant_iq2.h"

#include <cstddef>
#include <cstring>

#ifdef QUILL_AVX2_BUILT

namespace quill::cpu::avx2 {

namespace {

// The 8 sign bits of each 7-bit sign index (iq2_signs).
struct Iq2SignTable {
    uint8_t v[128];
    constexpr Iq2SignTable() : v{} {
        for (uint32_t i = 0; i < 128; ++i) v[i] = iq2_signs(i);
    }
};
constexpr Iq2SignTable kIq2Signs{};

// One 32-block decoded: the signed values and the half scales 2 s + 1 (int16 lanes).
struct Iq2Block {
    __m256i q;
    __m256i sc;
};

// Bytes 8 l + j = -1 where bit j of sign byte l (byte l of `signs`) is set.
inline __m256i sign_masks(uint32_t signs) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(signs)),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

inline Iq2Block make_block(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, uint32_t signs, uint8_t scales) {
    const __m256i g = _mm256_setr_epi64x(static_cast<long long>(g0), static_cast<long long>(g1),
                                         static_cast<long long>(g2), static_cast<long long>(g3));
    const __m256i m = sign_masks(signs);
    Iq2Block b;
    b.q = _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
    b.sc = _mm256_setr_m128i(_mm_set1_epi16(static_cast<short>(2 * (scales & 15) + 1)),
                             _mm_set1_epi16(static_cast<short>(2 * (scales >> 4) + 1)));
    return b;
}

// 32-block j of the IQ2_XS super-block at p: entries 4 j .. 4 j + 3 (9-bit grid index, 7-bit sign index), the scale
// byte j.
struct DecIq2Xs {
    static constexpr int64_t kBytes = sizeof(BlockIq2Xs);
    static Iq2Block block(const uint8_t* p, int j) {
        uint16_t e[4];
        std::memcpy(e, p + offsetof(BlockIq2Xs, qs) + 8 * j, sizeof(e));
        const uint32_t signs = uint32_t{kIq2Signs.v[e[0] >> 9]} | uint32_t{kIq2Signs.v[e[1] >> 9]} << 8 |
                               uint32_t{kIq2Signs.v[e[2] >> 9]} << 16 | uint32_t{kIq2Signs.v[e[3] >> 9]} << 24;
        return make_block(kIq2XsGrid[e[0] & 511], kIq2XsGrid[e[1] & 511], kIq2XsGrid[e[2] & 511],
                          kIq2XsGrid[e[3] & 511], signs, p[offsetof(BlockIq2Xs, scales) + j]);
    }
};

// IQ2_S: grid index qs | two bits of qh above it, eight sign bits an entry.
struct DecIq2S {
    static constexpr int64_t kBytes = sizeof(BlockIq2S);
    static Iq2Block block(const uint8_t* p, int j) {
        const uint8_t* qs = p + offsetof(BlockIq2S, qs) + 4 * j;
        const uint32_t qh = p[offsetof(BlockIq2S, qh) + j];
        const uint32_t signs = load_unaligned<uint32_t>(p + offsetof(BlockIq2S, signs) + 4 * j);
        return make_block(kIq2SGrid[qs[0] | (qh << 8 & 0x300)], kIq2SGrid[qs[1] | (qh << 6 & 0x300)],
                          kIq2SGrid[qs[2] | (qh << 4 & 0x300)], kIq2SGrid[qs[3] | (qh << 2 & 0x300)], signs,
                          p[offsetof(BlockIq2S, scales) + j]);
    }
};

// y[t, r] for rows [r0, r1) and every token: each row decoded once into scratch (blocks [nb], d / 8 per
// super-block), then dotted with each token.
template <typename Dec>
void iq2_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32;
    auto* blocks = reinterpret_cast<Iq2Block*>(scratch);  // [nb] (scratch is 64-byte aligned)
    float* dw = scratch + nb * static_cast<int64_t>(sizeof(Iq2Block) / sizeof(float));  // [nb / 8]
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * static_cast<int64_t>(w.row_bytes);
        for (int64_t g = 0; g < nb / 8; ++g) {
            const uint8_t* p = row + g * Dec::kBytes;
            dw[g] = _cvtsh_ss(load_unaligned<uint16_t>(p)) * 0.125f;
            for (int j = 0; j < 8; ++j) blocks[8 * g + j] = Dec::block(p, j);
        }
        for (int64_t t = 0; t < args.n_tokens; ++t) {
            const int8_t* qa = q.qs + t * q.qs_stride;  // [n_in]
            const float* da = q.d + t * q.blk_stride;   // [nb]
            __m256 acc = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa + 32 * b));
                const __m256i v = blocks[b].q;
                const __m256i prod = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(a, v));
                const __m256i part = _mm256_madd_epi16(prod, blocks[b].sc);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(part), _mm256_set1_ps(dw[b / 8] * da[b]), acc);
            }
            args.y[t * w.n_out + r] = hsum(acc);
        }
    }
}

}  // namespace

void add_iq2_kernels(KernelTable& table) {
    entry(table.rows, GgmlType::IQ2_XS) = {iq2_rows<DecIq2Xs>, true};
    entry(table.rows, GgmlType::IQ2_S) = {iq2_rows<DecIq2S>, true};
}

}  // namespace quill::cpu::avx2

#endif
