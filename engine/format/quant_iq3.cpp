// The scalar reference dequantizers of IQ3_XXS and IQ3_S (layouts in quant_iq3.h): each value is the block's
// scale times a signed grid level, one float multiply, as ggml's to_float computes it.
#include "engine/format/quant_iq3.h"

#include "engine/format/quant_k.h"

namespace quill::detail {

namespace {

template <typename Block, float (*levels)(const Block&, int, int8_t*)>
void dequantize_grid_blocks(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i) {
        const auto b = load_block<Block>(src, i);
        for (int j = 0; j < QK_K / 32; ++j, y += 32) {
            int8_t q[32];
            const float scale = levels(b, j, q);
            for (int k = 0; k < 32; ++k) y[k] = scale * static_cast<float>(q[k]);
        }
    }
}

}  // namespace

void dequantize_iq3_xxs(const void* src, float* y, int64_t n_blocks) {
    dequantize_grid_blocks<BlockIq3Xxs, iq3_xxs_levels>(src, y, n_blocks);
}

void dequantize_iq3_s(const void* src, float* y, int64_t n_blocks) {
    dequantize_grid_blocks<BlockIq3S, iq3_s_levels>(src, y, n_blocks);
}

}  // namespace quill::detail
