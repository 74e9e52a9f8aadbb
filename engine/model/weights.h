// Typed, shape-checked views of a model's tensors inside the mapped GGUF file (no copies of the big matrices).
#pragma once

#include "engine/format/gguf.h"
#include "engine/model/model_config.h"

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace quill {

// A tensor in the file: ne innermost first, so a matrix has ne[1] rows of ne[0] elements.
struct TensorView {
    std::string name;
    GgmlType type = GgmlType::F32;
    std::array<int64_t, 4> ne{1, 1, 1, 1};
    const uint8_t* data = nullptr;
    size_t n_bytes = 0;

    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    size_t row_bytes() const { return row_size(type, ne[0]); }
    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes(); }
    // Rows [first, first + n) of a matrix as a matrix of their own, named `part`: the parts of a fused tensor
    // (phi3's attn_qkv, its gate and up in one ffn_up), views into the same bytes.
    TensorView rows(int64_t first, int64_t n, const std::string& part) const;
    // Matrix i of a 3-D tensor [ne[2] matrices, ne[1] rows, ne[0]] (an expert of the experts' tensors), a view into
    // the same bytes named "name (expert i)".
    TensorView matrix(int64_t i) const;
};

// One expert of a mixture-of-experts FFN: views into its layer's 3-D tensors.
struct ExpertWeights {
    TensorView gate;  // W1 [n_ff_exp rows, n_embd]
    TensorView up;    // W3 [n_ff_exp rows, n_embd]
    TensorView down;  // W2 [n_embd rows, n_ff_exp]
};

