// Type table, fp16/bf16 conversions, and the scalar reference codecs of the float and 32-element block types.
// The quantizers reproduce ggml's quantize_row_*_ref bit for bit (same operations in the same order); the
// super-block types live in engine/format/quant_k.cpp.
#include "engine/format/quant.h"

#include "engine/error.h"
#include "engine/format/quant_iq1.h"
#include "engine/format/quant_iq2.h"
#include "engine/format/quant_k.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace quill {

using detail::load_block;
using detail::store_block;

namespace {

// Every ggml type id: block size and bytes per block as in ggml's type_traits.
constexpr std::array<TypeTraits, 32> kTypes = {{
    // type, name, elements per block, bytes per block, can_dequantize, can_quantize
    {GgmlType::F32, "f32", 1, 4, true, true},
    {GgmlType::F16, "f16", 1, 2, true, true},
    {GgmlType::Q4_0, "q4_0", QK4_0, sizeof(BlockQ4_0), true, true},
    {GgmlType::Q4_1, "q4_1", QK4_1, sizeof(BlockQ4_1), true, true},
    {GgmlType::Q5_0, "q5_0", QK5_0, sizeof(BlockQ5_0), true, true},
    {GgmlType::Q5_1, "q5_1", QK5_1, sizeof(BlockQ5_1), true, true},
    {GgmlType::Q8_0, "q8_0", QK8_0, sizeof(BlockQ8_0), true, true},
    {GgmlType::Q8_1, "q8_1", QK8_1, sizeof(BlockQ8_1), true, true},
    {GgmlType::Q2_K, "q2_K", QK_K, sizeof(BlockQ2_K), true, true},
    {GgmlType::Q3_K, "q3_K", QK_K, sizeof(BlockQ3_K), true, true},
    {GgmlType::Q4_K, "q4_K", QK_K, sizeof(BlockQ4_K), true, true},
    {GgmlType::Q5_K, "q5_K", QK_K, sizeof(BlockQ5_K), true, true},
    {GgmlType::Q6_K, "q6_K", QK_K, sizeof(BlockQ6_K), true, true},
    {GgmlType::Q8_K, "q8_K", QK_K, sizeof(BlockQ8_K), true, true},
    // The integer and TQ types are known so that files holding them can be described, but not computable here; the
    // IQ1, IQ2 and IQ3 types are dequantized only (their quantizers need an importance matrix).
    {GgmlType::IQ2_XXS, "iq2_xxs", QK_K, sizeof(BlockIq2Xxs), true, false},
    {GgmlType::IQ2_XS, "iq2_xs", QK_K, sizeof(BlockIq2Xs), true, false},
    {GgmlType::IQ3_XXS, "iq3_xxs", QK_K, 98, true, false},
    {GgmlType::IQ1_S, "iq1_s", QK_K, sizeof(BlockIq1S), true, false},
    {GgmlType::IQ4_NL, "iq4_nl", QK4_NL, sizeof(BlockIq4Nl), true, true},
    {GgmlType::IQ3_S, "iq3_s", QK_K, 110, true, false},
    {GgmlType::IQ2_S, "iq2_s", QK_K, sizeof(BlockIq2S), true, false},
    {GgmlType::IQ4_XS, "iq4_xs", QK_K, sizeof(BlockIq4Xs), true, true},
    {GgmlType::I8, "i8", 1, 1, false, false},
    {GgmlType::I16, "i16", 1, 2, false, false},
    {GgmlType::I32, "i32", 1, 4, false, false},
    {GgmlType::I64, "i64", 1, 8, false, false},
    {GgmlType::F64, "f64", 1, 8, false, false},
    {GgmlType::IQ1_M, "iq1_m", QK_K, sizeof(BlockIq1M), true, false},
    {GgmlType::BF16, "bf16", 1, 2, true, true},
    {GgmlType::TQ1_0, "tq1_0", QK_K, 54, false, false},
    {GgmlType::TQ2_0, "tq2_0", QK_K, 66, false, false},
    {GgmlType::MXFP4, "mxfp4", QK_MXFP4, sizeof(BlockMxfp4), true, true},
}};

uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

char lower_ascii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool equal_ignoring_case(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (lower_ascii(a[i]) != lower_ascii(b[i])) return false;
    }
    return true;
}

// Largest |x| in x[0..n) and the signed value that has it (the first one on ties, as ggml keeps it).
void signed_absmax(const float* x, int n, float& amax, float& max) {
    amax = 0.0f;
    max = 0.0f;
    for (int j = 0; j < n; ++j) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
}

