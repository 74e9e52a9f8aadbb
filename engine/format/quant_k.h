// Internal to engine/quant*.cpp: the scalar reference codecs of the super-block ("k") types, implemented in
// engine/format/quant_k.cpp, and of the non-linear 4-bit types (engine/format/quant_nl.cpp), dispatched from
// dequantize_row / quantize_row in engine/format/quant.cpp.
#pragma once

#include <cstdint>
#include <cstring>

namespace quill::detail {

// Block i of a packed row, copied out (the row may be at any alignment; copying keeps the aliasing rules).
template <typename Block>
Block load_block(const void* src, int64_t i) {
    Block b;
    std::memcpy(&b, static_cast<const uint8_t*>(src) + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    return b;
}

template <typename Block>
void store_block(void* dst, int64_t i, const Block& b) {
    std::memcpy(static_cast<uint8_t*>(dst) + i * static_cast<int64_t>(sizeof(Block)), &b, sizeof(Block));
}

// Each takes n_blocks whole blocks: src/dst floats are [n_blocks, QK_K].
void dequantize_q2_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q3_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q4_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q6_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q8_k(const void* src, float* dst, int64_t n_blocks);

void quantize_q2_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q3_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q4_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q5_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q6_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q8_k(const float* src, void* dst, int64_t n_blocks);

// The non-linear 4-bit types, in engine/format/quant_nl.cpp (IQ4_XS blocks are QK_K elements, the others 32).
void dequantize_iq4_nl(const void* src, float* dst, int64_t n_blocks);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n_blocks);
void dequantize_mxfp4(const void* src, float* dst, int64_t n_blocks);
void quantize_iq4_nl(const float* src, void* dst, int64_t n_blocks);
void quantize_iq4_xs(const float* src, void* dst, int64_t n_blocks);
void quantize_mxfp4(const float* src, void* dst, int64_t n_blocks);

// The 3-bit grid types, in engine/format/quant_iq3.cpp (dequantization only).
void dequantize_iq3_xxs(const void* src, float* dst, int64_t n_blocks);
void dequantize_iq3_s(const void* src, float* dst, int64_t n_blocks);

}  // namespace quill::detail
