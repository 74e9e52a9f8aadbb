// The weight matrices of a layer: the one list of them that packing, the backends' checks and uploads, and the
// benchmark's byte and flop counts go through; and the list of the file's tensors they are, which the synthetic
// writer writes and the device plan counts.
#pragma once

#include "engine/model/weights.h"

#include <fmt/format.h>

#include <vector>

namespace quill {

// A recurrent layer's matrices: qwen35's delta net's ssm_in, ssm_z, ssm_beta, ssm_alpha, ssm_out (qwen3next: those
// of them it has), a Mamba-1 layer's ssm_in, ssm_x, ssm_dt_proj, ssm_out, or a Mamba-2 layer's or lfm2's short
// conv's ssm_in, ssm_out.
inline std::vector<const TensorView*> recurrent_matrices(const LayerWeights& L) {
    if (L.ssm_x.data) return {&L.ssm_in, &L.ssm_x, &L.ssm_dt_proj, &L.ssm_out};
    if (!L.ssm_beta.data) return {&L.ssm_in, &L.ssm_out};
    std::vector<const TensorView*> m{&L.ssm_in};
    for (const TensorView* t : {&L.ssm_z, &L.ssm_beta, &L.ssm_alpha})
        if (t->data) m.push_back(t);
    m.push_back(&L.ssm_out);
    return m;
}

// A recurrent layer's matrices after its attention's `attn` where it has attention beside them (falcon-h1: wo
// loaded), else alone.
inline std::vector<const TensorView*> with_recurrent(const LayerWeights& L, std::vector<const TensorView*> attn) {
    if (!L.wo.data) attn.clear();
    for (const TensorView* t : recurrent_matrices(L)) attn.push_back(t);
    return attn;
}

// deepseek2's attention (MLA): the query's (wq, or wq_a and wq_b), wkv_a, deepseek32's indexer's, each head's k_b
// and v_b (the 3-D tensors whole with `whole`, or an older file's attn_kv_b), wo.
inline std::vector<const TensorView*> mla_matrices(const LayerWeights& L, bool whole) {
    std::vector<const TensorView*> m;
    if (L.wq.data) m.push_back(&L.wq);
    if (L.wq_a.data) m.insert(m.end(), {&L.wq_a, &L.wq_b});
    m.push_back(&L.wkv_a);
    if (L.idx_wq_b.data) m.insert(m.end(), {&L.idx_wq_b, &L.idx_wk, &L.idx_proj});  // (deepseek32's indexer)
    if (whole && L.wkv_b.data) {
        m.push_back(&L.wkv_b);
    } else if (whole) {
        m.insert(m.end(), {&L.wk_b, &L.wv_b});
    } else {
        for (const TensorView& t : L.wk_b_heads) m.push_back(&t);
        for (const TensorView& t : L.wv_b_heads) m.push_back(&t);
    }
    m.push_back(&L.wo);
    return m;
}

// L's matrices in the order the forward reads them: wq, wk, wv (gemma4: where the layer has them; a shared-KV layer
// has neither), afmoe's wgate, wo (qwen35's recurrent layers: ssm_in, ssm_z, ssm_beta, ssm_alpha, ssm_out instead;
// lfm2's short convs: ssm_in, ssm_out; falcon-h1: its Mamba-2's ssm_in, ssm_out after them), then ffn_gate, ffn_up,
// ffn_down, gemma4's per-layer input block (inp_gate, proj), gemma3n's Laurel (laurel_l, laurel_r), and/or (mixture
// of experts; gemma4 has both) the router ffn_gate_inp and each expert's gate, up and down, last (deepseek2:
// mla_matrices for the attention's).
inline std::vector<const TensorView*> layer_matrices(const LayerWeights& L) {
    std::vector<const TensorView*> m{&L.wq};
    if (L.wk.data) m.push_back(&L.wk);
    if (!L.v_from_k()) m.push_back(&L.wv);
    if (L.wgate.data) m.push_back(&L.wgate);  // (afmoe: the attention's output gate)
    m.push_back(&L.wo);
    if (L.recurrent()) m = with_recurrent(L, m);
    if (L.mla()) m = mla_matrices(L, false);
    if (!L.wo.data && !L.recurrent()) m.clear();  // (nemotron_h: a layer of an FFN alone)
    if (L.ffn_gate.data) m.push_back(&L.ffn_gate);  // (nemotron_h: none)
    if (L.ffn_down.data) m.insert(m.end(), {&L.ffn_up, &L.ffn_down});
    if (L.per_layer_proj.data) m.insert(m.end(), {&L.per_layer_inp_gate, &L.per_layer_proj});
    if (L.laurel_l.data) m.insert(m.end(), {&L.laurel_l, &L.laurel_r});
    if (L.experts.empty()) return m;
    m.push_back(&L.ffn_gate_inp);
    for (const ExpertWeights& e : L.experts) {
        if (e.gate.data) m.push_back(&e.gate);  // (nemotron_h_moe: none)
        m.insert(m.end(), {&e.up, &e.down});
    }
    return m;
}

// L's matrices as the file holds them, each tensor once, in the same order: phi3's fused attn_qkv and ffn_up whole
// rather than their parts, a mixture's experts as the three 3-D tensors of them all.
inline std::vector<const TensorView*> layer_file_matrices(const LayerWeights& L) {
    std::vector<const TensorView*> m{L.attn_qkv.data ? &L.attn_qkv : &L.wq};
    if (!L.attn_qkv.data && L.wk.data) m.push_back(&L.wk);
    if (!L.attn_qkv.data && !L.v_from_k()) m.push_back(&L.wv);
    if (L.wgate.data) m.push_back(&L.wgate);
    m.push_back(&L.wo);
    if (L.recurrent()) m = with_recurrent(L, m);
    if (L.mla()) m = mla_matrices(L, true);
    if (!L.wo.data && !L.recurrent()) m.clear();  // (nemotron_h: a layer of an FFN alone)
    if (L.ffn_gate_up.data) {
        m.insert(m.end(), {&L.ffn_gate_up, &L.ffn_down});
    } else if (L.ffn_down.data) {
        if (L.ffn_gate.data) m.push_back(&L.ffn_gate);  // (nemotron_h: none)
        m.insert(m.end(), {&L.ffn_up, &L.ffn_down});
    }
    if (L.per_layer_proj.data) m.insert(m.end(), {&L.per_layer_inp_gate, &L.per_layer_proj});
    if (L.laurel_l.data) m.insert(m.end(), {&L.laurel_l, &L.laurel_r});
    if (L.experts.empty()) return m;
    m.push_back(&L.ffn_gate_inp);
    if (L.ffn_gate_up_exps.data)
        m.push_back(&L.ffn_gate_up_exps);
    else if (L.ffn_gate_exps.data)
        m.insert(m.end(), {&L.ffn_gate_exps, &L.ffn_up_exps});
    else  // (nemotron_h_moe: no gate)
        m.push_back(&L.ffn_up_exps);
    m.push_back(&L.ffn_down_exps);
    return m;
}

// gemma4 E2B/E4B: the rows of per_layer_model_proj that layers [begin, end) read (their inputs' projections), a
// view of its bytes; empty when the model has no per-layer inputs.
inline TensorView per_layer_proj_rows(const Weights& w, int64_t begin, int64_t end) {
    if (!w.per_layer_model_proj.data) return {};
    const int64_t n = w.per_layer_model_proj.n_rows() / static_cast<int64_t>(w.layers.size());
    if (begin == 0 && end == static_cast<int64_t>(w.layers.size())) return w.per_layer_model_proj;
    return w.per_layer_model_proj.rows(begin * n, (end - begin) * n, fmt::format("layers {}-{}", begin, end - 1));
}

}  // namespace quill
