// The CPU backend: the forward pass of a llama-family model over a batch, with the KV cache in host memory.
//
// Two modes share the forward pass: the fast path (SIMD kernels on quantized blocks, threads) and the reference
// path (scalar matmul_reference and plain attention, one thread), which is the oracle the tests trust.
#pragma once

#include "engine/runtime/backend.h"
#include "engine/cpu/attention_runner.h"
#include "engine/cpu/kv_cache.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/moe.h"
#include "engine/cpu/recurrent_state.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/weight_store.h"
#include "engine/model/weights.h"

#include <functional>
#include <optional>
#include <vector>

namespace quill::cpu {

struct CpuBackendOptions {
    int n_threads = 0;    // 0: the physical cores
    int64_t n_ctx = 0;    // positions per slot
    int64_t n_slots = 1;  // sequences that can be in flight
    KvType kv_type = KvType::f16;
    bool reference = false;  // the scalar oracle path
    std::optional<Isa> isa;  // kernel family; best_isa() when unset
    // Sliding-window layers keep a ring of their recent positions instead of the whole context (when it is
    // smaller); false keeps every position (the tests' comparison).
    bool window_cache = true;
    // Back the K and V caches with 2 MiB pages (MADV_HUGEPAGE) where the kernel allows them, and fault them all in
    // when the backend is made: for a context fitted to the requests, whose cache fills anyway. A large context left
    // mostly unwritten would take a whole 2 MiB page for each layer and slot it touches instead of the 4 KiB ones it
    // writes.
    bool kv_huge_pages = false;
    // The layers this backend holds, for a range of a split forward (Backend::forward_layers); empty: all of them.
    // Only their weights are packed and only their K and V cached; the output matrix with the last layer.
    LayerRange layers;
    // A recurrent model's snapshots of each slot's state (Backend::keep_state): how many a slot keeps.
    int64_t state_snapshots = 0;
    CancelFlag cancel = nullptr;  // polled while the weights are packed (WeightStore): Interrupted
};

class CpuBackend final : public Backend {
public:
    // config and weights must outlive the backend.
    CpuBackend(const ModelConfig& config, const Weights& weights, const CpuBackendOptions& options);
    // FileError naming the first weight matrix whose type the CPU backend cannot multiply.
    static void check_weights(const Weights& weights);

    std::string_view name() const override { return reference_ ? "cpu-reference" : "cpu"; }
    const ModelConfig& config() const override { return config_; }
    const KvCacheShape& kv_shape() const override { return kv_.shape(); }
    // The threads and the kernels' instruction set.
    BackendInfo describe() const override;
    void forward(const Batch& batch, std::span<float> logits) override;
    void forward_sample(const Batch& batch, std::span<Sampler* const> samplers, int64_t n_token_ids,
                        std::span<int32_t> tokens) override;
    int64_t max_rewind() const override;
    LayerRange layer_range() const override { return layers_; }
    void embed_tokens(const Batch& batch, std::span<float> hidden) override;
    void forward_layers(const Batch& batch, std::span<float> hidden) override;
    void output_logits(const Batch& batch, std::span<const float> hidden, std::span<float> logits) override;
    // (a recurrent model's state cannot be copied from part of another slot's sequence: max_rewind 0, no copies)
    bool can_copy_kv() const override { return !config_.recurrent(); }
    void copy_kv(int32_t src, int32_t dst, int64_t begin, int64_t end) override { kv_.copy(src, dst, begin, end); }
    void keep_state(int32_t slot, int64_t pos) override {
        if (config_.recurrent()) recurrent_.keep_at(slot, pos);
    }
    int64_t resume_position(int32_t slot, int64_t n) const override {
        return config_.recurrent() ? recurrent_.resume_position(slot, n) : 0;
    }
    // The bytes of the KV cache (KvCache::bytes), and of the recurrent state with its snapshots (0 without
    // recurrent layers).
    size_t kv_bytes() const { return kv_.bytes(); }
    size_t recurrent_bytes() const { return recurrent_.bytes(); }
    // The slot whose cache attention reads slot's positions [0, n) from, as {that slot, n} (copies of one prompt
    // prefix read from one of them; see KvCache::Alias), or {-1, 0}.
    std::pair<int32_t, int64_t> shared_prefix(int32_t slot) const {
        const KvCache::Alias& a = kv_.aliases().at(static_cast<size_t>(slot));
        return {a.src, a.n};
    }
    // Positions a sliding-window layer's ring keeps per slot; 0 when every layer keeps the whole context.
    int64_t window_ring() const { return kv_.ring(); }

