// Decoding GGUF weight blocks, 32 elements at a time, in code that compiles both for the GPU (nvcc) and for the
// host (any C++ compiler). The CUDA kernels decode with these functions; the CPU tests compile the same functions
// for the host and compare them, bit for bit, with the reference dequantizers of engine/format/quant.h, so the
// block arithmetic the GPU runs is checked even on machines without one.
//
// Every field is read byte by byte (little-endian): the blocks of a row are packed (18, 20, 22, 34, 210 bytes...),
// so no field is assumed aligned.
#pragma once

#include "engine/format/quant.h"

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define QUILL_HD __host__ __device__ __forceinline__
#define QUILL_HD_CONSTEXPR __host__ __device__ constexpr
#else
#define QUILL_HD inline
#define QUILL_HD_CONSTEXPR constexpr
#endif

namespace quill::cuda {

QUILL_HD uint32_t load_u16(const uint8_t* p) { return uint32_t{p[0]} | (uint32_t{p[1]} << 8); }

QUILL_HD uint32_t load_u32(const uint8_t* p) {
    return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

QUILL_HD float half_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
#else
    return fp16_to_fp32(static_cast<uint16_t>(bits));
#endif
}

QUILL_HD float float_of_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
#endif
}

QUILL_HD float bf16_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits << 16);
#else
    return bf16_to_fp32(static_cast<uint16_t>(bits));
#endif
}

// Whether decode_group32 handles this type as blocks (32 or 256 elements) rather than as plain floats.
QUILL_HD_CONSTEXPR bool is_block_type(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16; }

// The weight types the CUDA backend multiplies.
QUILL_HD_CONSTEXPR bool cuda_supports(GgmlType t) {
    switch (t) {
        case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
        case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
        case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
        case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: case GgmlType::MXFP4:
            return true;
        default:
            return false;
    }
}

// One plain-float element e of a row (F32, F16, BF16 only).
template <GgmlType T>
QUILL_HD float decode_element(const uint8_t* row, int64_t e) {
    if constexpr (T == GgmlType::F32) {
        return float_of_bits(load_u32(row + 4 * e));
    } else if constexpr (T == GgmlType::F16) {
        return half_to_float(load_u16(row + 2 * e));
    } else {
        static_assert(T == GgmlType::BF16, "decode_element is for the plain float types");
        return bf16_to_float(load_u16(row + 2 * e));
    }
}

// ---- The packed layout of Q4_0, Q4_1 and Q8_0 matrices on the device ----
// A GGUF block puts its scales before its quants (18, 20 and 34 bytes a block), so most fields are only 2-byte
// aligned and a lane decoding a block issues byte or halfword loads. At upload the CUDA backend splits such a matrix
// into two planes: every block's quants in order (16 or 32 bytes a block, so 16-byte aligned: one or two 16-byte
// loads a block, and a warp's lanes read consecutive blocks), then every block's scales (2 or 4 bytes). The planes
// add up to the GGUF size.

// Quant bytes of a block in the packed layout; 0 for a type that is not packed.
QUILL_HD_CONSTEXPR int packed_quant_bytes(GgmlType t) {
    return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 ? 16 : t == GgmlType::Q8_0 ? 32 : 0;
}
// Scale bytes of a block in the packed layout: d (Q4_0, Q8_0), or d and m (Q4_1), fp16.
QUILL_HD_CONSTEXPR int packed_scale_bytes(GgmlType t) { return t == GgmlType::Q4_1 ? 4 : 2; }

// Blocks [0, n) of GGUF data `src` (one type, rows back to back) to the two planes: quants[i * packed_quant_bytes]
// and scales[i * packed_scale_bytes] for block i.
inline void pack_blocks(GgmlType t, const uint8_t* src, int64_t n, uint8_t* quants, uint8_t* scales) {
    const int qb = packed_quant_bytes(t), sb = packed_scale_bytes(t), bb = qb + sb;
    for (int64_t i = 0; i < n; ++i) {
        for (int j = 0; j < sb; ++j) scales[i * sb + j] = src[i * bb + j];
        for (int j = 0; j < qb; ++j) quants[i * qb + j] = src[i * bb + sb + j];
    }
}

// out[0..32) = the block with quants q and scales s (either layout: in GGUF s is the block and q follows it).
template <GgmlType T>
QUILL_HD void decode_packed32(const uint8_t* q, const uint8_t* s, float* out) {
    if constexpr (T == GgmlType::Q4_0) {  // x = (q - 8) d, low nibbles are elements 0..15
        const float d = half_to_float(load_u16(s));
        for (int j = 0; j < 16; ++j) {
            out[j] = static_cast<float>((q[j] & 0xF) - 8) * d;
            out[j + 16] = static_cast<float>((q[j] >> 4) - 8) * d;
        }
    } else if constexpr (T == GgmlType::Q4_1) {  // x = q d + m
        const float d = half_to_float(load_u16(s)), m = half_to_float(load_u16(s + 2));
        for (int j = 0; j < 16; ++j) {
            out[j] = static_cast<float>(q[j] & 0xF) * d + m;
            out[j + 16] = static_cast<float>(q[j] >> 4) * d + m;
        }
    } else {
        static_assert(T == GgmlType::Q8_0, "packed types: Q4_0, Q4_1, Q8_0");  // x = q d, int8 quants
        const float d = half_to_float(load_u16(s));
        for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<int8_t>(q[j])) * d;
    }
}

