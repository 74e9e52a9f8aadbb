// Portable kernels (baseline x86-64 or any other CPU), written as plain loops the compiler vectorizes: each weight
// row is decoded once into signed int8 values with per-16 scales (or into floats), then dotted with every token.
// Also the scalar dot of one 32-block used for odd tails.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/error.h"
#include "engine/format/quant_iq1.h"
#include "engine/format/quant_iq2.h"
#include "engine/format/quant_iq3.h"

namespace quill::cpu {

namespace {

// ---- block decoders: 32-block b of a row as w_i = ws[i / 16] * q_i + wm with signed int8 q ----
// (The unified form of kernels.h with c folded into q, which fits int8 for every type here.)

struct DecodedBlock {
    int8_t q[32];
    float ws[2];
    float wm;
    // Q2_K: a minimum per 16-element half (wm16[h] * da * the half's sum), in place of wm.
    bool half_minima = false;
    float wm16[2] = {0.0f, 0.0f};

    // The minima term of this block for activations with block sum ds and half sums ds16[0..1].
    float minima(float ds, const float* ds16) const {
        return half_minima ? wm16[0] * ds16[0] + wm16[1] * ds16[1] : wm * ds;
    }
};

template <typename Block>
Block block_at(const void* row, int64_t i) {
    return load_unaligned<Block>(static_cast<const uint8_t*>(row) + i * static_cast<int64_t>(sizeof(Block)));
}

// Nibbles of a 16-byte qs: low nibbles are elements 0..15, high nibbles 16..31.
void unpack_nibbles(const uint8_t* qs, int offset, int8_t* q) {
    for (int i = 0; i < 16; ++i) {
        q[i] = static_cast<int8_t>((qs[i] & 0xF) - offset);
        q[i + 16] = static_cast<int8_t>((qs[i] >> 4) - offset);
    }
}

void add_high_bits(uint32_t qh, int8_t* q) {
    for (int i = 0; i < 32; ++i) q[i] = static_cast<int8_t>(q[i] + static_cast<int8_t>(((qh >> i) & 1) << 4));
}

void decode_q4_0(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ4_0>(row, b);
    unpack_nibbles(blk.qs, 8, out.q);
    out.ws[0] = out.ws[1] = half_to_float(blk.d);
    out.wm = 0.0f;
}

void decode_q4_1(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ4_1>(row, b);
    unpack_nibbles(blk.qs, 0, out.q);
    out.ws[0] = out.ws[1] = half_to_float(blk.d);
    out.wm = half_to_float(blk.m);
}

void decode_q5_0(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ5_0>(row, b);
    unpack_nibbles(blk.qs, 0, out.q);
    add_high_bits(load_unaligned<uint32_t>(blk.qh), out.q);
    for (int8_t& v : out.q) v = static_cast<int8_t>(v - 16);
    out.ws[0] = out.ws[1] = half_to_float(blk.d);
    out.wm = 0.0f;
}

void decode_q5_1(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ5_1>(row, b);
    unpack_nibbles(blk.qs, 0, out.q);
    add_high_bits(load_unaligned<uint32_t>(blk.qh), out.q);
    out.ws[0] = out.ws[1] = half_to_float(blk.d);
    out.wm = half_to_float(blk.m);
}

void decode_q8_0(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ8_0>(row, b);
    std::memcpy(out.q, blk.qs, 32);
    out.ws[0] = out.ws[1] = half_to_float(blk.d);
    out.wm = 0.0f;
}

// Sub-block j (0..7) of a Q4_K / Q5_K super-block: values, scale d * sc_j, minimum -dmin * m_j.
template <typename Block>
void k4_scale_min(const Block& blk, int j, DecodedBlock& out) {
    uint8_t sc[8], mn[8];
    unpack_k4_scales(blk.scales, sc, mn);
    out.ws[0] = out.ws[1] = half_to_float(blk.d) * static_cast<float>(sc[j]);
    out.wm = -half_to_float(blk.dmin) * static_cast<float>(mn[j]);
}

void decode_q4_k(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ4_K>(row, b / 8);
    const int j = static_cast<int>(b % 8);
    const uint8_t* qs = blk.qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int i = 0; i < 32; ++i) out.q[i] = static_cast<int8_t>((qs[i] >> shift) & 0xF);
    k4_scale_min(blk, j, out);
}

void decode_q5_k(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ5_K>(row, b / 8);
    const int j = static_cast<int>(b % 8);
    const uint8_t* qs = blk.qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int i = 0; i < 32; ++i) {
        out.q[i] = static_cast<int8_t>(((qs[i] >> shift) & 0xF) | (((blk.qh[i] >> j) & 1) << 4));
    }
    k4_scale_min(blk, j, out);
}

