#include "engine/format/quant_random.h"

#include "engine/error.h"
#include "engine/rng.h"

#include <cstring>

namespace quill {

namespace {

// Random bytes over the whole block, then its fp16 d replaced: d = scale / divisor, where divisor is the block's
// largest level times the middle of its sub-block scale range.
void fill_random(Rng& rng, uint8_t* block, size_t bytes, float d) {
    for (size_t i = 0; i < bytes; ++i) block[i] = static_cast<uint8_t>(rng.next() >> 56);
    const uint16_t h = fp32_to_fp16(d);
    std::memcpy(block, &h, sizeof(h));  // (d leads every block random_blocks makes)
}

}  // namespace

bool random_blocks_supported(GgmlType type) { return type == GgmlType::IQ3_XXS || type == GgmlType::IQ3_S; }

void random_blocks(GgmlType type, uint64_t seed, int64_t n_blocks, float scale, uint8_t* out) {
    QUILL_CHECK(random_blocks_supported(type), "no random blocks of {}", type_name(type));
    Rng rng(seed);
    const size_t bytes = type_traits(type).type_size;
    // IQ3_XXS: levels up to 62, scale factor (0.5 + s) / 2 of 0.25 .. 7.75 (middle 4); IQ3_S: levels up to 15,
    // factor 1 + 2 s of 1 .. 31 (middle 16).
    const float divisor = type == GgmlType::IQ3_XXS ? 62.0f * 4.0f : 15.0f * 16.0f;
    for (int64_t i = 0; i < n_blocks; ++i)
        fill_random(rng, out + static_cast<size_t>(i) * bytes, bytes, scale / divisor);
}

}  // namespace quill
