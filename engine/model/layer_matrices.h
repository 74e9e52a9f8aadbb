// The weight matrices of a layer: the one list of them that packing, the backends' checks and uploads, and the
// benchmark's byte and flop counts go through.
#pragma once

#include "engine/model/weights.h"

#include <vector>

namespace quill {

// L's matrices in the order the forward reads them: wq, wk, wv, wo, then ffn_gate, ffn_up, ffn_down, or (mixture of
// experts) the router ffn_gate_inp and each expert's gate, up and down.
inline std::vector<const TensorView*> layer_matrices(const LayerWeights& L) {
    std::vector<const TensorView*> m{&L.wq, &L.wk, &L.wv, &L.wo};
    if (L.experts.empty()) {
        m.insert(m.end(), {&L.ffn_gate, &L.ffn_up, &L.ffn_down});
        return m;
    }
    m.push_back(&L.ffn_gate_inp);
    for (const ExpertWeights& e : L.experts) m.insert(m.end(), {&e.gate, &e.up, &e.down});
    return m;
}

}  // namespace quill