// Q6_K: 32-block j (0..7) is elements 32 * j ..; within its 128-element half (see engine/format/quant_k.cpp) the low
// nibbles come from ql[64 * half + 32 * (k % 2) + i] (high nibble when k >= 2) and the top bits from
// qh[32 * half + i] at bit 2 * k, where k = j % 4.
void decode_q6_k(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ6_K>(row, b / 8);
    const int j = static_cast<int>(b % 8), half = j / 4, k = j % 4;
    const uint8_t* ql = blk.ql + 64 * half + 32 * (k % 2);
    const uint8_t* qh = blk.qh + 32 * half;
    const int shift = 4 * (k / 2);
    for (int i = 0; i < 32; ++i) {
        const int v = ((ql[i] >> shift) & 0xF) | (((qh[i] >> (2 * k)) & 3) << 4);
        out.q[i] = static_cast<int8_t>(v - 32);
    }
    const float d = half_to_float(blk.d);
    out.ws[0] = d * static_cast<float>(blk.scales[2 * j]);
    out.ws[1] = d * static_cast<float>(blk.scales[2 * j + 1]);
    out.wm = 0.0f;
}

// Q3_K: 32-block j (0..7) lies in the 128-element half j / 4: element i has its two low bits in qs[32 * half + i]
// at bit 2 * (j % 4) and its high bit in hmask[i] at bit j; w = d * sc * (low + 4 high - 4), a scale per 16.
void decode_q3_k(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ3_K>(row, b / 8);
    const int j = static_cast<int>(b % 8), half = j / 4, shift = 2 * (j % 4);
    for (int i = 0; i < 32; ++i) {
        const int low = (blk.qs[32 * half + i] >> shift) & 3, high = (blk.hmask[i] >> j) & 1;
        out.q[i] = static_cast<int8_t>(low + 4 * high - 4);
    }
    const float d = half_to_float(blk.d);
    out.ws[0] = d * static_cast<float>(q3_k_scale(blk.scales, 2 * j));
    out.ws[1] = d * static_cast<float>(q3_k_scale(blk.scales, 2 * j + 1));
    out.wm = 0.0f;
}

// Q2_K: element i of 32-block j has two bits of qs[32 (j / 4) + i] at bit 2 (j % 4); w = d sc q - dmin m with a
// 4-bit scale (low nibble of scales[k]) and minimum (high nibble) per 16 elements k.
void decode_q2_k(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockQ2_K>(row, b / 8);
    const int j = static_cast<int>(b % 8), half = j / 4, shift = 2 * (j % 4);
    for (int i = 0; i < 32; ++i) out.q[i] = static_cast<int8_t>((blk.qs[32 * half + i] >> shift) & 3);
    const float d = half_to_float(blk.d), dmin = half_to_float(blk.dmin);
    for (int h = 0; h < 2; ++h) {
        const uint8_t sc = blk.scales[2 * j + h];
        out.ws[h] = d * static_cast<float>(sc & 0xF);
        out.wm16[h] = -dmin * static_cast<float>(sc >> 4);
    }
    out.wm = 0.0f;
    out.half_minima = true;
}

// The non-linear types: each nibble (element i low, i + 16 high, as Q4_0) indexes a table of int8 levels.
void unpack_table(const uint8_t* qs, const int8_t* values, int8_t* q) {
    for (int i = 0; i < 16; ++i) {
        q[i] = values[qs[i] & 0xF];
        q[i + 16] = values[qs[i] >> 4];
    }
}

void decode_iq4_nl(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockIq4Nl>(row, b);
    unpack_table(blk.qs, kIq4nlValues, out.q);
    out.ws[0] = out.ws[1] = half_to_float(blk.d);
    out.wm = 0.0f;
}

