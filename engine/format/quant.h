// Tensor element types of GGUF (ggml's type ids), their block layouts, and the scalar reference dequantizers and
// quantizers. Everything fast (SIMD, CUDA) is tested against the functions here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace quill {

// ggml type ids as stored in GGUF tensor infos. Gaps are ids ggml has retired.
enum class GgmlType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct TypeTraits {
    GgmlType type;
    const char* name;     // ggml's name: "q4_0", "f16", "q4_K"
    int64_t block_size;   // elements per block
    size_t type_size;     // bytes per block
    bool can_dequantize;  // dequantize_row supports it (and so the engine can compute with it)
    bool can_quantize;    // quantize_row supports it
};

// Traits of a type id read from a file; nullptr when the id is not a ggml type.
const TypeTraits* find_type_traits(uint32_t id);
const TypeTraits& type_traits(GgmlType type);
std::string_view type_name(GgmlType type);
// Parses "q4_0", "Q4_0", "f16", "q4_k"...; nullopt when unknown.
std::optional<GgmlType> type_from_name(std::string_view name);
// Bytes of a row of n elements; n must be a multiple of the block size.
size_t row_size(GgmlType type, int64_t n);

// Scalar reference conversions (bit-exact, round to nearest even; NaN stays NaN).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

// dst[0..n) = the values encoded by the blocks at src. n is a multiple of the block size.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
// Encodes src[0..n) into blocks at dst (row_size(type, n) bytes), as ggml's reference quantizer does.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

// ---- block layouts (little-endian, packed as in ggml; fp16 fields are raw IEEE half bits) ----
constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32, QK_K = 256;
constexpr int QK4_NL = 32, QK_MXFP4 = 32;
constexpr int K_SCALE_SIZE = 12;

struct BlockQ4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };                 // x = (q - 8) * d; low nibbles first
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[QK4_1 / 2]; };              // x = q * d + m
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };  // x = (q - 16) * d; bit 4 in qh
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[QK8_0]; };                      // x = q * d
struct BlockQ8_1 { uint16_t d, s; int8_t qs[QK8_1]; };                   // s = d * sum(q)
struct BlockQ2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
// Non-linear 4-bit: each nibble indexes kIq4nlValues (IQ4_NL, IQ4_XS) or kMxfp4Values (MXFP4); element j and j + 16
// of each 32 share byte j (low nibble, high nibble) as in Q4_0.
struct BlockIq4Nl { uint16_t d; uint8_t qs[QK4_NL / 2]; };  // x = d * kIq4nlValues[q]
// x = d * (ls - 32) * kIq4nlValues[q]; the 6-bit ls of 32-element sub-block j is nibble j of scales_l (low first)
// with bits 2j, 2j+1 of scales_h above it.
struct BlockIq4Xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
struct BlockMxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };  // x = 2^(e - 128) * kMxfp4Values[q] (E8M0 scale, halved)

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIq4Nl) == 18 && sizeof(BlockIq4Xs) == 136 && sizeof(BlockMxfp4) == 17);

// The 16 levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl), ascending.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// The 16 E2M1 values of MXFP4, doubled so they are integers (ggml's kvalues_mxfp4): code 8..15 is 0..7 negated.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The scale of an MXFP4 block: 2^(e - 127) halved (the values above are doubled), as ggml's e8m0_to_fp32_half.
inline float mxfp4_scale(uint8_t e) {
    const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

// The 6-bit scale (0..63, 32 means zero) of 32-element sub-block j (0..7) of an IQ4_XS block.
inline int iq4_xs_scale(const BlockIq4Xs& b, int j) {
    return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

}  // namespace quill