// Whether the CUDA backend multiplies this type with int8 dot products against activations quantized to int8 per
// block of 32 (matmul_q8), as the CPU backend's kernels do.
QUILL_HD_CONSTEXPR bool uses_q8(GgmlType t) { return packed_quant_bytes(t) > 0; }

// Level i (0..15) of IQ4_NL / IQ4_XS and of MXFP4 (kIq4nlValues, kMxfp4Values: a local copy, which device code
// can index).
QUILL_HD int iq4nl_value(int i) {
    const int8_t v[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    return v[i];
}
QUILL_HD int mxfp4_value(int i) {
    const int8_t v[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    return v[i];
}

// MXFP4's E8M0 scale byte as mxfp4_scale: 2^(e - 128) (the levels are doubled), subnormal below e = 2.
QUILL_HD float mxfp4_scale_of(uint32_t e) {
    return float_of_bits(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
}

// out[0..32) = elements [32 g, 32 g + 32) of a row of a block type.
template <GgmlType T>
QUILL_HD void decode_group32(const uint8_t* row, int64_t g, float* out) {
    if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1) {
        const uint8_t* b = row + g * (T == GgmlType::Q4_0 ? 18 : 20);  // the scales, then the quants
        decode_packed32<T>(b + packed_scale_bytes(T), b, out);
    } else if constexpr (T == GgmlType::Q5_0) {
        const uint8_t* b = row + g * 22;  // d, qh[4], qs[16]: x = (q - 16) d, bit 4 of element j is bit j of qh
        const float d = half_to_float(load_u16(b));
        const uint32_t qh = load_u32(b + 2);
        for (int j = 0; j < 16; ++j) {
            const int lo = (b[6 + j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
            const int hi = (b[6 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
            out[j] = static_cast<float>(lo - 16) * d;
            out[j + 16] = static_cast<float>(hi - 16) * d;
        }
    } else if constexpr (T == GgmlType::Q5_1) {
        const uint8_t* b = row + g * 24;  // d, m, qh[4], qs[16]: x = q d + m
        const float d = half_to_float(load_u16(b)), m = half_to_float(load_u16(b + 2));
        const uint32_t qh = load_u32(b + 4);
        for (int j = 0; j < 16; ++j) {
            const int lo = (b[8 + j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
            const int hi = (b[8 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
            out[j] = static_cast<float>(lo) * d + m;
            out[j + 16] = static_cast<float>(hi) * d + m;
        }
    } else if constexpr (T == GgmlType::Q8_0) {
        const uint8_t* b = row + g * 34;
        decode_packed32<T>(b + 2, b, out);
    } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
        // d, dmin, scales[12], (Q5_K: qh[32]), qs[128]. Sub-block j (32 elements) has a 6-bit scale and min;
        // sub-blocks 2k and 2k+1 share qs bytes [32k, 32k + 32), low nibbles then high nibbles.
        constexpr bool five = T == GgmlType::Q5_K;
        const uint8_t* b = row + (g / 8) * (five ? 176 : 144);
        const int j = static_cast<int>(g % 8);
        const float d = half_to_float(load_u16(b)), dmin = half_to_float(load_u16(b + 2));
        const uint8_t* scales = b + 4;
        int sc, m;
        if (j < 4) {
            sc = scales[j] & 63;
            m = scales[j + 4] & 63;
        } else {
            sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
            m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
        }
        const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
        const uint8_t* qh = b + 16;
        const uint8_t* q = b + (five ? 48 : 16) + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int l = 0; l < 32; ++l) {
            int v = (q[l] >> shift) & 0xF;
            if constexpr (five) v += ((qh[l] >> j) & 1) << 4;
            out[l] = dl * static_cast<float>(v) - ml;
        }
    } else if constexpr (T == GgmlType::Q6_K) {
        // ql[128], qh[64], scales[16] (int8), d. Element e of the block: half = e / 128, r = e % 128; the low 4
        // bits are nibble r / 64 of ql[64 half + r % 64], the high 2 bits are pair r / 32 of qh[32 half + r % 32].
        const uint8_t* b = row + (g / 8) * 210;
        const int j = static_cast<int>(g % 8);
        const int half = j / 4, quarter = j % 4;  // elements 32 j + l: r = 32 quarter + l
        const float d = half_to_float(load_u16(b + 208));
        const uint8_t* ql = b + 64 * half + 32 * (quarter % 2);
        const uint8_t* qh = b + 128 + 32 * half;
        const int lshift = 4 * (quarter / 2), hshift = 2 * quarter;
        const float s0 = d * static_cast<float>(static_cast<int8_t>(b[192 + 2 * j]));
        const float s1 = d * static_cast<float>(static_cast<int8_t>(b[192 + 2 * j + 1]));
        for (int l = 0; l < 32; ++l) {
            const int q = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
            out[l] = (l < 16 ? s0 : s1) * static_cast<float>(q);
        }
    } else if constexpr (T == GgmlType::Q3_K) {
        // hmask[32], qs[64], scales[12], d. 32-block j lies in the 128-element half j / 4: element l has its two low
        // bits in qs[32 half + l] at bit 2 (j % 4) and its high bit in hmask[l] at bit j; x = d sc (q - 4 + 4 high)
        // with a signed 6-bit scale per 16 (low nibble in scales[0..8), top two bits in scales[8 + i % 4]).
        const uint8_t* b = row + (g / 8) * 110;
        const int j = static_cast<int>(g % 8), half = j / 4, shift = 2 * (j % 4);
        const float d = half_to_float(load_u16(b + 108));
        const uint8_t* scales = b + 96;
        float s[2];
        for (int h = 0; h < 2; ++h) {
            const int i = 2 * j + h;
            const int low = i < 8 ? (scales[i] & 0xF) : (scales[i - 8] >> 4);
            const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
            s[h] = d * static_cast<float>((low | (high << 4)) - 32);
        }
        for (int l = 0; l < 32; ++l) {
            const int q = ((b[32 + 32 * half + l] >> shift) & 3) - (((b[l] >> j) & 1) ? 0 : 4);
            out[l] = s[l / 16] * static_cast<float>(q);
        }
    } else if constexpr (T == GgmlType::Q2_K) {
        // scales[16] (low nibble the scale, high the min), qs[64], d, dmin. Element l of 32-block j: two bits of
        // qs[32 (j / 4) + l] at bit 2 (j % 4); x = d sc q - dmin m per 16 elements.
        const uint8_t* b = row + (g / 8) * 84;
        const int j = static_cast<int>(g % 8), half = j / 4, shift = 2 * (j % 4);
        const float d = half_to_float(load_u16(b + 80)), dmin = half_to_float(load_u16(b + 82));
        for (int l = 0; l < 32; ++l) {
            const uint8_t sc = b[2 * j + l / 16];
            const float dl = d * static_cast<float>(sc & 0xF);
            const float ml = dmin * static_cast<float>(sc >> 4);
            out[l] = dl * static_cast<float>((b[16 + 32 * half + l] >> shift) & 3) - ml;
        }
    } else if constexpr (T == GgmlType::IQ4_NL || T == GgmlType::MXFP4) {
        // d (fp16) or e (E8M0), then qs[16]: element j is a level of the low nibble of qs[j], j + 16 of its high one.
        constexpr bool nl = T == GgmlType::IQ4_NL;
        const uint8_t* b = row + g * (nl ? 18 : 17);
        const float d = nl ? half_to_float(load_u16(b)) : mxfp4_scale_of(b[0]);
        const uint8_t* q = b + (nl ? 2 : 1);
        for (int j = 0; j < 16; ++j) {
            if constexpr (nl) {
                out[j] = d * static_cast<float>(iq4nl_value(q[j] & 0xF));
                out[j + 16] = d * static_cast<float>(iq4nl_value(q[j] >> 4));
            } else {
                out[j] = static_cast<float>(mxfp4_value(q[j] & 0xF)) * d;
                out[j + 16] = static_cast<float>(mxfp4_value(q[j] >> 4)) * d;
            }
        }
    } else if constexpr (T == GgmlType::IQ4_XS) {
        // d, scales_h (16 bits), scales_l[4], qs[128]: 32-block j has scale d (ls - 32), ls = nibble j of scales_l
        // with bits 2j, 2j + 1 of scales_h above it, and its levels in qs[16 j .. + 16) as IQ4_NL's.
        const uint8_t* b = row + (g / 8) * 136;
        const int j = static_cast<int>(g % 8);
        const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((load_u16(b + 2) >> (2 * j)) & 3) << 4);
        const float dl = half_to_float(load_u16(b)) * static_cast<float>(ls - 32);
        const uint8_t* q = b + 8 + 16 * j;
        for (int l = 0; l < 16; ++l) {
            out[l] = dl * static_cast<float>(iq4nl_value(q[l] & 0xF));
            out[l + 16] = dl * static_cast<float>(iq4nl_value(q[l] >> 4));
        }
    } else {
        static_assert(is_block_type(T) && !is_block_type(T), "no decoder for this type");
    }
}

}  // namespace quill::cuda