// IQ4_XS: 32-block j (0..7) of a super-block has the 6-bit scale iq4_xs_scale(j), offset by 32.
void decode_iq4_xs(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockIq4Xs>(row, b / 8);
    const int j = static_cast<int>(b % 8);
    unpack_table(blk.qs + 16 * j, kIq4nlValues, out.q);
    out.ws[0] = out.ws[1] = half_to_float(blk.d) * static_cast<float>(iq4_xs_scale(blk, j) - 32);
    out.wm = 0.0f;
}

// IQ3_XXS and IQ3_S: each 32-block's signed grid levels under one scale (engine/format/quant_iq3.h).
void decode_iq3_xxs(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockIq3Xxs>(row, b / 8);
    out.ws[0] = out.ws[1] = iq3_xxs_levels(blk, static_cast<int>(b % 8), out.q);
    out.wm = 0.0f;
}

void decode_iq3_s(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockIq3S>(row, b / 8);
    out.ws[0] = out.ws[1] = iq3_s_levels(blk, static_cast<int>(b % 8), out.q);
    out.wm = 0.0f;
}

void decode_mxfp4(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockMxfp4>(row, b);
    unpack_table(blk.qs, kMxfp4Values, out.q);
    out.ws[0] = out.ws[1] = mxfp4_scale(blk.e);
    out.wm = 0.0f;
}

// The 2-bit i-quants (engine/format/quant_iq2.h): 32-block j (0..7) of a super-block is its entries 4 j .. 4 j + 3,
// each 8 grid magnitudes with signs; w = d (0.5 + s) / 4 * q, the scale s per 32 (IQ2_XXS) or per 16 elements.
void put_iq2_entry(uint64_t grid, uint32_t signs, int8_t* q) {
    for (int i = 0; i < 8; ++i) {
        const auto g = static_cast<int8_t>((grid >> (8 * i)) & 0xFF);
        q[i] = (signs >> i) & 1 ? static_cast<int8_t>(-g) : g;
    }
}

float iq2_scale(uint16_t d, uint32_t s) { return half_to_float(d) * (0.5f + static_cast<float>(s & 15)) * 0.25f; }

void decode_iq2_xxs(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockIq2Xxs>(row, b / 8);
    const int j = static_cast<int>(b % 8);
    const uint32_t high = load_unaligned<uint32_t>(blk.qs + 8 * j + 4);  // sign indices, then the scale
    for (int l = 0; l < 4; ++l)
        put_iq2_entry(kIq2XxsGrid[blk.qs[8 * j + l]], iq2_signs(high >> (7 * l)), out.q + 8 * l);
    out.ws[0] = out.ws[1] = iq2_scale(blk.d, high >> 28);
    out.wm = 0.0f;
}

void decode_iq2_xs(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockIq2Xs>(row, b / 8);
    const int j = static_cast<int>(b % 8);
    for (int l = 0; l < 4; ++l) {
        const uint16_t e = blk.qs[4 * j + l];
        put_iq2_entry(kIq2XsGrid[e & 511], iq2_signs(e >> 9), out.q + 8 * l);
    }
    out.ws[0] = iq2_scale(blk.d, blk.scales[j]);
    out.ws[1] = iq2_scale(blk.d, blk.scales[j] >> 4);
    out.wm = 0.0f;
}

void decode_iq2_s(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockIq2S>(row, b / 8);
    const int j = static_cast<int>(b % 8);
    for (int l = 0; l < 4; ++l) {
        const uint32_t index = blk.qs[4 * j + l] | (((blk.qh[j] >> (2 * l)) & 3u) << 8);
        put_iq2_entry(kIq2SGrid[index], blk.signs[4 * j + l], out.q + 8 * l);
    }
    out.ws[0] = iq2_scale(blk.d, blk.scales[j]);
    out.ws[1] = iq2_scale(blk.d, blk.scales[j] >> 4);
    out.wm = 0.0f;
}

// IQ1_S and IQ1_M: each 32-block's levels 8 g +- 1 under the scale d (2 s + 1) / 8, one scale per block (IQ1_S) or
// per 16 elements (IQ1_M) (engine/format/quant_iq1.h).
void decode_iq1_s(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockIq1S>(row, b / 8);
    out.ws[0] = out.ws[1] = iq1_s_levels(blk, static_cast<int>(b % 8), out.q);
    out.wm = 0.0f;
}