void min_max(const float* x, int n, float& min, float& max) {
    min = FLT_MAX;
    max = -FLT_MAX;
    for (int j = 0; j < n; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
}

// ---- 32-element blocks: x[j] and x[j + 16] share byte j of qs (low nibble, high nibble) ----

void dequantize_q4_0(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK4_0) {
        const auto b = load_block<BlockQ4_0>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            y[j] = static_cast<float>((b.qs[j] & 0xF) - 8) * d;
            y[j + QK4_0 / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
        }
    }
}

void quantize_q4_0(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK4_0) {
        float amax, max;
        signed_absmax(x, QK4_0, amax, max);
        const float d = max / -8;  // the largest magnitude becomes level -8 exactly
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ4_0 b{};
        b.d = fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
            const int q1 = std::min(15, static_cast<int>(x[j + QK4_0 / 2] * id + 8.5f));
            b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
        store_block(dst, i, b);
    }
}

void dequantize_q4_1(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK4_1) {
        const auto b = load_block<BlockQ4_1>(src, i);
        const float d = fp16_to_fp32(b.d);
        const float m = fp16_to_fp32(b.m);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            y[j] = static_cast<float>(b.qs[j] & 0xF) * d + m;
            y[j + QK4_1 / 2] = static_cast<float>(b.qs[j] >> 4) * d + m;
        }
    }
}

void quantize_q4_1(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK4_1) {
        float min, max;
        min_max(x, QK4_1, min, max);
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ4_1 b{};
        b.d = fp32_to_fp16(d);
        b.m = fp32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            const int q0 = std::min(15, static_cast<int>((x[j] - min) * id + 0.5f));
            const int q1 = std::min(15, static_cast<int>((x[j + QK4_1 / 2] - min) * id + 0.5f));
            b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
        store_block(dst, i, b);
    }
}

// Q5: the fifth bit of element j is bit j of the little-endian 32-bit qh.
uint32_t load_qh(const uint8_t (&qh)[4]) {
    return uint32_t{qh[0]} | (uint32_t{qh[1]} << 8) | (uint32_t{qh[2]} << 16) | (uint32_t{qh[3]} << 24);
}

void store_qh(uint8_t (&qh)[4], uint32_t bits) {
    for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(bits >> (8 * k));
}

// The 5-bit values of a Q5_0/Q5_1 block: q[32].
void unpack_q5(const uint8_t* qs, uint32_t qh, int* q) {
    for (int j = 0; j < 16; ++j) {
        q[j] = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    }
}

// Packs q[32] (each 0..31) into qs nibbles and the returned qh bits.
uint32_t pack_q5(const int* q, uint8_t* qs) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
        qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
    }
    return qh;
}

void dequantize_q5_0(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK5_0) {
        const auto b = load_block<BlockQ5_0>(src, i);
        const float d = fp16_to_fp32(b.d);
        int q[QK5_0];
        unpack_q5(b.qs, load_qh(b.qh), q);
        for (int j = 0; j < QK5_0; ++j) y[j] = static_cast<float>(q[j] - 16) * d;
    }
}

void quantize_q5_0(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK5_0) {
        float amax, max;
        signed_absmax(x, QK5_0, amax, max);
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ5_0 b{};
        b.d = fp32_to_fp16(d);
        int q[QK5_0];
        for (int j = 0; j < QK5_0; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
        store_qh(b.qh, pack_q5(q, b.qs));
        store_block(dst, i, b);
    }
}

void dequantize_q5_1(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK5_1) {
        const auto b = load_block<BlockQ5_1>(src, i);
        const float d = fp16_to_fp32(b.d);
        const float m = fp16_to_fp32(b.m);
        int q[QK5_1];
        unpack_q5(b.qs, load_qh(b.qh), q);
        for (int j = 0; j < QK5_1; ++j) y[j] = static_cast<float>(q[j]) * d + m;
    }
}

void quantize_q5_1(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK5_1) {
        float min, max;
        min_max(x, QK5_1, min, max);
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ5_1 b{};
        b.d = fp32_to_fp16(d);
        b.m = fp32_to_fp16(min);
        int q[QK5_1];
        for (int j = 0; j < QK5_1; ++j) q[j] = std::min(31, static_cast<int>((x[j] - min) * id + 0.5f));
        store_qh(b.qh, pack_q5(q, b.qs));
        store_block(dst, i, b);
    }
}

