// The 1-bit "importance" types IQ1_S and IQ1_M: their block layouts and the decoding of one 32-element block into
// signed int8 levels and float scales, shared by the scalar reference dequantizers (quant_iq1.cpp) and the CPU
// kernels. Each group of eight elements is one entry of a ternary grid (iq1_grids.h: 2048 entries of eight levels
// -1, 0, 1) moved by a delta of +-1/8: x = dl * (g + delta). No quantizer: these types need an importance matrix and
// a search (llama-quantize makes them).
//
// The kernels multiply 8 (g + delta) = 8 g +- 1 (in -9..9) under the scale dl / 8: the same real numbers as ggml's
// dl * (g + delta), whose products round once in both (dl is d times an odd integer below 16, exact in a float).
#pragma once

#include "engine/format/iq1_grids.h"
#include "engine/format/quant.h"

#include <array>
#include <cstdint>

namespace quill {

// 1.5625 bits a value. Entry l of 32-block j: grid index qs[4 j + l] | bits 3 l .. 3 l + 2 of qh[j] << 8; bits 12..14
// of qh[j] the scale s (dl = d (2 s + 1)), bit 15 the sign of the block's delta (set: -1/8).
struct BlockIq1S { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; };
// 1.75 bits a value. Entry k (0..31): grid index qs[k] | bits 0..2 of nibble k % 2 of qh[k / 2] << 8, bit 3 of that
// nibble the sign of the entry's delta. scales as four little-endian 16-bit words: word j / 2, bits 6 (j % 2) ..
// + 2 the scale s of the first 16 elements of 32-block j, the next three bits the last 16's (dl = d (2 s + 1)); the
// top nibbles of words 0..3 are nibbles 0..3 of the fp16 d (there is no d field).
struct BlockIq1M { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };
static_assert(sizeof(BlockIq1S) == 50 && sizeof(BlockIq1M) == 56);

// The grid as eight 4-bit fields g + 1 (0..2) in a 32-bit word, for the kernels' one 32-bit gather per entry: level
// j (0..3) in nibble 2 j, level 4 + j in nibble 2 j + 1, so that the word's low nibbles are levels 0..3 as bytes and
// its high nibbles levels 4..7.
inline constexpr std::array<uint32_t, 2048> kIq1Grid4 = [] {
    std::array<uint32_t, 2048> t{};
    for (size_t i = 0; i < t.size(); ++i) {
        for (int j = 0; j < 8; ++j) {
            const auto level = static_cast<int8_t>((kIq1Grid[i] >> (8 * j)) & 0xFF);
            t[i] |= static_cast<uint32_t>(level + 1) << (j < 4 ? 8 * j : 8 * (j - 4) + 4);
        }
    }
    return t;
}();

// The helpers below have internal linkage on purpose (as engine/cpu/kernels.h's): the kernel files of each ISA are
// compiled with their own -m flags, and a copy compiled for AVX-512 must not stand in for the baseline one.
namespace {

inline uint16_t iq1_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// The fp16 bits of an IQ1_M block's d, from the top nibbles of its scale words.
inline uint16_t iq1_m_d(const BlockIq1M& b) {
    uint32_t d = 0;
    for (int w = 0; w < 4; ++w) d |= static_cast<uint32_t>(iq1_u16(b.scales + 2 * w) >> 12) << (4 * w);
    return static_cast<uint16_t>(d);
}

// The 3-bit scale of half h (0, 1) of 32-block j of an IQ1_M block.
inline int iq1_m_scale(const BlockIq1M& b, int j, int h) {
    return (iq1_u16(b.scales + 2 * (j / 2)) >> (6 * (j % 2) + 3 * h)) & 7;
}

// The eight values 8 g + (minus ? -1 : 1) of grid entry `index` at q.
inline void iq1_entry(uint32_t index, bool minus, int8_t* q) {
    const uint64_t e = kIq1Grid[index & 2047];
    for (int i = 0; i < 8; ++i)
        q[i] = static_cast<int8_t>(8 * static_cast<int8_t>((e >> (8 * i)) & 0xFF) + (minus ? -1 : 1));
}

// Element i of 32-block j of an IQ1_S block is scale * q[i] (|q| <= 9): scale = d (2 s + 1) / 8.
inline float iq1_s_levels(const BlockIq1S& b, int j, int8_t* q) {
    const uint32_t qh = b.qh[j];
    for (int l = 0; l < 4; ++l) iq1_entry(b.qs[4 * j + l] | (((qh >> (3 * l)) & 7) << 8), (qh & 0x8000) != 0, q + 8 * l);
    return fp16_to_fp32(b.d) * static_cast<float>(2 * ((qh >> 12) & 7) + 1) * 0.125f;
}

// Element i of 32-block j of an IQ1_M block is ws[i / 16] * q[i] (|q| <= 9): ws[h] = d (2 s_h + 1) / 8.
inline void iq1_m_levels(const BlockIq1M& b, int j, int8_t* q, float* ws) {
    for (int l = 0; l < 4; ++l) {
        const int k = 4 * j + l;
        const uint32_t h = b.qh[k / 2] >> (4 * (k % 2));
        iq1_entry(b.qs[k] | ((h & 7) << 8), (h & 8) != 0, q + 8 * l);
    }
    const float d = fp16_to_fp32(iq1_m_d(b));
    for (int h = 0; h < 2; ++h) ws[h] = d * static_cast<float>(2 * iq1_m_scale(b, j, h) + 1) * 0.125f;
}

}  // namespace

namespace detail {
void dequantize_iq1_s(const void* src, float* dst, int64_t n_blocks);
void dequantize_iq1_m(const void* src, float* dst, int64_t n_blocks);
}  // namespace detail

}  // namespace quill
