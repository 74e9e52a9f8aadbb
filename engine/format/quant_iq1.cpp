// The scalar reference dequantizers of IQ1_S and IQ1_M (layouts in quant_iq1.h). Each computes
// y = (d * (2 s + 1)) * (g + delta) in that order, as ggml's dequantize_row_iq1_* do, so the floats are ggml's bit for
// bit (tests/data/quant/iq1_*.txt).
#include "engine/format/quant_iq1.h"

#include "engine/format/quant_k.h"

namespace quill::detail {

namespace {

// The 8 values of grid entry `index` moved by delta, times dl.
void put_entry(uint32_t index, float delta, float dl, float* y) {
    const uint64_t e = kIq1Grid[index & 2047];
    for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(static_cast<int8_t>((e >> (8 * j)) & 0xFF)) + delta);
}

constexpr float kDelta = 0.125f;

}  // namespace

void dequantize_iq1_s(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i) {
        const auto b = load_block<BlockIq1S>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const uint32_t qh = b.qh[ib];
            const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -kDelta : kDelta;
            for (int l = 0; l < 4; ++l, y += 8) put_entry(b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8), delta, dl, y);
        }
    }
}

void dequantize_iq1_m(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i) {
        const auto b = load_block<BlockIq1M>(src, i);
        const float d = fp16_to_fp32(iq1_m_d(b));
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            for (int l = 0; l < 4; ++l, y += 8) {
                const int k = 4 * ib + l;
                const uint32_t h = b.qh[k / 2] >> (4 * (k % 2));
                const float dl = d * static_cast<float>(2 * iq1_m_scale(b, ib, l / 2) + 1);
                put_entry(b.qs[k] | ((h & 7) << 8), h & 8 ? -kDelta : kDelta, dl, y);
            }
        }
    }
}

}  // namespace quill::detail