void dequantize_q8_0(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK8_0) {
        const auto b = load_block<BlockQ8_0>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
    }
}

// Q8_0 and Q8_1 share the quants: q = round(x / d) (half away from zero), d = amax / 127. Returns d.
float quantize_q8_block(const float* x, int8_t* qs, uint16_t& d_half) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    d_half = fp32_to_fp16(d);
    for (int j = 0; j < 32; ++j) qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    return d;
}

void quantize_q8_0(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK8_0) {
        BlockQ8_0 b{};
        quantize_q8_block(x, b.qs, b.d);
        store_block(dst, i, b);
    }
}

void dequantize_q8_1(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK8_1) {
        const auto b = load_block<BlockQ8_1>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int j = 0; j < QK8_1; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
    }
}

void quantize_q8_1(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK8_1) {
        BlockQ8_1 b{};
        const float d = quantize_q8_block(x, b.qs, b.d);
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) sum += b.qs[j];
        b.s = fp32_to_fp16(static_cast<float>(sum) * d);  // with the unrounded d, as ggml does
        store_block(dst, i, b);
    }
}

uint16_t load_u16(const void* src, int64_t i) {
    uint16_t h;
    std::memcpy(&h, static_cast<const uint8_t*>(src) + 2 * i, sizeof(h));
    return h;
}

void store_u16(void* dst, int64_t i, uint16_t h) { std::memcpy(static_cast<uint8_t*>(dst) + 2 * i, &h, sizeof(h)); }

}  // namespace

// ---- type table ----

const TypeTraits* find_type_traits(uint32_t id) {
    for (const auto& t : kTypes) {
        if (static_cast<uint32_t>(t.type) == id) return &t;
    }
    return nullptr;
}

const TypeTraits& type_traits(GgmlType type) {
    const TypeTraits* t = find_type_traits(static_cast<uint32_t>(type));
    QUILL_CHECK(t != nullptr, "ggml type id {} is not a known type", static_cast<uint32_t>(type));
    return *t;
}

std::string_view type_name(GgmlType type) { return type_traits(type).name; }

std::optional<GgmlType> type_from_name(std::string_view name) {
    for (const auto& t : kTypes) {
        if (equal_ignoring_case(name, t.name)) return t.type;
    }
    return std::nullopt;
}

size_t row_size(GgmlType type, int64_t n) {
    const TypeTraits& t = type_traits(type);
    QUILL_CHECK(n >= 0 && n % t.block_size == 0, "a {} row of {} elements is not a whole number of {}-element blocks",
                t.name, n, t.block_size);
    return static_cast<size_t>(n / t.block_size) * t.type_size;
}

// ---- fp16 / bf16 ----

float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    if (exp == 0x1F) return bits_float(sign | 0x7F800000 | (mant << 13));  // inf, NaN (payload kept)
    if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return bits_float(sign);
    // Subnormal: mant * 2^-24. Shift the leading one up to bit 10; each shift lowers the exponent by one.
    uint32_t e = 113;
    while ((mant & 0x400) == 0) {
        mant <<= 1;
        --e;
    }
    return bits_float(sign | (e << 23) | ((mant & 0x3FF) << 13));
}

uint16_t fp32_to_fp16(float f) {
    const uint32_t x = float_bits(f);
    const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
    const uint32_t abs = x & 0x7FFFFFFF;
    if (abs > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));  // quiet NaN
    if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // >= 65520 rounds to inf
    if (abs >= 0x38800000) {
        // Normal half: rebias the exponent, drop 13 mantissa bits with round to nearest even. A carry out of
        // the mantissa correctly bumps the exponent.
        uint32_t h = (((abs >> 23) - 112) << 10) | ((abs >> 13) & 0x3FF);
        const uint32_t rest = abs & 0x1FFF;
        if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
        return static_cast<uint16_t>(sign | h);
    }
    // Subnormal half (or zero): value / 2^-24 = mant24 * 2^(exp - 126), rounded to nearest even.
    const uint32_t exp = abs >> 23;
    if (exp < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) ++h;  // may carry into the smallest normal, which is right
    return static_cast<uint16_t>(sign | h);
}

float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
    const uint32_t x = float_bits(f);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

