// Random valid blocks of the weight types quill has no quantizer for (the importance types, which need an importance
// matrix and a search): what the synthetic models and the tests fill such matrices with.
#pragma once

#include "engine/format/quant.h"

#include <cstdint>

namespace quill {

// Whether random_blocks makes blocks of `type`.
bool random_blocks_supported(GgmlType type);

// n_blocks random blocks of `type` at out (n_blocks * type_size bytes): every field random but the fp16 scale, set
// so that the values are of magnitude `scale` (about the largest |x| of a block with a middling sub-block scale), as
// uniform random floats in [-scale, scale] would be. The same seed gives the same bytes everywhere. Throws Error
// for a type random_blocks_supported refuses.
void random_blocks(GgmlType type, uint64_t seed, int64_t n_blocks, float scale, uint8_t* out);

}  // namespace quill
