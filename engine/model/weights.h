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
};

struct LayerWeights {
    std::vector<float> attn_norm;  // [n_embd]
    TensorView wq;                 // [n_head * head_dim rows, n_embd]
    TensorView wk;                 // [n_head_kv * head_dim rows, n_embd]
    TensorView wv;                 // [n_head_kv * head_dim rows, n_embd]
    TensorView wo;                 // [n_embd rows, n_head * head_dim]
    std::vector<float> ffn_norm;   // [n_embd]
    TensorView ffn_gate;           // W1 [n_ff rows, n_embd]
    TensorView ffn_up;             // W3 [n_ff rows, n_embd]
    TensorView ffn_down;           // W2 [n_embd rows, n_ff]
    // Optional biases (qwen2 has Q, K and V ones; llama GGUFs may carry any of them); empty when absent.
    std::vector<float> bq, bk, bv;  // [n_embd_q], [n_embd_kv], [n_embd_kv]
    std::vector<float> bo;          // [n_embd]
    // gemma3 and qwen3: RMSNorm of each Q and K head before RoPE ([head_dim]); gemma3: of the attention and FFN
    // outputs before they join the residual stream ([n_embd]). Empty for the other architectures.
    std::vector<float> attn_q_norm, attn_k_norm;
    std::vector<float> attn_post_norm, ffn_post_norm;
    bool has_bias() const { return !bq.empty() || !bk.empty() || !bv.empty() || !bo.empty(); }
};

struct Weights {
    TensorView tok_embd;             // [n_vocab rows, n_embd]
    std::vector<float> output_norm;  // [n_embd]
    TensorView output;               // [n_vocab rows, n_embd]; token_embd itself when the model ties them
    bool output_tied = false;
    std::vector<float> rope_freqs;   // [n_rot / 2] frequency divisors (Llama 3 RoPE scaling), empty when absent
    std::vector<LayerWeights> layers;

    // Views every tensor the architecture needs, checking presence, shape and type. A mismatch throws FileError
    // naming the tensor, the expected and the actual shape or type. The file must outlive the views.
    static Weights from_gguf(const GgufFile& file, const ModelConfig& config);

    // RoPE inverse frequencies [n_rot / 2]: theta_i(pos) = pos * inv_freq[i], inv_freq[i] = freq_scale *
    // base^(-2i / n_rot) / rope_freqs[i] (YaRN: the scale blended with 1 by ModelConfig::yarn_ramp(i)), with the
    // global layers' base and scale, or the local layers' when `local`. The fast backends' (the reference backend
    // computes its own).
    std::vector<double> rope_inv_freq(const ModelConfig& config, bool local) const;
};

}  // namespace quill