struct LayerWeights {
    std::vector<float> attn_norm;  // [n_embd]; empty, as ffn_norm, without input norms (ModelConfig::input_norms)
    TensorView wq;                 // [n_head * head_dim rows, n_embd] (attn_out_gate: [2 n_head * head_dim rows])
    TensorView wk;                 // [n_head_kv * head_dim rows, n_embd]
    TensorView wv;                 // [n_head_kv * head_dim rows, n_embd]; gemma4: absent (no data) where V is K's
    TensorView wo;                 // [n_embd rows, n_head * head_dim]
    TensorView wgate;              // afmoe (ModelConfig::attn_gate_proj): [n_head * head_dim rows, n_embd]
    std::vector<float> ffn_norm;   // [n_embd]
    TensorView ffn_gate;           // W1 [n_ff rows, n_embd]
    TensorView ffn_up;             // W3 [n_ff rows, n_embd]
    TensorView ffn_down;           // W2 [n_embd rows, n_ff]
    // phi3: the file's fused matrices, of which wq, wk, wv and ffn_gate, ffn_up are views; empty for the others.
    TensorView attn_qkv;     // [n_embd_q + 2 n_embd_kv rows, n_embd] (attn_qkv.weight)
    TensorView ffn_gate_up;  // [2 n_ff rows, n_embd], gate first (ffn_up.weight)
    // Mixture of experts (ModelConfig::moe(); then ffn_gate, ffn_up and ffn_down are empty): the router, the file's
    // 3-D tensors of every expert's matrices, and each expert as views of them.
    TensorView ffn_gate_inp;                // router [n_expert rows, n_embd]
    TensorView ffn_gate_exps, ffn_up_exps;  // [n_expert, n_ff_exp rows, n_embd]
    TensorView ffn_gate_up_exps;            // gemma4: [n_expert, 2 n_ff_exp rows, n_embd], gate first (else empty)
    TensorView ffn_down_exps;               // [n_expert, n_embd rows, n_ff_exp]
    std::vector<ExpertWeights> experts;     // [n_expert]
    // gemma4 (ModelConfig::moe_shared_ffn): the router's input scale [n_embd], the experts' input norm [n_embd], the
    // output norms of the dense FFN and of the experts' sum [n_embd], each expert's output scale [n_expert] (empty
    // when absent: 1).
    std::vector<float> ffn_gate_inp_s, ffn_pre_norm_2, ffn_post_norm_1, ffn_post_norm_2, ffn_down_exps_s;
    // The shared expert (ModelConfig::moe_shared_expert; ffn_gate, ffn_up and ffn_down are its matrices, the file's
    // ffn_*_shexp): the gate vector of its output, sigmoid(ffn_gate_inp_shexp . xn) (empty without a gate).
    std::vector<float> ffn_gate_inp_shexp;  // [n_embd]
    // The selection bias added to the experts' probabilities to choose them (ModelConfig::moe_selection_bias; the
    // file's exp_probs_b.bias); empty without it.
    std::vector<float> ffn_exp_probs_b;  // [n_expert]
    // gpt-oss: biases of the router's logits and of each expert's gate, up and down products, expert e's at
    // e * n_ff_exp (gate, up) and e * n_embd (down); empty when absent.
    std::vector<float> ffn_gate_inp_b;                    // [n_expert]
    std::vector<float> ffn_gate_exps_b, ffn_up_exps_b;    // [n_expert, n_ff_exp]
    std::vector<float> ffn_down_exps_b;                   // [n_expert, n_embd]
    // deepseek2's Multi-head Latent Attention (ModelConfig::mla(); then wq is the plain query projection, or empty
    // with a low-rank query, and wk, wv are empty): the query's low-rank projections and the norm between them, the
    // projection to the latent and the RoPE key (attn_kv_a_mqa), the latent's norm, and the file's 3-D tensors of
    // each head's key and value matrices with the heads as views of them.
    TensorView wq_a;                    // [q_lora_rank rows, n_embd] (attn_q_a)
    TensorView wq_b;                    // [n_head * head_dim rows, q_lora_rank] (attn_q_b)
    std::vector<float> attn_q_a_norm;   // [q_lora_rank]
    TensorView wkv_a;                   // [kv_lora_rank + n_rot rows, n_embd] latent, then the RoPE key
    std::vector<float> attn_kv_a_norm;  // [kv_lora_rank]
    TensorView wk_b;                    // [n_head, kv_lora_rank rows, head_dim - n_rot] (attn_k_b)
    TensorView wv_b;                    // [n_head, head_dim_v rows, kv_lora_rank] (attn_v_b)
    std::vector<TensorView> wk_b_heads, wv_b_heads;  // [n_head] head h's matrix of each
    // Older files (ModelConfig::mla_fused_kv_b): attn_kv_b, each head's Wk [head_dim - n_rot rows] then Wv
    // [head_dim_v rows]; wv_b_heads are views of it, wk_b_heads views of wk_b_t, its Wk parts transposed to F32.
    TensorView wkv_b;                   // [n_head * (head_dim - n_rot + head_dim_v) rows, kv_lora_rank]
    std::vector<float> wk_b_t;          // [n_head, kv_lora_rank, head_dim - n_rot]
    bool mla() const { return wkv_a.data != nullptr; }
    // DeepSeek Sparse Attention's lightning indexer (ModelConfig::dsa()): its query from the low-rank query, its key
    // and its heads' weights from xn, the key's LayerNorm.
    TensorView idx_wq_b;                        // [indexer_n_head * indexer_head_dim rows, q_lora_rank]
    TensorView idx_wk;                          // [indexer_head_dim rows, n_embd] (indexer.attn_k)
    TensorView idx_proj;                        // [indexer_n_head rows, n_embd] (indexer.proj)
    std::vector<float> idx_k_norm, idx_k_norm_b;  // [indexer_head_dim] (indexer.k_norm weight and bias)
    // gpt-oss: each query head's learned logit that joins its softmax's denominator with no value ([n_head]);
    // empty when absent.
    std::vector<float> attn_sinks;
    // Optional biases (qwen2 has Q, K and V ones; llama GGUFs may carry any of them); empty when absent.
    std::vector<float> bq, bk, bv;  // [n_embd_q], [n_embd_kv], [n_embd_kv]
    std::vector<float> bo;          // [n_embd]
    // gemma3 and qwen3: RMSNorm of each Q and K head before RoPE ([head_dim]; olmo2: of the whole Q and K, [n_embd_q]
    // and [n_embd_kv]); gemma3, glm4, olmo2, exaone4: of the attention and FFN outputs before they join the residual
    // stream ([n_embd]). Empty for the other architectures.
    std::vector<float> attn_q_norm, attn_k_norm;
    std::vector<float> attn_post_norm, ffn_post_norm;
    // gemma4: the layer's output is multiplied by out_scale[0] ([1], layer_output_scale); empty: 1.
    std::vector<float> out_scale;
    // qwen35's gated delta net (ModelConfig::layer_is_recurrent; then wq, wk, wv and wo are empty): the projections
    // of its input to q, k, v (the conv's channels, in that order), to the output gate z, to beta and alpha (one a
    // value head), the output projection; the conv's taps per channel (the last one the current token's), dt's bias,
    // a = -exp(A_log), the output norm of each head.
    // qwen3next (ModelConfig::ssm_grouped): ssm_beta is the file's ssm_ba [2 ssm_n_v_heads rows], ssm_alpha empty,
    // and where the file has its older fused ssm_in, ssm_in is that [ssm_conv_channels + ssm_d_inner rows] and ssm_z
    // empty, both grouped by key head (delta_net_layout.h).
    TensorView ssm_in;              // attn_qkv [ssm_conv_channels rows, n_embd]
    TensorView ssm_z;               // attn_gate [ssm_d_inner rows, n_embd]
    TensorView ssm_beta;            // [ssm_n_v_heads rows, n_embd]
    TensorView ssm_alpha;           // [ssm_n_v_heads rows, n_embd]
    TensorView ssm_out;             // [n_embd rows, ssm_d_inner]
    std::vector<float> ssm_conv1d;  // [ssm_conv_channels, ssm_conv]
    std::vector<float> ssm_dt;      // [ssm_n_v_heads]
    std::vector<float> ssm_a;       // [ssm_n_v_heads]
    std::vector<float> ssm_norm;    // [ssm_head_v] (mamba2: [ssm_n_k_heads, ssm_d_inner / ssm_n_k_heads], a group's)
    // granitehybrid's Mamba-2 layers (ModelConfig::mamba2) have ssm_in, ssm_out, ssm_conv1d, ssm_dt, ssm_a (as its
    // converter stores it: -exp(A_log)) and ssm_norm of the same names and these, and no ssm_z, ssm_beta, ssm_alpha:
    // ssm_in [2 ssm_d_inner + 2 ssm_n_k_heads ssm_head_k + ssm_n_v_heads rows] gives z, then x, B, C (the conv's
    // channels), then dt.
    std::vector<float> ssm_conv1d_b;  // [ssm_conv_channels] the conv's bias (may be absent: none)
    std::vector<float> ssm_d;         // [ssm_n_v_heads] the skip y += D x of each head
    // Mamba-1's layers (ModelConfig::mamba1) have ssm_in [2 ssm_d_inner rows: x, then z], ssm_out, ssm_conv1d and its
    // bias over x, ssm_dt (dt_proj's bias, [ssm_d_inner]), ssm_a [ssm_d_inner, ssm_head_k] (-exp(A_log), as the
    // converter stores it), ssm_d [ssm_d_inner], and these; the RMS norms' weights where the file has them (else 1).
    TensorView ssm_x;        // x_proj [ssm_dt_rank + 2 ssm_head_k rows, ssm_d_inner]: dt, B, C
    TensorView ssm_dt_proj;  // dt_proj [ssm_d_inner rows, ssm_dt_rank] (ssm_dt.weight)
    std::vector<float> ssm_dt_norm, ssm_b_norm, ssm_c_norm;  // [ssm_dt_rank], [ssm_head_k], [ssm_head_k]
    // lfm2's short conv (ModelConfig::layer_is_short_conv) has ssm_in (shortconv.in_proj [3 n_embd rows, n_embd]: b,
    // c, x), ssm_out (shortconv.out_proj [n_embd rows, n_embd]) and ssm_conv1d (shortconv.conv [n_embd, ssm_conv])
    // alone.
    bool recurrent() const { return ssm_in.data != nullptr; }
    // gemma4 E2B/E4B (ModelConfig::n_embd_per_layer): the per-layer input's block after the FFN (empty otherwise).
    TensorView per_layer_inp_gate;          // [n_embd_per_layer rows, n_embd] (inp_gate.weight)
    TensorView per_layer_proj;              // [n_embd rows, n_embd_per_layer] (proj.weight)
    std::vector<float> per_layer_post_norm;  // [n_embd] (post_norm.weight)
    // gemma3n (ModelConfig::altup): Laurel's low-rank branch and its norm, and AltUp's router (its input norm and
    // matrix), the prediction's and the correction's coefficient matrices and the scale of the corrected active
    // stream, each small matrix as floats (empty otherwise).
    TensorView laurel_l;                     // [laurel_rank rows, n_embd]
    TensorView laurel_r;                     // [n_embd rows, laurel_rank]
    std::vector<float> laurel_post_norm;     // [n_embd]
    std::vector<float> altup_router;         // [n_altup, n_embd]
    std::vector<float> altup_router_norm;    // [n_embd]
    std::vector<float> altup_predict_coef;   // [n_altup * n_altup, n_altup]
    std::vector<float> altup_correct_coef;   // [n_altup, n_altup]
    std::vector<float> altup_correct_scale;  // [n_embd]
    // gemma4: a layer without attn_v takes V from K's projection.
    bool v_from_k() const { return wv.data == nullptr; }
    bool has_bias() const { return !bq.empty() || !bk.empty() || !bv.empty() || !bo.empty(); }
    // attn_qkv = qkv, and wq, wk, wv its parts, in that order, in layer `layer`'s widths
    void split_qkv(const TensorView& qkv, const ModelConfig& config, int64_t layer);
    // ffn_gate_up = gate_up, and ffn_gate, ffn_up its halves
    void split_gate_up(const TensorView& gate_up, const ModelConfig& config);
    // wk_b_heads and wv_b_heads as the matrices of wk_b and wv_b
    void split_mla_heads();
    // or of wkv_b (older files): wk_b_t made from it
    void split_kv_b(const ModelConfig& config);
    // experts as the matrices of ffn_gate_exps, ffn_up_exps (or the halves of ffn_gate_up_exps') and ffn_down_exps
    void split_experts();
};

