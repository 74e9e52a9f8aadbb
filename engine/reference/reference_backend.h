// The reference backend: the plain forward pass that every other backend is tested against.
//
// One token at a time, one thread, every sum in double, written from the math of the llama architecture and
// sharing nothing with the fast paths but the GGUF dequantizers (engine/format/quant.h) and the config and weight
// views. Weights are dequantized to float row by row as they are used, so the computation is exactly that of the
// model's F32-dequantized copy: the only roundings are the ones the file itself holds, the final logits written as
// float, and with KvType::f16 the half-precision attention of an fp16 cache (K, V, q and the softmax
// probabilities rounded to fp16 before they meet, as llama.cpp's and the CPU backend's attention do). It is slow
// (an oracle for tiny models, stories260K and short runs of the default model), and it is a Backend, so any test
// can put it where another backend goes.
#pragma once

#include "engine/model/weights.h"
#include "engine/runtime/backend.h"

#include <cstdint>
#include <span>
#include <vector>

namespace quill {

struct ReferenceBackendOptions {
    int64_t n_ctx = 0;    // positions per slot
    int64_t n_slots = 1;  // sequences that can be in flight
    KvType kv_type = KvType::f32;  // f32: attention in double; f16: half-precision attention (see above).
                                   // Either way the cache holds doubles; kv_shape() gives its layout.
    // The layers this backend holds, for a range of a split forward; empty: all of them. The hidden states between
    // ranges are floats, so a split run's logits are those of the unsplit run to float rounding of the residual
    // stream at each boundary, not bit for bit.
    LayerRange layers;
};

class ReferenceBackend final : public Backend {
public:
    // config and weights must outlive the backend.
    ReferenceBackend(const ModelConfig& config, const Weights& weights, const ReferenceBackendOptions& options);

    std::string_view name() const override { return "reference"; }
    const ModelConfig& config() const override { return config_; }
    const KvCacheShape& kv_shape() const override { return kv_shape_; }
    // Runs the batch token by token in batch order, so a token sees the K and V of the tokens before it in the
    // batch and of earlier calls, never of later ones: a token that would attend to a position of its slot that
    // no token has written yet is a UsageError (the fast backends would read stale memory there).
    void forward(const Batch& batch, std::span<float> logits) override;
    // A recurrent model (qwen35) cannot go back: its state holds every token before (Backend::max_rewind).
    int64_t max_rewind() const override { return config_.recurrent() ? 0 : INT64_MAX; }
    bool can_copy_kv() const override { return !config_.recurrent(); }
    // A position src has not written is copied as not written: a token of dst attending to it is refused.
    void copy_kv(int32_t src, int32_t dst, int64_t begin, int64_t end) override;
    LayerRange layer_range() const override { return layers_; }
    void embed_tokens(const Batch& batch, std::span<float> hidden) override;
    void forward_layers(const Batch& batch, std::span<float> hidden) override;
    void output_logits(const Batch& batch, std::span<const float> hidden, std::span<float> logits) override;

private:
    // The refusal of a token attending to a position nobody filled (see forward), and the batch's positions marked.
    void mark_written(const Batch& batch);
    // The whole model for one token; logits [n_vocab] receives its output row when not null.
    void forward_token(const BatchToken& t, float* logits);
    void embed_token(const BatchToken& t);          // x_ = the token's embedding
    void layer_token(const BatchToken& t, int64_t l);  // x_ = layer l applied to x_, K and V stored
    // x_ = x_ + the FFN of layer l (L) over rms_norm(x_), then gemma4's per-layer block and out_scale
    void ffn_token(const LayerWeights& L, int64_t l);
    // out_ = qwen35's gated delta net of layer l over xn_, its state moved on by t
    void delta_net_token(const BatchToken& t, int64_t l);
    void mamba2_token(const BatchToken& t, int64_t l);  // the same for granitehybrid's Mamba-2 layer
    void mamba1_token(const BatchToken& t, int64_t l);  // and for a Mamba-1 layer
    // out_ = lfm2's short conv of layer l over xn_, its window moved on by t
    void short_conv_token(const BatchToken& t, int64_t l);
    // out_ = deepseek2's attention (MLA) of layer l over xn_ for token t, its latent and RoPE key stored
    void mla_token(const BatchToken& t, int64_t l);
    // dsa_keep_ = the positions token t's MLA attends to in layer l (deepseek32's lightning indexer), its key stored
    void dsa_select(const BatchToken& t, int64_t l);
    double* conv_state(int64_t layer, int64_t slot);  // [ssm_conv_channels, ssm_conv - 1] the conv's window
    double* ssm_state(int64_t layer, int64_t slot);   // [ssm_n_v_heads, ssm_head_v, ssm_head_k] S
    void output_token(float* logits);               // logits [n_vocab] of x_
    // gemma3n's AltUp (ModelConfig::altup): streams_ from the embedding x_; before layer l pred_ = the streams'
    // prediction and x_ its active stream; after it streams_ = the prediction corrected by x_ (the layer's output),
    // plus the per-layer input's block; after the last layer x_ = the streams merged.
    void altup_embed();
    void altup_predict(int64_t l);
    void altup_correct(int64_t l);
    void altup_merge();
    // r = AltUp's router of layer l over v: tanh(W_router (rms_norm(v) * router_norm / n_embd)) [n_altup]
    void altup_router(const LayerWeights& L, const std::vector<double>& v, std::vector<double>& r) const;
    // gemma4 E2B/E4B: ple_ = token t's inputs of the layers this backend holds (ModelConfig::n_embd_per_layer).
    void per_layer_inputs(const BatchToken& t);
    // out = the FFN of w1 (gate), w3 (up), w2 (down) over xn_, plus the biases b1, b3, b2 where not null ([n_ff],
    // [n_ff], [n_embd]); moe_ffn: out_ = the routed experts' weighted sum over xn_, routed by the router's product
    // with router_in.
    void ffn(const TensorView& w1, const TensorView& w3, const TensorView& w2, std::vector<double>& out,
             const float* b1 = nullptr, const float* b3 = nullptr, const float* b2 = nullptr);
    void moe_ffn(const LayerWeights& L, const std::vector<double>& router_in);
    double* cache_row(std::vector<double>& cache, int64_t layer, int64_t slot, int64_t pos);

