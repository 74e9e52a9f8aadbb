// The scalar reference dequantizers of IQ2_XXS, IQ2_XS and IQ2_S (layouts in quant_iq2.h). Each computes
// y = (d * (0.5 + s) * 0.25) * grid_j * (+-1) in that order, as ggml's dequantize_row_iq2_* do, so the floats are
// ggml's bit for bit (tests/data/quant/iq2_*.txt).
#include "engine/format/quant_iq2.h"

#include "engine/format/quant_k.h"

#include <cstring>

namespace quill::detail {

namespace {

// The 8 values of a grid entry times db, with the signs of `signs` (bit j negates value j).
void put_entry(uint64_t grid, uint8_t signs, float db, float* y) {
    for (int j = 0; j < 8; ++j) {
        const auto g = static_cast<float>((grid >> (8 * j)) & 0xFF);
        y[j] = db * g * ((signs >> j) & 1 ? -1.0f : 1.0f);
    }
}

// d * (0.5 + s) * 0.25, the float steps of ggml.
float sub_scale(float d, uint32_t s) { return d * (0.5f + static_cast<float>(s)) * 0.25f; }

}  // namespace

void dequantize_iq2_xxs(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i) {
        const auto b = load_block<BlockIq2Xxs>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            uint32_t high;  // 4 sign indices of 7 bits, then the scale
            std::memcpy(&high, b.qs + 8 * ib + 4, sizeof(high));
            const float db = sub_scale(d, high >> 28);
            for (int l = 0; l < 4; ++l, y += 8) {
                put_entry(kIq2XxsGrid[b.qs[8 * ib + l]], iq2_signs(high >> (7 * l)), db, y);
            }
        }
    }
}

void dequantize_iq2_xs(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i) {
        const auto b = load_block<BlockIq2Xs>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int k = 0; k < QK_K / 8; ++k, y += 8) {
            const float db = sub_scale(d, (b.scales[k / 4] >> (4 * ((k / 2) % 2))) & 0xF);
            put_entry(kIq2XsGrid[b.qs[k] & 511], iq2_signs(b.qs[k] >> 9), db, y);
        }
    }
}

void dequantize_iq2_s(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i) {
        const auto b = load_block<BlockIq2S>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int k = 0; k < QK_K / 8; ++k, y += 8) {
            const float db = sub_scale(d, (b.scales[k / 4] >> (4 * ((k / 2) % 2))) & 0xF);
            const uint32_t index = b.qs[k] | (((b.qh[k / 4] >> (2 * (k % 4))) & 3u) << 8);
            put_entry(kIq2SGrid[index], b.signs[k], db, y);
        }
    }
}

}  // namespace quill::detail