struct Weights {
    TensorView tok_embd;             // [n_vocab rows, n_embd]
    std::vector<float> output_norm;  // [n_embd]
    TensorView output;               // [n_vocab rows, n_embd]; token_embd itself when the model ties them
    bool output_tied = false;
    // [n_rot / 2] frequency divisors (Llama 3 RoPE scaling; gemma4's global layers), empty when absent
    std::vector<float> rope_freqs;
    // [n_rot / 2] phi3's divisors for a context longer than ModelConfig::yarn_n_ctx_orig and for one within it; empty
    // when absent
    std::vector<float> rope_factors_long, rope_factors_short;
    // gemma4 E2B/E4B (ModelConfig::n_embd_per_layer > 0; else empty): each token's per-layer embeddings, read a row
    // at a time from the file, never expanded; the projection of the token's embedding to every layer's input, and
    // its norm.
    TensorView per_layer_tok_embd;    // [n_vocab rows, n_layer * n_embd_per_layer]
    TensorView per_layer_model_proj;  // [n_layer * n_embd_per_layer rows, n_embd]
    std::vector<float> per_layer_proj_norm;  // [n_embd_per_layer]
    // gemma3n (ModelConfig::altup; else empty): the projections of the embedding to the streams beyond the first
    // and of those streams back after the layers, and each of their matrices as a view.
    TensorView altup_proj;           // [n_altup - 1, n_embd rows, n_embd]
    TensorView altup_unembd_proj;    // [n_altup - 1, n_embd rows, n_embd]
    std::vector<TensorView> altup_proj_k, altup_unembd_k;  // [n_altup - 1] matrix k - 1 of each
    std::vector<LayerWeights> layers;
    int64_t n_expert_used = 0;  // experts a token's FFN reads (ModelConfig::n_expert_used); 0: a dense FFN

    // altup_proj_k and altup_unembd_k as the matrices of altup_proj and altup_unembd_proj
    void split_altup();

    // Views every tensor the architecture needs, checking presence, shape and type. A mismatch throws FileError
    // naming the tensor, the expected and the actual shape or type. The file must outlive the views.
    static Weights from_gguf(const GgufFile& file, const ModelConfig& config);

    // RoPE inverse frequencies [n_rot / 2]: theta_i(pos) = pos * inv_freq[i], inv_freq[i] = freq_scale *
    // base^(-2i / n_rot) / rope_divisors[i] (YaRN: the scale blended with 1 by ModelConfig::yarn_ramp(i)), with the
    // global layers' base and scale, or the local layers' when `local`, for sequences of up to n_ctx positions. The
    // fast backends' (the reference backend computes its own).
    std::vector<double> rope_inv_freq(const ModelConfig& config, bool local, int64_t n_ctx = 0) const;
    // The divisors of rope_inv_freq for sequences of up to n_ctx positions: rope_freqs, else the long or the
    // short factors (long when n_ctx > yarn_n_ctx_orig, as llama.cpp chooses), else none (empty).
    const std::vector<float>& rope_divisors(const ModelConfig& config, int64_t n_ctx) const;
};

}  // namespace quill