    const ModelConfig& config_;
    const Weights& weights_;
    LayerRange layers_;
    KvCacheShape kv_shape_;
    std::vector<int64_t> kv_entry_;  // [n_layer] the cache layer each model layer reads (ModelConfig::kv_index)
    std::vector<double> inv_freq_;   // [n_rot / 2] freq_scale * base^(-2i / n_rot) / rope_freqs[i]
    std::vector<double> inv_freq_local_;  // the same with the local layers' base and scale
    std::vector<double> k_cache_;    // [kv_shape_.n_layer, n_slots, n_ctx, n_head_kv * head_dim]
    std::vector<double> v_cache_;    // [kv_shape_.n_layer, n_slots, n_ctx, n_head_kv * head_dim]
    std::vector<uint8_t> written_;   // [n_slots, n_ctx] 1 where a token has stored its K and V
    // qwen35's and lfm2's recurrent states: [layers_.size(), n_slots, ...] of conv_state's and ssm_state's shapes, and
    // the position each slot's state stands at (one past its last token)
    std::vector<double> conv_state_, ssm_state_;
    std::vector<int64_t> state_pos_;  // [n_slots]

    // Per-token state.
    std::vector<double> x_;      // [n_embd] residual stream
    std::vector<double> xn_;     // [n_embd] normed input of a block
    std::vector<double> q_;      // [n_head * head_dim]
    std::vector<double> k_;      // [n_head_kv * head_dim]
    std::vector<double> v_;      // [n_head_kv * head_dim]
    std::vector<double> att_;    // [n_head * head_dim] attention output (delta net: [ssm_conv_channels] q, k, v)
    std::vector<double> attn_gate_;  // [n_head * head_dim] qwen35's output gate (delta net: z [ssm_d_inner])
    std::vector<double> ssm_o_;      // [ssm_d_inner] the delta net's output before W_out
    std::vector<double> ssm_fused_;  // qwen3next: a product grouped by key head, before ungroup_ba or ungroup_qkvz
    std::vector<double> score_;  // [n_ctx] one head's scores, then probabilities
    std::vector<uint8_t> dsa_keep_;  // [pos + 1] 1 where the token's MLA attends (deepseek32; dsa_select)
    std::vector<double> out_;    // [n_embd] output of wo / ffn_down
    std::vector<double> gate_;   // [n_ff] (or n_ff_exp)
    std::vector<double> up_;     // [n_ff] (or n_ff_exp)
    std::vector<double> router_;      // [n_expert] router logits
    std::vector<double> route_scratch_;  // route_experts' (deepseek2's routing)
    std::vector<double> expert_out_;  // [n_embd] one expert's output
    std::vector<double> router_in_;   // [n_embd] gemma4: the router's input
    std::vector<double> shared_;      // [n_embd] the dense FFN's output beside the experts' (gemma4, shared expert)
    std::vector<double> attn_out_;    // [n_embd] the attention's output beside the FFN's (parallel blocks: cohere)
    std::vector<double> ssm_out_;     // [n_embd] the Mamba-2 mixer's output beside the attention's (falcon-h1)
    std::vector<double> ple_;     // [n_layer, n_embd_per_layer] gemma4 E2B/E4B: the token's per-layer inputs
    std::vector<double> ple_x_;   // [n_embd] the token's embedding, then a per-layer block's output
    std::vector<double> ple_g_;   // [n_embd_per_layer] a per-layer block's gate
    std::vector<double> streams_;  // [n_altup, n_embd] gemma3n: the token's AltUp streams
    std::vector<double> pred_;     // [n_altup, n_embd] their prediction in the current layer
    std::vector<double> laurel_;   // [n_embd] gemma3n: Laurel's branch over the attention's input
    bool ffn_sparse_ = false;      // gemma3n: the current FFN's gate is cut (ModelConfig::layer_sparse)
    double ffn_clamp_ = 0.0;       // step35: the current SwiGLU's clamp (ModelConfig::swiglu_clamp_exp); 0: none
    std::vector<double> logit_;  // [n_vocab]
    std::vector<float> row_;     // [max row length] one weight row, dequantized
    int64_t ffn_layer_ = 0;      // the layer ffn_token runs (apertus: its xIELU parameters)
};

}  // namespace quill
