// Random valid blocks of the weight types quill reads but cannot quantize (the importance types, which need an
// importance matrix and a search): what `bench --synthetic --dtype` and the tests' tiny models fill such tensors with.
#pragma once

#include "engine/format/quant.h"

#include <cstdint>

namespace quill {

// Whether random_blocks makes blocks of `type`.
bool random_blocks_supported(GgmlType type);

// n_blocks random blocks of `type` at out (n_blocks * type_size bytes), the same for the same seed: every field
// random (grid indices, signs, sub-block scales) under a positive fp16 d chosen so that the values are of the
// magnitude uniform random floats in [-scale, scale] have (IQ3: about the largest |x| of a block with a middling
// sub-block scale; IQ2, IQ1: about their RMS). Throws Error for a type random_blocks_supported refuses.
void random_blocks(GgmlType type, uint64_t seed, int64_t n_blocks, float scale, uint8_t* out);

}  // namespace quill
