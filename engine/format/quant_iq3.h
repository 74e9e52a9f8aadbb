// The 3-bit "importance" types IQ3_XXS and IQ3_S: their block layouts and the decoding of one 32-element block into
// signed int8 levels and a float scale, shared by the scalar reference dequantizer (quant_iq3.cpp) and the CPU
// kernels. Each group of four elements is one entry of a lattice grid (iq3_grids.h: four unsigned levels, the bytes
// of a 32-bit word), each group of eight elements has a sign byte. No quantizer: these types need an importance
// matrix and a search (llama-quantize makes them).
#pragma once

#include "engine/format/iq3_grids.h"
#include "engine/format/quant.h"

#include <cstdint>

namespace quill {

// 3.0625 bits a value. qs[8 j + k]: the grid index (kIq3XxsGrid) of elements 4 k .. 4 k + 3 of 32-block j;
// scales_signs[4 j ..] as a little-endian 32-bit word: bits 7 l .. 7 l + 6 the signs of elements 8 l .. 8 l + 7
// (iq_sign_byte), bits 28..31 the scale s: x = d * (0.5 + s) * 0.5 * level * sign.
struct BlockIq3Xxs { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t scales_signs[QK_K / 8]; };
// 3.4375 bits a value. Element group k of 32-block j: grid index qs[8 j + k] | bit k of qh[j] << 8 (kIq3SGrid);
// signs[4 j + l]: bit i the sign of element 8 l + i; the 4-bit scale s of 32-block j is nibble j % 2 of
// scales[j / 2] (low first): x = d * (1 + 2 s) * level * sign.
struct BlockIq3S {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
};
static_assert(sizeof(BlockIq3Xxs) == 98 && sizeof(BlockIq3S) == 110);

// The helpers below have internal linkage on purpose (as engine/cpu/kernels.h's): the kernel files of each ISA are
// compiled with their own -m flags, and a copy compiled for AVX-512 must not stand in for the baseline one.
namespace {

// The sign byte of eight elements from the 7 stored bits: bit 7 is set where the seven have odd parity, so that
// every byte has an even number of minus signs (ggml's ksigns_iq2xs).
constexpr uint8_t iq_sign_byte(uint32_t bits7) {
    uint32_t parity = bits7 & 127;
    parity ^= parity >> 4;
    parity ^= parity >> 2;
    parity ^= parity >> 1;
    return static_cast<uint8_t>((bits7 & 127) | ((parity & 1) << 7));
}

// Element i of 32-block j of an IQ3_XXS block is scale * q[i] (q signed, |q| <= 62): the scale's factor of d is
// (0.5 + s) * 0.5, applied in ggml's order: d * (0.5 + s) * 0.5.
inline float iq3_xxs_levels(const BlockIq3Xxs& b, int j, int8_t* q) {
    uint32_t aux = 0;
    for (int k = 0; k < 4; ++k) aux |= static_cast<uint32_t>(b.scales_signs[4 * j + k]) << (8 * k);
    for (int l = 0; l < 4; ++l) {
        const uint8_t signs = iq_sign_byte(aux >> (7 * l));
        for (int g = 0; g < 2; ++g) {
            const uint32_t entry = kIq3XxsGrid[b.qs[8 * j + 2 * l + g]];
            for (int k = 0; k < 4; ++k) {
                const int i = 4 * g + k;
                const auto level = static_cast<int8_t>((entry >> (8 * k)) & 0xFF);
                q[8 * l + i] = (signs >> i) & 1 ? static_cast<int8_t>(-level) : level;
            }
        }
    }
    return fp16_to_fp32(b.d) * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
}

// Element i of 32-block j of an IQ3_S block is scale * q[i] (q signed, |q| <= 15), scale = d * (1 + 2 s).
inline float iq3_s_levels(const BlockIq3S& b, int j, int8_t* q) {
    for (int k = 0; k < 8; ++k) {
        const uint32_t entry = kIq3SGrid[b.qs[8 * j + k] | (((b.qh[j] >> k) & 1) << 8)];
        const uint8_t signs = b.signs[4 * j + k / 2];
        for (int e = 0; e < 4; ++e) {
            const int i = 4 * k + e;
            const auto level = static_cast<int8_t>((entry >> (8 * e)) & 0xFF);
            q[i] = (signs >> (i % 8)) & 1 ? static_cast<int8_t>(-level) : level;
        }
    }
    const int s = (b.scales[j / 2] >> (4 * (j % 2))) & 0xF;
    return fp16_to_fp32(b.d) * static_cast<float>(1 + 2 * s);
}

}  // namespace

}  // namespace quill