    // True when the K and V caches were advised to use 2 MiB pages (CpuBackendOptions::kv_huge_pages and the
    // kernel took the advice).
    bool kv_huge_pages() const { return kv_.huge_pages(); }
    // Where the K and V caches are mapped (the tests find them in /proc/self/smaps).
    std::pair<const void*, const void*> kv_mappings() const { return kv_.mappings(); }
    int n_threads() const { return pool_.size(); }
    Isa isa() const { return isa_; }
    // The matrix the products read for t: the file's rows, or their copy in the packed weights' mapping, and the
    // packed form where there is one.
    WeightMatrix matrix(const TensorView& t) const { return weight_store_.matrix(t); }

private:
    // forward() after its batch check and before its logits check: the batch in parts (forward_part) where the
    // sliding-window rings need it. With `in`, from those hidden states [n_tokens, n_embd] instead of the
    // embeddings; with `out`, the hidden states after the last layer go there instead of the logits.
    void forward_logits(const Batch& batch, std::span<float> logits, const float* in = nullptr, float* out = nullptr);
    // layers_ over one part of the batch, as forward_logits says.
    void forward_part(const Batch& batch, std::span<float> logits, const float* in, float* out);
    void resize_scratch(int64_t n_tokens);
    void embed_rows(const Batch& batch, float* x);  // x [n_tokens, n_embd]
    // Each block leaves its output in proj_, added to x_ by the next block's residual_norm (in its parallel section,
    // each thread its rows) or, after the last layer, by residual_norm alone.
    void attention_block(const Batch& batch, const LayerWeights& L, int64_t layer);
    // the same place for a gated delta net (qwen35's recurrent layers; delta_net.cpp)
    void delta_net_block(const Batch& batch, const LayerWeights& L, int64_t layer);
    // and for a Mamba-2 layer (granitehybrid's; mamba2.cpp)
    void mamba2_block(const Batch& batch, const LayerWeights& L, int64_t layer);
    // and for a Mamba-1 layer (mamba's; mamba1.cpp)
    void mamba1_block(const Batch& batch, const LayerWeights& L, int64_t layer);
    // and for deepseek2's Multi-head Latent Attention (mla.cpp)
    void mla_block(const Batch& batch, const LayerWeights& L, int64_t layer);
    // its attention: lat [n, n_head, kv_lora_rank] = each row of q [n, n_head, kv_lora_rank + n_rot] attending over
    // its slot's cached latents and RoPE keys
    void mla_attend(const Batch& batch, int64_t layer, const float* q, float* lat);
    // deepseek32's lightning indexer (dsa_indexer.cpp): dsa_sel_, dsa_n_sel_ = the positions each token of the batch
    // attends to in `layer` (qa [n, q_lora_rank] the normed low-rank queries), the indexer keys stored; dsa_mask: a
    // token's scores s [n_kv] at -inf elsewhere; rope_indexer: rope() with the indexer's pairs (deepseek32: NEOX ones
    // whatever the model's)
    void dsa_select(const Batch& batch, const LayerWeights& L, int64_t layer, const float* qa);
    void dsa_mask(int64_t t, float* s, int64_t n_kv) const;
    void rope_indexer(float* x, int64_t n_heads, int64_t head_dim, int64_t t) const;
    // and for a short gated convolution (lfm2's recurrent layers; short_conv.cpp)
    void short_conv_block(const Batch& batch, const LayerWeights& L, int64_t layer);
    void ffn_block(const LayerWeights& L, int64_t layer, int64_t n);
    // out [n, n_embd] = W2 (act(W1 in) * W3 in) for in [n, n_embd] (act_ holds it when `ready`)
    void dense_ffn(const LayerWeights& L, int64_t layer, int64_t n, const float* in, bool ready, float* out);
    // the same without a gate, out = W2 relu_sqr(W3 in) (nemotron_h, arcee) or W2 xielu(W3 in) (apertus)
    void ungated_ffn(const LayerWeights& L, int64_t layer, int64_t n, const float* in, bool ready, float* out);
    void scale_residual(int64_t n);  // proj_ [n, n_embd] *= ModelConfig::residual_scale
    // gemma4 E2B/E4B: ple_ = each token's inputs of this backend's layers (ModelConfig::n_embd_per_layer), from the
    // embeddings x0 [n_tokens, n_embd]; per_layer_block: x_ += proj_, then proj_ = the layer's per-layer block of it.
    void per_layer_inputs(const Batch& batch, const float* x0);
    void per_layer_block(const LayerWeights& L, int64_t layer, int64_t n);
    // gemma3n (altup.cpp): AltUp's streams from the embeddings x_ (altup_embed); before a layer their prediction,
    // x_ its active stream and Laurel's branch over the attention's input (altup_predict); after the attention x_ =
    // (x_ + proj_ + laurel) / sqrt(2) (laurel_join); after the FFN the streams corrected by x_ + proj_ with the
    // per-layer input's block (altup_correct); after the last layer x_ = the streams merged (altup_merge). Each
    // leaves proj_ zero, so that the residual_norm after it adds nothing.
    void altup_embed(int64_t n);
    void altup_predict(const LayerWeights& L, int64_t n);
    void laurel_join(int64_t n);
    void altup_correct(const LayerWeights& L, int64_t layer, int64_t n);
    void altup_merge(int64_t n);
    // altup_r_ [n, n_altup] = AltUp's router of L over v [n, n_embd]
    void altup_router(const LayerWeights& L, const float* v, int64_t n);
    // y [n, n_embd] = W x, each row rescaled to the magnitude of target's row
    void altup_project(const TensorView& w, const float* x, const float* target, int64_t n, float* y);
    // gemma3n's sparse layers: gate_ [n, n_ff] cut below mean + sparsity_std_mul * std, row by row
    void sparsify_gate(int64_t n, int64_t n_ff);
    // ffn_block of a mixture-of-experts layer (moe.cpp); `summed`: x_ already holds the attention's output (gemma4's
    // experts beside a dense FFN, whose inputs have their own norms); `xn_ready`: the experts read xn_ as it is
    // (cohere2moe's parallel blocks: the attention's input)
    void moe_block(const LayerWeights& L, int64_t layer, int64_t n, bool summed = false, bool xn_ready = false);
    // after moe_block, the shared expert's gated output added to proj_ (ModelConfig::moe_shared_expert; moe.cpp), the
    // sum then multiplied by moe_shared_scale
    void shared_expert(const LayerWeights& L, int64_t layer, int64_t n);
    void output_block(const Batch& batch, std::span<float> logits);
    void rope_angles(const Batch& batch);
    void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t t, bool local) const;
    void store_kv(int64_t layer, const BatchToken& t, const float* k, const float* v);
    // n_decode: the leading decode steps among the n_tokens rows (Activations::set).
    // With x_ready, act_ already holds x and its int8 form (norm or ffn_block made them; see Activations::begin_int8).
    void mm(std::span<const MatmulJob> jobs, const float* x, int64_t n_tokens, int64_t n_in, int64_t n_decode,
            bool x_ready = false);
    // Whether the rows a parallel section writes for the product with w are quantized there (Activations::begin_int8).
    bool int8_in_section(const WeightMatrix& w, int64_t n) const;
    // rms_norm of n rows; with `next` (the product y feeds, n_decode its leading decode steps), also y's int8 form
    // for it where int8_in_section says so: then true, and act_ holds y.
    bool norm(const float* x, const float* w, float* y, int64_t n, const WeightMatrix* next = nullptr,
              int64_t n_decode = 0);
    bool rows_section(int64_t n, float* y, int64_t n_decode, const WeightMatrix* next,
                      const std::function<void(int64_t, int64_t)>& rows);
    // x_ += proj_ for n rows, the output of layer `layer` (its name in the error when a value is not finite), then
    // xn_ = rms_norm(x_) * w unless w is null, with xn_'s int8 form for `next` as norm() makes it (then true). With
    // a scale (the layer's out_scale after its FFN), x_ = (x_ + proj_) * scale.
    bool residual_norm(int64_t layer, const float* w, const WeightMatrix* next, int64_t n, float scale = 1.0f);
    // gemma4: layer's output scale (LayerWeights::out_scale), else 1
    float out_scale(int64_t layer) const {
        const std::vector<float>& s = weights_.layers[static_cast<size_t>(layer)].out_scale;
        return s.empty() ? 1.0f : s[0];
    }
    static void add_bias(float* x, const std::vector<float>& b, int64_t n);

