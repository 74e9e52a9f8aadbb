// The weight matrices of a layer: the one list of them that packing, the backends' checks and uploads, and the
// benchmark's byte and flop counts go through; and the list of the file's tensors they are, which the synthetic
// writer writes and the device plan counts.
#pragma once

#include "engine/model/weights.h"

#include <vector>

namespace quill {

// L's matrices in the order the forward reads them: wq, wk, wv (gemma4: where the layer has one), wo (qwen35's
// recurrent layers: ssm_in, ssm_z, ssm_beta, ssm_alpha, ssm_out instead), then ffn_gate,
// ffn_up, ffn_down, and/or (mixture of experts; gemma4 has both) the router ffn_gate_inp and each expert's gate, up
// and down, last.
inline std::vector<const TensorView*> layer_matrices(const LayerWeights& L) {
    std::vector<const TensorView*> m{&L.wq, &L.wk, &L.wv, &L.wo};
    if (L.recurrent()) m = {&L.ssm_in, &L.ssm_z, &L.ssm_beta, &L.ssm_alpha, &L.ssm_out};  // (qwen35's delta net)
    else if (L.v_from_k()) m.erase(m.begin() + 2);
    if (L.ffn_down.data) m.insert(m.end(), {&L.ffn_gate, &L.ffn_up, &L.ffn_down});
    if (L.experts.empty()) return m;
    m.push_back(&L.ffn_gate_inp);
    for (const ExpertWeights& e : L.experts) m.insert(m.end(), {&e.gate, &e.up, &e.down});
    return m;
}

// L's matrices as the file holds them, each tensor once, in the same order: phi3's fused attn_qkv and ffn_up whole
// rather than their parts, a mixture's experts as the three 3-D tensors of them all.
inline std::vector<const TensorView*> layer_file_matrices(const LayerWeights& L) {
    std::vector<const TensorView*> m =
        L.attn_qkv.data ? std::vector<const TensorView*>{&L.attn_qkv, &L.wo}
                        : std::vector<const TensorView*>{&L.wq, &L.wk, &L.wv, &L.wo};
    if (L.recurrent()) m = {&L.ssm_in, &L.ssm_z, &L.ssm_beta, &L.ssm_alpha, &L.ssm_out};
    else if (!L.attn_qkv.data && L.v_from_k()) m.erase(m.begin() + 2);
    if (L.ffn_gate_up.data)
        m.insert(m.end(), {&L.ffn_gate_up, &L.ffn_down});
    else if (L.ffn_down.data)
        m.insert(m.end(), {&L.ffn_gate, &L.ffn_up, &L.ffn_down});
    if (L.experts.empty()) return m;
    m.push_back(&L.ffn_gate_inp);
    if (L.ffn_gate_up_exps.data)
        m.push_back(&L.ffn_gate_up_exps);
    else
        m.insert(m.end(), {&L.ffn_gate_exps, &L.ffn_up_exps});
    m.push_back(&L.ffn_down_exps);
    return m;
}

}  // namespace quill