void decode_iq1_m(const void* row, int64_t b, DecodedBlock& out) {
    const auto blk = block_at<BlockIq1M>(row, b / 8);
    iq1_m_levels(blk, static_cast<int>(b % 8), out.q, out.ws);
    out.wm = 0.0f;
}

using DecodeFn = void (*)(const void* row, int64_t b, DecodedBlock& out);

DecodeFn find_decoder(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_0:
            return decode_q4_0;
        case GgmlType::Q4_1:
            return decode_q4_1;
        case GgmlType::Q5_0:
            return decode_q5_0;
        case GgmlType::Q5_1:
            return decode_q5_1;
        case GgmlType::Q8_0:
            return decode_q8_0;
        case GgmlType::Q4_K:
            return decode_q4_k;
        case GgmlType::Q5_K:
            return decode_q5_k;
        case GgmlType::Q6_K:
            return decode_q6_k;
        case GgmlType::Q3_K:
            return decode_q3_k;
        case GgmlType::Q2_K:
            return decode_q2_k;
        case GgmlType::IQ4_NL:
            return decode_iq4_nl;
        case GgmlType::IQ4_XS:
            return decode_iq4_xs;
        case GgmlType::MXFP4:
            return decode_mxfp4;
        case GgmlType::IQ3_XXS:
            return decode_iq3_xxs;
        case GgmlType::IQ3_S:
            return decode_iq3_s;
        case GgmlType::IQ2_XXS:
            return decode_iq2_xxs;
        case GgmlType::IQ2_XS:
            return decode_iq2_xs;
        case GgmlType::IQ2_S:
            return decode_iq2_s;
        case GgmlType::IQ1_S:
            return decode_iq1_s;
        case GgmlType::IQ1_M:
            return decode_iq1_m;
        default:
            return nullptr;
    }
}

int32_t dot16(const int8_t* a, const int8_t* b) {
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) s += static_cast<int32_t>(a[i]) * static_cast<int32_t>(b[i]);
    return s;
}

// ---- quantized rows: decode the row once, then one dot per token ----
template <DecodeFn decode>
void quant_rows(const KernelArgs& args, int64_t r0, int64_t r1, float*) {
    const WeightMatrix& w = *args.w;
    const QuantizedActs& a = *args.q;
    const int64_t nb = w.n_in / 32;
    std::vector<DecodedBlock> blocks(static_cast<size_t>(nb));  // [nb]: the row being multiplied
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * static_cast<int64_t>(w.row_bytes);
        for (int64_t b = 0; b < nb; ++b) decode(row, b, blocks[static_cast<size_t>(b)]);
        for (int64_t t = 0; t < args.n_tokens; ++t) {
            const int8_t* qa = a.qs + t * a.qs_stride;  // [n_in]
            const float* da = a.d + t * a.blk_stride;   // [nb]
            const float* ds = a.ds + t * a.blk_stride;  // [nb]
            const float* ds16 = a.ds16 + 2 * t * a.blk_stride;  // [2 nb]
            float sum = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const DecodedBlock& blk = blocks[static_cast<size_t>(b)];
                const float lo = static_cast<float>(dot16(blk.q, qa + 32 * b));
                const float hi = static_cast<float>(dot16(blk.q + 16, qa + 32 * b + 16));
                sum += da[b] * (blk.ws[0] * lo + blk.ws[1] * hi) + blk.minima(ds[b], ds16 + 2 * b);
            }
            args.y[t * w.n_out + r] = sum;
        }
    }
}

// ---- float rows: the row converted to float once, then one dot per token ----

float dot_f32(const float* a, const float* b, int64_t n) {
    constexpr int kLanes = 16;
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        for (int k = 0; k < kLanes; ++k) acc[k] += a[i + k] * b[i + k];
    }
    float sum = 0.0f;
    for (; i < n; ++i) sum += a[i] * b[i];
    for (float v : acc) sum += v;
    return sum;
}

void convert_row(GgmlType type, const void* row, float* out, int64_t n) {
    const auto* h = static_cast<const uint8_t*>(row);
    switch (type) {
        case GgmlType::F16:
            for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(load_unaligned<uint16_t>(h + 2 * i));
            break;
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                const uint32_t bits = static_cast<uint32_t>(load_unaligned<uint16_t>(h + 2 * i)) << 16;
                std::memcpy(&out[i], &bits, sizeof(float));
            }
            break;
        default:
            dequantize_row(type, row, out, n);
            break;
    }
}

