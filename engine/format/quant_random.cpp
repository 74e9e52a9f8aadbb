// random_blocks: valid blocks of the types without a quantizer, drawn field by field.
#include "engine/format/quant_random.h"

#include "engine/error.h"
#include "engine/format/quant_iq1.h"
#include "engine/format/quant_iq2.h"
#include "engine/format/quant_k.h"
#include "engine/rng.h"

#include <cstring>

namespace quill {

namespace {

// The IQ2 types' values are d (0.5 + s) / 4 g with a grid magnitude g (RMS about 29 over the grids) and s uniform in
// 0..15 (RMS of (0.5 + s) / 4 about 2.31): RMS about 67 d, against scale / sqrt(3) for uniform floats.
constexpr float kIq2DPerScale = 1.0f / 116.0f;

// The IQ1 types' values are d (2 s + 1) (g + delta) with g in -1, 0, 1 (RMS of g + delta about 0.78 over the grid)
// and s uniform in 0..7 (RMS of 2 s + 1 about 9.2): RMS about 7.2 d, against scale / sqrt(3) for uniform floats.
constexpr float kIq1DPerScale = 1.0f / 12.5f;

uint16_t random_d(Rng& rng, float scale, float d_per_scale) {
    return fp32_to_fp16(scale * d_per_scale * static_cast<float>(0.75 + 0.5 * rng.uniform()));
}

uint8_t random_byte(Rng& rng) { return static_cast<uint8_t>(rng.next() >> 56); }

// Random bytes over the whole block, then its fp16 d replaced: d = scale / divisor, where divisor is the block's
// largest level times the middle of its sub-block scale range.
void fill_random(Rng& rng, uint8_t* block, size_t bytes, float d) {
    for (size_t i = 0; i < bytes; ++i) block[i] = random_byte(rng);
    const uint16_t h = fp32_to_fp16(d);
    std::memcpy(block, &h, sizeof(h));  // (d leads every block random_blocks makes)
}

BlockIq2Xxs random_iq2_xxs(Rng& rng, float scale) {
    BlockIq2Xxs b{};
    b.d = random_d(rng, scale, kIq2DPerScale);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
        const auto high = static_cast<uint32_t>(rng.next() >> 32);  // 4 sign indices of 7 bits and the scale
        for (int l = 0; l < 4; ++l) b.qs[8 * ib + l] = random_byte(rng);
        std::memcpy(b.qs + 8 * ib + 4, &high, sizeof(high));
    }
    return b;
}

BlockIq2Xs random_iq2_xs(Rng& rng, float scale) {
    BlockIq2Xs b{};
    b.d = random_d(rng, scale, kIq2DPerScale);
    for (uint16_t& q : b.qs) q = static_cast<uint16_t>(rng.next() >> 48);  // grid index and sign index: any bits
    for (uint8_t& s : b.scales) s = random_byte(rng);
    return b;
}

BlockIq2S random_iq2_s(Rng& rng, float scale) {
    BlockIq2S b{};
    b.d = random_d(rng, scale, kIq2DPerScale);
    for (uint8_t& q : b.qs) q = random_byte(rng);
    for (uint8_t& s : b.signs) s = random_byte(rng);
    for (uint8_t& h : b.qh) h = random_byte(rng);
    for (uint8_t& s : b.scales) s = random_byte(rng);
    return b;
}

// Random bytes, then the fp16 d in the top nibbles of the four scale words (IQ1_M has no d field).
BlockIq1M random_iq1_m(Rng& rng, float scale) {
    BlockIq1M b{};
    for (uint8_t& q : b.qs) q = random_byte(rng);
    for (uint8_t& h : b.qh) h = random_byte(rng);
    for (uint8_t& s : b.scales) s = random_byte(rng);
    const uint16_t d = random_d(rng, scale, kIq1DPerScale);
    for (int w = 0; w < 4; ++w) {  // (the top nibble of word w is the high nibble of its second byte)
        const auto nibble = static_cast<uint8_t>(((d >> (4 * w)) & 0xF) << 4);
        b.scales[2 * w + 1] = static_cast<uint8_t>((b.scales[2 * w + 1] & 0x0F) | nibble);
    }
    return b;
}

}  // namespace

bool random_blocks_supported(GgmlType type) {
    switch (type) {
        case GgmlType::IQ2_XXS:
        case GgmlType::IQ2_XS:
        case GgmlType::IQ2_S:
        case GgmlType::IQ3_XXS:
        case GgmlType::IQ3_S:
        case GgmlType::IQ1_S:
        case GgmlType::IQ1_M:
            return true;
        default:
            return false;
    }
}

void random_blocks(GgmlType type, uint64_t seed, int64_t n_blocks, float scale, uint8_t* out) {
    QUILL_CHECK(random_blocks_supported(type), "random_blocks: no random blocks of {}", type_name(type));
    Rng rng(seed);
    if (type == GgmlType::IQ3_XXS || type == GgmlType::IQ3_S) {
        const size_t bytes = type_traits(type).type_size;
        // IQ3_XXS: levels up to 62, scale factor (0.5 + s) / 2 of 0.25 .. 7.75 (middle 4); IQ3_S: levels up to 15,
        // factor 1 + 2 s of 1 .. 31 (middle 16).
        const float divisor = type == GgmlType::IQ3_XXS ? 62.0f * 4.0f : 15.0f * 16.0f;
        for (int64_t i = 0; i < n_blocks; ++i)
            fill_random(rng, out + static_cast<size_t>(i) * bytes, bytes, scale / divisor);
        return;
    }
    if (type == GgmlType::IQ1_S) {
        for (int64_t i = 0; i < n_blocks; ++i)
            fill_random(rng, out + static_cast<size_t>(i) * sizeof(BlockIq1S), sizeof(BlockIq1S),
                        fp16_to_fp32(random_d(rng, scale, kIq1DPerScale)));
        return;
    }
    for (int64_t i = 0; i < n_blocks; ++i) {
        switch (type) {
            case GgmlType::IQ2_XXS: detail::store_block(out, i, random_iq2_xxs(rng, scale)); break;
            case GgmlType::IQ2_XS: detail::store_block(out, i, random_iq2_xs(rng, scale)); break;
            case GgmlType::IQ2_S: detail::store_block(out, i, random_iq2_s(rng, scale)); break;
            case GgmlType::IQ1_M: detail::store_block(out, i, random_iq1_m(rng, scale)); break;
            default: break;
        }
    }
}

}  // namespace quill