// ---- rows ----

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
    const TypeTraits& t = type_traits(type);
    QUILL_CHECK(t.can_dequantize, "dequantizing {} is not supported", t.name);
    QUILL_CHECK(n >= 0 && n % t.block_size == 0, "{} row of {} elements is not whole blocks", t.name, n);
    const int64_t nb = n / t.block_size;
    switch (type) {
        case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case GgmlType::F16:
            for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(src, i));
            return;
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(src, i));
            return;
        case GgmlType::Q4_0: dequantize_q4_0(src, dst, nb); return;
        case GgmlType::Q4_1: dequantize_q4_1(src, dst, nb); return;
        case GgmlType::Q5_0: dequantize_q5_0(src, dst, nb); return;
        case GgmlType::Q5_1: dequantize_q5_1(src, dst, nb); return;
        case GgmlType::Q8_0: dequantize_q8_0(src, dst, nb); return;
        case GgmlType::Q8_1: dequantize_q8_1(src, dst, nb); return;
        case GgmlType::Q2_K: detail::dequantize_q2_k(src, dst, nb); return;
        case GgmlType::Q3_K: detail::dequantize_q3_k(src, dst, nb); return;
        case GgmlType::Q4_K: detail::dequantize_q4_k(src, dst, nb); return;
        case GgmlType::Q5_K: detail::dequantize_q5_k(src, dst, nb); return;
        case GgmlType::Q6_K: detail::dequantize_q6_k(src, dst, nb); return;
        case GgmlType::Q8_K: detail::dequantize_q8_k(src, dst, nb); return;
        case GgmlType::IQ4_NL: detail::dequantize_iq4_nl(src, dst, nb); return;
        case GgmlType::IQ4_XS: detail::dequantize_iq4_xs(src, dst, nb); return;
        case GgmlType::MXFP4: detail::dequantize_mxfp4(src, dst, nb); return;
        case GgmlType::IQ3_XXS: detail::dequantize_iq3_xxs(src, dst, nb); return;
        case GgmlType::IQ3_S: detail::dequantize_iq3_s(src, dst, nb); return;
        case GgmlType::IQ2_XXS: detail::dequantize_iq2_xxs(src, dst, nb); return;
        case GgmlType::IQ2_XS: detail::dequantize_iq2_xs(src, dst, nb); return;
        case GgmlType::IQ2_S: detail::dequantize_iq2_s(src, dst, nb); return;
        case GgmlType::IQ1_S: detail::dequantize_iq1_s(src, dst, nb); return;
        case GgmlType::IQ1_M: detail::dequantize_iq1_m(src, dst, nb); return;
        default: break;
    }
    QUILL_CHECK(false, "no dequantizer for {}", t.name);
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
    const TypeTraits& t = type_traits(type);
    QUILL_CHECK(t.can_quantize, "quantizing to {} is not supported", t.name);
    QUILL_CHECK(n >= 0 && n % t.block_size == 0, "{} row of {} elements is not whole blocks", t.name, n);
    const int64_t nb = n / t.block_size;
    switch (type) {
        case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case GgmlType::F16:
            for (int64_t i = 0; i < n; ++i) store_u16(dst, i, fp32_to_fp16(src[i]));
            return;
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) store_u16(dst, i, fp32_to_bf16(src[i]));
            return;
        case GgmlType::Q4_0: quantize_q4_0(src, dst, nb); return;
        case GgmlType::Q4_1: quantize_q4_1(src, dst, nb); return;
        case GgmlType::Q5_0: quantize_q5_0(src, dst, nb); return;
        case GgmlType::Q5_1: quantize_q5_1(src, dst, nb); return;
        case GgmlType::Q8_0: quantize_q8_0(src, dst, nb); return;
        case GgmlType::Q8_1: quantize_q8_1(src, dst, nb); return;
        case GgmlType::Q2_K: detail::quantize_q2_k(src, dst, nb); return;
        case GgmlType::Q3_K: detail::quantize_q3_k(src, dst, nb); return;
        case GgmlType::Q4_K: detail::quantize_q4_k(src, dst, nb); return;
        case GgmlType::Q5_K: detail::quantize_q5_k(src, dst, nb); return;
        case GgmlType::Q6_K: detail::quantize_q6_k(src, dst, nb); return;
        case GgmlType::Q8_K: detail::quantize_q8_k(src, dst, nb); return;
        case GgmlType::IQ4_NL: detail::quantize_iq4_nl(src, dst, nb); return;
        case GgmlType::IQ4_XS: detail::quantize_iq4_xs(src, dst, nb); return;
        case GgmlType::MXFP4: detail::quantize_mxfp4(src, dst, nb); return;
        default: break;
    }
    QUILL_CHECK(false, "no quantizer for {}", t.name);
}

}  // namespace quill