void float_rows(const KernelArgs& args, int64_t r0, int64_t r1, float*) {
    const WeightMatrix& w = *args.w;
    std::vector<float> buf(w.type == GgmlType::F32 ? 0 : static_cast<size_t>(w.n_in));  // [n_in]
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * static_cast<int64_t>(w.row_bytes);
        const float* wr;  // [n_in]
        if (w.type == GgmlType::F32) {
            wr = reinterpret_cast<const float*>(row);
        } else {
            convert_row(w.type, row, buf.data(), w.n_in);
            wr = buf.data();
        }
        for (int64_t t = 0; t < args.n_tokens; ++t) args.y[t * w.n_out + r] = dot_f32(wr, args.x + t * w.n_in, w.n_in);
    }
}

}  // namespace

namespace generic {

const KernelTable& kernel_table() {
    static const KernelTable table = [] {
        KernelTable t{};
        entry(t.rows, GgmlType::F32) = {float_rows, false};
        entry(t.rows, GgmlType::F16) = {float_rows, false};
        entry(t.rows, GgmlType::BF16) = {float_rows, false};
        entry(t.rows, GgmlType::Q4_0) = {quant_rows<decode_q4_0>, true};
        entry(t.rows, GgmlType::Q4_1) = {quant_rows<decode_q4_1>, true};
        entry(t.rows, GgmlType::Q5_0) = {quant_rows<decode_q5_0>, true};
        entry(t.rows, GgmlType::Q5_1) = {quant_rows<decode_q5_1>, true};
        entry(t.rows, GgmlType::Q8_0) = {quant_rows<decode_q8_0>, true};
        entry(t.rows, GgmlType::Q4_K) = {quant_rows<decode_q4_k>, true};
        entry(t.rows, GgmlType::Q5_K) = {quant_rows<decode_q5_k>, true};
        entry(t.rows, GgmlType::Q6_K) = {quant_rows<decode_q6_k>, true};
        entry(t.rows, GgmlType::Q3_K) = {quant_rows<decode_q3_k>, true};
        entry(t.rows, GgmlType::Q2_K) = {quant_rows<decode_q2_k>, true};
        entry(t.rows, GgmlType::IQ4_NL) = {quant_rows<decode_iq4_nl>, true};
        entry(t.rows, GgmlType::IQ4_XS) = {quant_rows<decode_iq4_xs>, true};
        entry(t.rows, GgmlType::MXFP4) = {quant_rows<decode_mxfp4>, true};
        entry(t.rows, GgmlType::IQ3_XXS) = {quant_rows<decode_iq3_xxs>, true};
        entry(t.rows, GgmlType::IQ3_S) = {quant_rows<decode_iq3_s>, true};
        entry(t.rows, GgmlType::IQ2_XXS) = {quant_rows<decode_iq2_xxs>, true};
        entry(t.rows, GgmlType::IQ2_XS) = {quant_rows<decode_iq2_xs>, true};
        entry(t.rows, GgmlType::IQ2_S) = {quant_rows<decode_iq2_s>, true};
        entry(t.rows, GgmlType::IQ1_S) = {quant_rows<decode_iq1_s>, true};
        entry(t.rows, GgmlType::IQ1_M) = {quant_rows<decode_iq1_m>, true};
        return t;
    }();
    return table;
}

Kernel fallback_kernel() { return {float_rows, false}; }

float block_dot(GgmlType type, const void* row, int64_t b, const QuantizedActs& q, int64_t t) {
    const DecodeFn decode = find_decoder(type);
    QUILL_CHECK(decode != nullptr, "no block decoder for {}", type_name(type));
    DecodedBlock blk;
    decode(row, b, blk);
    const int8_t* qa = q.qs + t * q.qs_stride + 32 * b;
    const float lo = static_cast<float>(dot16(blk.q, qa));
    const float hi = static_cast<float>(dot16(blk.q + 16, qa + 16));
    return q.d[t * q.blk_stride + b] * (blk.ws[0] * lo + blk.ws[1] * hi) +
           blk.minima(q.ds[t * q.blk_stride + b], q.ds16 + 2 * (t * q.blk_stride + b));
}

}  // namespace generic

}  // namespace quill::cpu
