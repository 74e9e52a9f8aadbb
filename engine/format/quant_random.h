// Random valid blocks of the weight types quill reads but cannot quantize (they need an importance matrix and a
// search): what `bench --synthetic --dtype` and the tests' tiny models fill such tensors with.
#pragma once

#include <cstdint>

#include "engine/format/quant.h"

namespace quill {

// Whether random_blocks makes blocks of `type`.
bool random_blocks_supported(GgmlType type);
// n_blocks random blocks of `type` at out (n_blocks * type size bytes), the same for the same seed: every field drawn
// uniformly (grid indices, signs, sub-block scales) under a positive fp16 d chosen so that the values' RMS is about
// that of floats uniform in [-scale, scale]. Throws Error for a type random_blocks_supported refuses.
void random_blocks(GgmlType type, uint64_t seed, int64_t n_blocks, float scale, uint8_t* out);

}  // namespace quill
