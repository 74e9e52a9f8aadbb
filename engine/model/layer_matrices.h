// The weight matrices of a layer: the one list of them that packing, the backends' checks and uploads, and the
// benchmark's byte and flop counts go through.
#pragma once

#include "engine/model/weights.h"

#include <array>

namespace quill {

// L's matrices in the order the forward reads them: wq, wk, wv, wo, ffn_gate, ffn_up, ffn_down.
inline std::array<const TensorView*, 7> layer_matrices(const LayerWeights& L) {
    return {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down};
}

}  // namespace quill
