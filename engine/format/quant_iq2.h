// The 2-bit "i-quant" types IQ2_XXS, IQ2_XS and IQ2_S: block layouts, the sign table and the scalar reference
// dequantizers (engine/format/quant_iq2.cpp), dispatched from dequantize_row. Each 256-element super-block is 32
// grid entries of 8 values: an entry is 8 magnitudes from the type's grid (engine/format/iq2_grids.h: 8, 25 or 43)
// with 8 signs, times d * (0.5 + s) / 4 for a 4-bit scale s (per 32 elements for IQ2_XXS, per 16 for the others).
// There is no quantizer: files of these types come from llama-quantize with an importance matrix.
#pragma once

#include <cstdint>

#include "engine/format/iq2_grids.h"
#include "engine/format/quant.h"

namespace quill {

// 32-element sub-block ib: bytes 8 ib .. 8 ib + 3 of qs are the grid indices of its 4 entries; the 32-bit word at
// 8 ib + 4 holds entry l's 7-bit sign index at bit 7 l and the sub-block's scale in its top 4 bits.
struct BlockIq2Xxs { uint16_t d; uint8_t qs[QK_K / 4]; };
// Entry k: qs[k] = grid index (9 bits) | sign index << 9; sub-block ib's scales: low nibble for entries 4 ib,
// 4 ib + 1 (its first 16 values), high nibble for the next two.
struct BlockIq2Xs { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };
// Entry k: grid index qs[k] | ((qh[k / 4] >> 2 (k % 4)) & 3) << 8 (10 bits), its 8 sign bits signs[k] (no parity
// rule); scales as IQ2_XS.
struct BlockIq2S {
    uint16_t d;
    uint8_t qs[QK_K / 8], signs[QK_K / 8], qh[QK_K / 32], scales[QK_K / 32];
};
static_assert(sizeof(BlockIq2Xxs) == 66 && sizeof(BlockIq2Xs) == 74 && sizeof(BlockIq2S) == 82);

// The 8 signs of a 7-bit sign index (IQ2_XXS, IQ2_XS): bit j negates value j; the eighth is the parity of the seven,
// so that an entry always has an even number of negative values.
constexpr uint8_t iq2_signs(uint32_t index) {
    const uint32_t i = index & 127;
    const uint32_t p4 = i ^ (i >> 4), p2 = p4 ^ (p4 >> 2), parity = (p2 ^ (p2 >> 1)) & 1;
    return static_cast<uint8_t>(i | (parity << 7));
}

// The factor (0.5 + s) / 4 of a 4-bit scale s, as twice an integer over 8: db = d * (2 s + 1) / 8.
constexpr int iq2_scale_odd(uint32_t s) { return 2 * static_cast<int>(s & 15) + 1; }

namespace detail {
void dequantize_iq2_xxs(const void* src, float* dst, int64_t n_blocks);
void dequantize_iq2_xs(const void* src, float* dst, int64_t n_blocks);
void dequantize_iq2_s(const void* src, float* dst, int64_t n_blocks);
}  // namespace detail

}  // namespace quill