    const ModelConfig& config_;
    const Weights& weights_;
    LayerRange layers_;  // the layers this backend holds
    bool reference_;
    Isa isa_;
    ThreadPool pool_;
    const KvOps& kv_ops_;
    std::vector<double> rope_inv_freq_;  // [n_rot / 2] freq_scale * base^(-2i/n_rot) / rope_freqs[i]
    std::vector<double> rope_inv_freq_local_;  // the same for the local layers when their RoPE differs (two_ropes)
    WeightStore weight_store_;  // empty on the reference path

    KvCache kv_;
    AttentionRunner attention_;
    RecurrentState recurrent_;  // qwen35's and lfm2's recurrent layers' states (empty for the other models)

    // Scratch for one batch of n tokens.
    Activations act_;
    Activations ffn_act_;  // the down product's input when ffn_block makes it in the gate and up section
    // Features per unit of that section: two 32-blocks, a line of the int8 form's scales (tile_scale_entry), so
    // that two threads' blocks never share one (a unit of 128 features was slower).
    static constexpr int64_t kFfnUnit = 64;
    int64_t n_decode_ = 0;  // decode steps leading the current batch
    std::vector<float> x_;       // [n, n_embd] residual stream
    std::vector<float> xn_;      // [n, n_embd] normed input of a block
    // (in a layer's own head_dim and n_head_kv, room for the widest's: ModelConfig::n_embd_q, n_embd_kv)
    std::vector<float> q_;       // [n, n_head * head_dim]
    std::vector<float> k_;       // [n, n_head_kv * head_dim]
    std::vector<float> v_;       // [n, n_head_kv * head_dim]
    std::vector<float> att_;     // [n, n_head * head_dim] attention output
    std::vector<float> q_gate_;     // [n, n_head, 2, head_dim] qwen35's Wq xn: each head's query, then its gate
    std::vector<float> attn_gate_;  // [n, n_head * head_dim] the gates
    // qwen35's gated delta net (delta_net_block; mamba2_block: W_in xn [n, 2 ssm_d_inner + ssm_conv_channels +
    // ssm_n_v_heads] in ssm_qkv_, x, B, C after the conv in ssm_conv_, y in ssm_o_)
    // (lfm2's short conv, short_conv_block: ssm_qkv_ [n, 3, n_embd] b, c, x; ssm_conv_ [n, n_embd] c * conv)
    std::vector<float> ssm_qkv_;    // [n, ssm_conv_channels] W_in xn
    std::vector<float> ssm_conv_;   // [n, ssm_conv_channels] q, k, v after the conv
    std::vector<float> ssm_z_;      // [n, ssm_d_inner] W_z xn
    std::vector<float> ssm_beta_;   // [n, ssm_n_v_heads] W_beta xn
    std::vector<float> ssm_alpha_;  // [n, ssm_n_v_heads] W_alpha xn
    std::vector<float> ssm_o_;      // [n, ssm_d_inner] the gated output before W_out
    // (Mamba-1, mamba1_block: ssm_qkv_ [n, 2, ssm_d_inner] x, z; ssm_conv_ [n, ssm_d_inner] x after the conv)
    std::vector<float> ssm_dbc_;    // [n, ssm_dt_rank + 2 ssm_head_k] W_x x: dt, B, C
    std::vector<float> ssm_dt_in_;  // [n, ssm_dt_rank] dt alone, W_dt's input
    std::vector<float> ssm_dt_;     // [n, ssm_d_inner] W_dt dt
    // deepseek2's MLA (mla_block)
    std::vector<float> mla_qa_;      // [n, q_lora_rank] the low-rank query, normed
    std::vector<float> mla_q_;       // [n, n_head, head_dim] the query: dims without RoPE, then with
    std::vector<float> mla_kv_;      // [n, kv_lora_rank + n_rot] the latent, then the RoPE key
    std::vector<float> mla_qabs_;    // [n, n_head, kv_lora_rank + n_rot] Wk_b q_nope beside q_pe, each head's
    std::vector<float> mla_in_;      // [n, max(head_dim, kv_lora_rank)] one head's rows gathered
    std::vector<float> mla_out_;     // [n, max(kv_lora_rank, head_dim_v)] one head's product
    std::vector<float> mla_lat_;     // [n, n_head, kv_lora_rank] the attention's output in the latent
    std::vector<float> mla_scores_;  // [n_threads, n_ctx + 8] a row's scores
    // deepseek32's lightning indexer (dsa_select)
    std::vector<float> dsa_q_;         // [n, indexer_n_head, indexer_head_dim] its queries, rotated
    std::vector<float> dsa_k_;         // [n, indexer_head_dim] its keys, rotated
    std::vector<float> dsa_w_;         // [n, indexer_n_head] its heads' weights, scaled
    std::vector<int32_t> dsa_sel_;     // [n, indexer_top_k] each token's kept positions, ascending
    std::vector<int64_t> dsa_n_sel_;   // [n] their count (0: every position)
    std::vector<float> dsa_scratch_;   // [n_threads, indexer_head_dim + n_ctx] a key in float, the scores
    // qwen3next: its products grouped by key head, before ungroup_qkvz and ungroup_ba (delta_net_layout.h)
    std::vector<float> ssm_qkvz_;   // [n, ssm_conv_channels + ssm_d_inner] W_in xn (its older files' ssm_in)
    std::vector<float> ssm_ba_;     // [n, 2 ssm_n_v_heads] W_ba xn
    std::vector<float> proj_;    // [n, n_embd] output of wo / ffn_down
    // [n, n_embd] command-r, cohere2: the attention's proj beside the FFN's; falcon-h1: beside the Mamba-2 mixer's
    std::vector<float> attn_proj_;
    std::vector<float> ones_;    // [head_dim] the weight of gemma4's V norm and llama4's Q/K norm
    std::vector<float> gate_;    // [n, n_ff]
    std::vector<float> up_;      // [n, n_ff]
    // Mixture of experts (moe_block): the batch's routing, then each expert's product over its m tokens.
    MoeRouting moe_routing_;
    std::vector<float> moe_logits_;  // [n, n_expert] router logits
    std::vector<float> moe_x_;       // [m, n_embd] the expert's tokens' rows of xn
    std::vector<float> moe_gate_;    // [m, n_ff_exp]
    std::vector<float> moe_up_;      // [m, n_ff_exp]
    std::vector<float> moe_down_;    // [m, n_embd]
    std::vector<float> shared_;      // [n, n_embd] the dense FFN's output beside the experts' (gemma4, shared expert)
    // gemma4 E2B/E4B (per_layer_inputs): each token's inputs of this backend's layers, the gate of a layer's block,
    // a token's row of per_layer_token_embd, and the rows of per_layer_model_proj these layers read.
    std::vector<float> ple_;       // [n, layers_.size(), n_embd_per_layer]
    std::vector<float> ple_gate_;  // [n, n_embd_per_layer]
    std::vector<float> ple_row_;   // [n_layer * n_embd_per_layer]
    TensorView ple_proj_;          // [layers_.size() * n_embd_per_layer rows, n_embd]
    // gemma3n (altup.cpp): the streams, their prediction in the current layer, the router's outputs, Laurel's
    // branch and its low-rank middle, a row scratch
    std::vector<float> altup_streams_;  // [n_altup, n, n_embd]
    std::vector<float> altup_pred_;     // [n_altup, n, n_embd]
    std::vector<float> altup_r_;        // [n, n_altup]
    std::vector<float> laurel_;         // [n, n_embd]
    std::vector<float> laurel_low_;     // [n, laurel rank]
    std::vector<float> altup_tmp_;      // [n, n_embd]
    std::vector<float> greedy_logits_;  // forward_sample's logits [n_logits, n_vocab]
    struct Pick {
        float value;
        int32_t id;  // -1: none
    };
    std::vector<Pick> picks_;  // forward_sample's [n_threads, n_logits]: each range's first maximum
    // [n, 2, n_rot] each token's cosines, then sines, per dimension in rope()'s order: for adjacent pairs each
    // angle's twice (the first sine negated), for neox halves each angle once (then n_rot / 2 of each are used).
    std::vector<float> rope_cs_;
    std::vector<float> rope_cs_local_;  // the same for the local layers (two_ropes only; their n_rot)
};

}  // namespace quill::cpu
