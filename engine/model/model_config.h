// Hyperparameters of a model, read from GGUF metadata and validated.
#pragma once

#include "engine/format/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace quill {

struct ModelConfig {
    std::string arch;  // general.architecture, or the architecture a variant of it runs as (file_arch)
    // The file's general.architecture where it names a text model that runs as another (qwen2vl, qwen3vl and
    // qwen3vlmoe: the language models of Qwen2-VL/2.5-VL and Qwen3-VL, as qwen2, qwen3 and qwen3moe with M-RoPE);
    // its metadata keys start with it. Empty: arch.
    std::string file_arch;
    const std::string& gguf_arch() const { return file_arch.empty() ? arch : file_arch; }
    std::string name;  // general.name, or the file stem when absent
    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;  // < n_head for grouped-query attention
    int64_t head_dim = 0;   // attention.key_length, else n_embd / n_head
    int64_t n_ff = 0;
    int64_t n_ctx_train = 0;  // context length the model was trained for
    int64_t n_rot = 0;        // rope.dimension_count, else head_dim
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    float rope_freq_scale = 1.0f;  // linear RoPE scaling: positions are multiplied by this
    // Which dimensions RoPE rotates together: adjacent pairs (x[2i], x[2i+1]) for llama GGUFs (the converter
    // permutes Q and K for it), the two halves (x[i], x[i + n_rot/2]) for qwen2 ("NEOX" style).
    enum class Rope { adjacent, neox };
    Rope rope = Rope::adjacent;

    // Per-architecture settings of the one forward pass (llama's values are the defaults).
    // The FFN's gate: SwiGLU (llama, qwen2), GeGLU (gemma3), or gpt-oss's clamped SwiGLU, act(g, u) =
    // min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1) (alpha 1.702 and limit 7, as
    // llama.cpp sets them: gpt-oss files do not carry them).
    // nemotron_h, arcee: relu_sqr, an FFN without a gate, W2 max(W3 xn, 0)^2 (ffn_up; the layers have no ffn_gate).
    // apertus: xielu, without a gate too, W2 xielu_l(W3 xn) with layer l's parameters (xielu_params).
    enum class Activation { silu, gelu_tanh, swiglu_oai, relu_sqr, xielu };
    bool ffn_gated() const { return ffn_act != Activation::relu_sqr && ffn_act != Activation::xielu; }
    Activation ffn_act = Activation::silu;
    // apertus's xIELU: the file's alpha_n, alpha_p, beta and eps of each layer ([n_layer] each; xielu.* keys, one value
    // for every layer or one a layer). xielu(u) = ap u^2 + beta u for u > 0, else (expm1(min(u, eps)) - u) an + beta u,
    // with ap = softplus(alpha_p) and an = beta + softplus(alpha_n) (in float, as llama.cpp's ggml_xielu forms them).
    std::vector<float> xielu_alpha_n, xielu_alpha_p, xielu_beta, xielu_eps;
    struct Xielu {
        float an, ap, beta, eps;
    };
    Xielu xielu_params(int64_t layer) const {
        auto softplus = [](float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); };
        const auto l = static_cast<size_t>(layer);
        return {xielu_beta[l] + softplus(xielu_alpha_n[l]), softplus(xielu_alpha_p[l]), xielu_beta[l], xielu_eps[l]};
    }
    float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;
    float embd_scale = 1.0f;        // x = token_embd[token] * embd_scale (gemma3: sqrt(n_embd))
    float attn_scale = 0.0f;        // score = q . k * attn_scale; set by from_gguf (1 / sqrt(head_dim) by default)
    float final_logit_softcap = 0;  // logits = cap * tanh(logits / cap) when > 0
    float attn_logit_softcap = 0;   // score = cap * tanh(q . k * attn_scale / cap) before the softmax when > 0 (gemma2)
    // Sliding-window attention: a local layer's token at position p sees keys p - sliding_window + 1 .. p. With
    // swa_pattern N > 0 every Nth layer (l % N == N - 1) is global and the rest local (gemma3: N = 6); with N = 0
    // every layer is local (mistral). sliding_window 0: every layer global.
    int64_t sliding_window = 0;
    int64_t swa_pattern = 0;
    // granite_swa, cohere2moe, step35, laguna: true where layer (or block) l is local, as the file's
    // attention.sliding_window_pattern array says (or a pattern N with the first layer of each N global); past its
    // end a layer is global; empty: by swa_pattern
    std::vector<bool> local_layers;
    // granite_swa: [n_layer] true where layer l rotates (attention.rope_pattern); cohere2moe: its local layers and its
    // leading dense ones; empty: by no_rope_step
    std::vector<bool> rope_layers;
    float rope_base_local = 10000.0f;       // RoPE base of the local layers (gemma3: 10,000; else rope_base)
    float rope_freq_scale_local = 1.0f;     // and their linear scaling (gemma3: none; else rope_freq_scale)
    // olmo2 with a window (OLMo 3): the local layers rotate without YaRN's magnitude scale either (as llama.cpp's
    // olmo2 rotates them: no scaling at all), the global ones with the file's YaRN.
    bool rope_local_plain = false;
    float layer_rope_mscale(bool local) const { return local && rope_local_plain ? 1.0f : rope_mscale; }
    // YaRN RoPE scaling (rope.scaling.type yarn: Qwen long-context files, mistral3): pair i's frequency blends the
    // scaled one (rope_freq_scale) and the unscaled one by a ramp over the pairs between the correction dims of
    // beta_fast and beta_slow rotations in yarn_n_ctx_orig positions, and every cosine and sine is multiplied by
    // rope_mscale. yarn_ramp(i) says how much of pair i stays unscaled.
    bool rope_yarn = false;
    // rope.scaling.original_context_length, else context_length. A file with long and short RoPE factor tensors
    // (phi3) also rotates by the long ones when a sequence's context is longer than this (Weights::rope_inv_freq).
    int64_t yarn_n_ctx_orig = 0;
    float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
    // RoPE's cosines and sines, and so the rotated dims of Q and K, are multiplied by this: rope.scaling.attn_factor
    // (phi3's long-context files), times YaRN's magnitude scale with YaRN. 1: none.
    float rope_mscale = 1.0f;
    // M-RoPE (rope.dimension_sections: qwen2vl; interleaved, as llama.cpp's IMROPE: qwen3vl, qwen3vlmoe, qwen35): the
    // pairs' sections of the temporal, height, width and extra positions, pair i in section sector(i % sum). Text
    // gives the first three the token's position and the extra one 0 (as llama.cpp feeds text tokens), so a pair of
    // the extra section never rotates (rope_pair_still) and the others rotate as plain NEOX pairs. All 0: none.
    int64_t rope_sections[4] = {0, 0, 0, 0};
    bool rope_sections_interleaved = false;
    bool rope_pair_still(int64_t pair) const;
    // smollm3: layer l has no RoPE when (l + 1) % no_rope_step == 0 (0: every layer has RoPE).
    int64_t no_rope_step = 0;
    // Llama 4's attention temperature (mistral3, llama4; deepseek2: Mistral Large 3): queries are multiplied by
    // 1 + attn_temp_scale * log(floor((pos + attn_temp_offset) / attn_temp_floor) + 1) after RoPE (llama4: offset 1,
    // on the layers without RoPE only: attn_temp_nope_only); 0: no scaling.
    float attn_temp_scale = 0.0f;
    int64_t attn_temp_floor = 0;
    int64_t attn_temp_offset = 0;
    bool attn_temp_nope_only = false;
    // llama4: chunked attention. On a chunked layer (l % attn_chunk_pattern < attn_chunk_pattern - 1; pattern 0:
    // every layer) a token at position pos sees only the keys of its own chunk, (pos / attn_chunk) * attn_chunk ..
    // pos. 0: none.
    int64_t attn_chunk = 0, attn_chunk_pattern = 0;
    bool layer_is_chunked(int64_t layer) const {
        return attn_chunk > 0 && (attn_chunk_pattern == 0 || layer % attn_chunk_pattern < attn_chunk_pattern - 1);
    }
    // llama4 (Llama4TextL2Norm): on the layers with RoPE each Q and K head is divided by its root mean square
    // (rms_eps, no weight) after RoPE
    bool qk_l2_norm = false;
    // hunyuan-dense, hunyuan-moe: the Q and K heads' RMS norms (attn_q_norm, attn_k_norm) come after RoPE, not before
    bool qk_norm_after_rope = false;
    // hunyuan-dense: rope.scaling.alpha (NTK-aware scaling), already in rope_base: the file's rope.freq_base times
    // alpha^(head_dim / (head_dim - 2)), as llama.cpp folds it in (its converter folds it into freq_base itself).
    // 0: none.
    float rope_alpha = 0.0f;
    // Mixture of experts (qwen3moe, gpt-oss): each layer's FFN is n_expert SwiGLU experts of n_ff_exp features, of
    // which a router picks n_expert_used per token (those of the largest logits), weighted by the softmax over the
    // chosen logits alone (qwen3moe's softmax over all of them renormalized over the chosen is the same function;
    // gpt-oss's llama.cpp gating, SOFTMAX_WEIGHT, is this form); n_expert 0: a dense FFN of n_ff features.
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;
    // gemma4 (26B-A4B): a dense FFN of n_ff features beside the experts in every layer, out = post_norm_1(ffn(x)) +
    // post_norm_2(experts), each with its own input norm, the router reading rms_norm(x) / sqrt(n_embd) * its scale,
    // GeGLU experts whose outputs are scaled per expert
    bool moe_shared_ffn = false;
    // A shared expert beside the routed ones (qwen2moe, qwen35moe): a SwiGLU FFN of n_ff features (the file's
    // expert_shared_feed_forward_length, else feed_forward_length) reading the experts' input xn, its output
    // multiplied per token by sigmoid(ffn_gate_inp_shexp . xn) when moe_shared_gate, then added to the experts' sum.
    bool moe_shared_expert = false;
    bool moe_shared_gate = false;
    // cohere2moe: the experts' sum plus the shared expert's output, multiplied by this (0.5: their average)
    float moe_shared_scale = 1.0f;
    // The chosen experts' weights: the softmax over their logits (true), or (qwen2moe, llama.cpp's norm_w off) their
    // shares of the softmax over all n_expert logits, not renormalized.
    bool moe_norm_weights = true;
    // DeepSeek-V3-style routing (glm4moe, lfm2moe; deepseek2 uses the same fields). moe_gating_sigmoid: each expert's
    // probability is sigmoid(its logit), not the softmax, and the chosen experts' weights are those probabilities
    // (divided by their sum, at least 2^-14, when moe_norm_weights, as llama.cpp clamps it). moe_selection_bias: a
    // per-layer bias [n_expert] (the file's exp_probs_b.bias) is added to the probabilities to choose the experts and
    // weights none of them. The weights are then multiplied by moe_weights_scale (expert_weights_scale).
    bool moe_gating_sigmoid = false;
    bool moe_selection_bias = false;
    float moe_weights_scale = 1.0f;
    // The first n_leading_dense layers have a dense FFN (ffn_gate, ffn_up, ffn_down of layer_n_ff(l) features) instead
    // of the experts (leading_dense_block_count: glm4moe, lfm2moe, deepseek2)
    int64_t n_leading_dense = 0;
    // llama4 (interleave_moe_layer_step): the experts in every moe_layer_step-th layer ((l + 1) % step == 0), a dense
    // FFN of n_ff in the others (Maverick: 2); 0 or 1: every layer
    int64_t moe_layer_step = 0;
    // llama4: each chosen expert reads the token's input times the expert's weight, sigmoid(its logit), and its output
    // joins the sum unweighted (llama.cpp's weight_before_ffn); the experts are chosen by their logits
    bool moe_weight_input = false;
    // glm4moe: the multi-token-prediction blocks after the last layer (nextn_predict_layers), which the file holds and
    // the forward never runs (as llama.cpp by default); block_count is n_layer + n_layer_nextn.
    int64_t n_layer_nextn = 0;
    bool moe() const { return n_expert > 0; }
    // Whether layer l routes its tokens through experts (a mixture's leading dense layers do not, nor nemotron_h_moe's
    // layers without an FFN, nor llama4's between its every moe_layer_step-th)
    bool layer_moe(int64_t layer) const {
        return moe() && layer >= n_leading_dense && layer_has_ffn(layer) &&
               (moe_layer_step <= 1 || (layer + 1) % moe_layer_step == 0);
    }
    // deepseek2, nemotron_h_moe, bailingmoe2, dots1, afmoe: expert groups (expert_group_count,
    // expert_group_used_count): the experts are chosen among the moe_n_group_used of moe_n_group equal runs of them
    // whose two best biased probabilities sum highest
    int64_t moe_n_group = 0, moe_n_group_used = 0;
    // Whether the experts are chosen by DeepSeek's rule (route_experts, engine/model/moe_route.h: probabilities
    // first, then the selection bias, the groups, the normalization and the scale): sigmoid gating, a selection bias,
    // groups or a scale (glm4moe, lfm2moe), llama4's weighted inputs, and deepseek2 always. Else the softmax of the
    // largest logits (plus gpt-oss's router bias; qwen2moe's shares of the softmax over all).
    bool moe_routing_general() const {
        return moe_gating_sigmoid || moe_selection_bias || moe_n_group > 1 || moe_weights_scale != 1.0f ||
               moe_weight_input || arch == "deepseek2";
    }
    // Whether a layer has a dense FFN (ffn_gate, ffn_up, ffn_down): without experts, or beside them (gemma4's, the
    // shared expert), or some layers (the leading dense ones)
    bool dense_ffn() const {
        return !moe() || moe_shared_ffn || moe_shared_expert || n_leading_dense > 0 || moe_layer_step > 1;
    }
    bool layer_dense_ffn(int64_t layer) const {
        return !layer_moe(layer) || moe_shared_ffn || moe_shared_expert;
    }
    // gemma4: the local layers' own head size, KV heads and rotated dims (attention.key_length_swa,
    // head_count_kv's local entries, rope.dimension_count_swa); 0: the same as the global layers' (head_dim,
    // n_head_kv, n_rot). The KV cache's row is the widest layer's (kv_heads, kv_head_dim); a narrower layer uses the
    // first values of it.
    // step35: the local layers' own query heads too (attention.head_count's local entries; n_head_local, 0: n_head).
    int64_t head_dim_local = 0, n_head_kv_local = 0, n_rot_local = 0, n_head_local = 0;
    // gemma4: each V head is RMS-normalized (no weight) before it is cached, and a layer without attn_v takes V from
    // K's projection (before K's norm and RoPE)
    bool v_norm = false;
    // gemma4: rope_freqs divides the global layers' frequencies only (its "proportional" RoPE); else every layer's
    bool rope_divisors_global_only = false;
    // olmo2, exaone4: the attention and the FFN read the residual stream itself (no attn_norm, ffn_norm); their
    // outputs are normalized instead (attn_post_norm, ffn_post_norm)
    bool input_norms = true;
    // olmo2, minimax-m2, olmoe: Q's and K's RMS norms span the whole projection (all heads together: attn_q_norm of
    // n_head * head_dim, attn_k_norm of n_head_kv * head_dim), not each head
    bool qk_norm_whole = false;
    // granite: each block's output is multiplied by this before it joins the residual stream (residual_scale), and
    // the logits are divided by logit_scale (1: neither)
    float residual_scale = 1.0f;
    float logit_scale = 1.0f;
    // command-r, cohere2 (Cohere's Command R family): every norm is a LayerNorm without bias, (x - mean(x)) /
    // sqrt(var(x) + rms_eps) * w (rms_eps then the file's attention.layer_norm_epsilon); a Q or K norm of a weight row
    // per head (command-r's R+) normalizes each head by its own row. The logits are multiplied by logit_mul (their
    // files' logit_scale; 1: none).
    bool layer_norm = false;
    float logit_mul = 1.0f;
    // command-r, cohere2: the attention and the FFN read the same normed input (attn_norm; there is no ffn_norm) and
    // both outputs join the residual stream, x = x + ffn(xn) + attn(xn)
    bool parallel_blocks = false;

    // qwen35 (Qwen3.5): a hybrid of full-attention layers, every full_attn_interval-th (l % N == N - 1), and
    // linear-attention layers between them, each a gated delta net: a recurrent state per sequence (no KV cache)
    // fed by a causal conv1d of ssm_conv taps over the projected q, k, v (ssm_n_k_heads heads of ssm_head_k for q
    // and k, ssm_n_v_heads of ssm_head_v for v; v head h reads q, k head ssm_k_head(h)). 0: no recurrent layers.
    int64_t full_attn_interval = 0;
    int64_t ssm_conv = 0, ssm_head_k = 0, ssm_n_k_heads = 0, ssm_head_v = 0, ssm_n_v_heads = 0;
    // qwen3next (Qwen3-Next, which Qwen3.5 descends from; it runs as qwen35moe): each key head serves a group of
    // ssm_n_v_heads / ssm_n_k_heads consecutive value heads (v head h reads key head h / group, where qwen35's reads
    // h % ssm_n_k_heads), and the file's fused input projections are grouped by key head the same way: ssm_ba holds
    // each key head's group of betas then its alphas, and the older files' ssm_in (before llama.cpp's converter
    // split it into attn_qkv and attn_gate) each key head's q, k, then its group's v and z (delta_net_layout.h).
    bool ssm_grouped = false;
    int64_t ssm_k_head(int64_t v_head) const {
        return ssm_grouped ? v_head / (ssm_n_v_heads / ssm_n_k_heads) : v_head % ssm_n_k_heads;
    }
    // qwen35's full-attention layers: Wq gives each head's query and then its output gate, att_h *= sigmoid(gate_h)
    bool attn_out_gate = false;
    // afmoe: the gate is a projection of its own, att *= sigmoid(W_gate xn) (attn_gate [n_embd_q rows, n_embd]);
    // step35: one gate a head (attn_gate_per_head: attn_gate [n_head rows, n_embd]), att_h *= sigmoid(gate_h)
    // laguna: either, times softplus(gate) instead, softplus(g) = log(1 + e^g) (g past 20: g itself, as ggml's)
    bool attn_gate_proj = false;
    bool attn_gate_per_head = false;
    bool attn_gate_softplus = false;
    template <class T>
    T attn_gate_value(T g) const {
        if (attn_gate_softplus) return g > T(20) ? g : std::log(T(1) + std::exp(g));
        return T(1) / (T(1) + std::exp(-g));
    }
    int64_t layer_n_gate(int64_t layer) const {
        return attn_gate_per_head ? layer_n_head(layer) : layer_n_embd_q(layer);
    }
    // step35: the SwiGLU of layer l's experts (swiglu_clamp_exp) and of its dense FFN or shared expert
    // (swiglu_clamp_shexp) clamped where the limit is > 0: silu(g) capped at the limit times u clamped to +-limit
    // ([n_layer] each; empty: none)
    std::vector<float> swiglu_clamp_exp, swiglu_clamp_shexp;
    static float layer_clamp(const std::vector<float>& limits, int64_t layer) {
        return limits.empty() ? 0.0f : limits[static_cast<size_t>(layer)];
    }
    // granitehybrid (Granite 4.0 H): the layers whose attention.head_count_kv entry is 0 are Mamba-2 layers (1 here;
    // empty: none), in the same ssm_* sizes: ssm_n_v_heads heads (ssm.time_step_rank) of ssm_head_v channels of x,
    // ssm_n_k_heads groups (ssm.group_count) of B and C of ssm_head_k (ssm.state_size), so that the conv's channels
    // (x, B, C) and the state [heads, head_dim, d_state] are a gated delta net's; head h reads group
    // h / (heads / groups).
    std::vector<uint8_t> mamba2_layers;
    bool mamba2() const { return !mamba2_layers.empty(); }
    // mamba (Mamba-1: state-spaces' mamba-*, falcon-mamba): the layers where mamba1_layers says (1; empty: none) are
    // Mamba-1 mixers: [x, z] = W_in xn (ssm_d_inner each), x = silu(conv1d(x) + b) over ssm_conv taps of each
    // channel; [dt, B, C] = W_x x (ssm_dt_rank, d_state, d_state), each RMS-normed where ssm_dt_b_c_rms (falcon-mamba;
    // by its weight where the layer has one); channel i: d = softplus((W_dt dt)_i + dt_bias_i), S_i = S_i exp(d A_i) +
    // d x_i B, y_i = S_i . C + D_i x_i (A [d_inner, d_state]); out = W_out (y * silu(z)). In the ssm_* sizes: d_inner
    // heads (ssm_n_v_heads) of one channel (ssm_head_v 1), one group (ssm_n_k_heads 1) of d_state (ssm_head_k), the
    // conv over the d_inner channels of x alone.
    std::vector<uint8_t> mamba1_layers;
    int64_t ssm_dt_rank = 0;
    bool ssm_dt_b_c_rms = false;
    bool mamba1() const { return !mamba1_layers.empty(); }
    // falcon-h1 (Falcon-H1): every layer runs attention and its Mamba-2 mixer side by side on the same normed input,
    // x = x + (attn(xn) + mamba2(xn)), then the FFN; the layer keeps a KV cache and a recurrent state (the file's muP
    // multipliers are folded into its weights by the converter: nothing to apply)
    bool ssm_beside_attn = false;
    // lfm2 (LFM2): a hybrid of attention layers and short gated convolutions, the layers whose
    // attention.head_count_kv is 0: out = W_out (c * conv(b * x)), [b, c, x] = W_in xn, conv a causal depthwise conv
    // of ssm_conv taps (shortconv.l_cache) over each of the n_embd channels, fed by a window of the ssm_conv - 1
    // inputs before, the layer's recurrent state per sequence. [n_layer] true at a short conv layer; empty: none.
    std::vector<bool> short_conv_layers;
    bool layer_is_short_conv(int64_t layer) const {
        return !short_conv_layers.empty() && short_conv_layers[static_cast<size_t>(layer)];
    }
    // nemotron_h (Nemotron-H): a layer holds one block where a layer of the others holds a mixer and an FFN: [n_layer]
    // the blocks each layer has, kMixerBlock (attention, or Mamba-2 where mamba2_layers says) and kFfnBlock, each
    // behind the layer's attn_norm. Empty: every layer has both.
    static constexpr uint8_t kMixerBlock = 1, kFfnBlock = 2;
    std::vector<uint8_t> layer_blocks;
    bool layer_has_mixer(int64_t layer) const {
        return layer_blocks.empty() || (layer_blocks[static_cast<size_t>(layer)] & kMixerBlock) != 0;
    }
    bool layer_has_ffn(int64_t layer) const {
        return layer_blocks.empty() || (layer_blocks[static_cast<size_t>(layer)] & kFfnBlock) != 0;
    }
    // (full_attn_interval 1: every layer full attention)
    bool recurrent() const { return full_attn_interval > 1 || mamba2() || mamba1() || !short_conv_layers.empty(); }
    bool layer_is_recurrent(int64_t layer) const {
        if (mamba2()) return mamba2_layers[static_cast<size_t>(layer)] != 0;
        if (mamba1()) return mamba1_layers[static_cast<size_t>(layer)] != 0;
        return (full_attn_interval > 0 && layer % full_attn_interval != full_attn_interval - 1) ||
               layer_is_short_conv(layer);
    }
    // The conv's channels: the delta net's q, k, v (Mamba-2's x, B, C; Mamba-1's x alone), or a short conv's n_embd
    int64_t ssm_conv_channels() const {
        if (mamba1()) return ssm_d_inner();
        return short_conv_layers.empty() ? 2 * ssm_n_k_heads * ssm_head_k + ssm_n_v_heads * ssm_head_v : n_embd;
    }
    int64_t ssm_d_inner() const { return ssm_n_v_heads * ssm_head_v; }
    // gemma4 (E2B): the FFN's width of each layer (feed_forward_length as an array); glm4moe: n_ff in the leading
    // dense layers, the shared expert's width in the others. Empty: n_ff in every layer; n_ff is then the widest
    // layer's.
    std::vector<int64_t> n_ff_layers;
    // gemma4 (E2B, E4B): per-layer token embeddings of n_embd_per_layer values a layer (0: none). Each token's input
    // of layer l, (rms_norm(W_mp[l] x0 / sqrt(n_embd)) * proj_norm + per_layer_token_embd[token][l] *
    // sqrt(n_embd_per_layer)) / sqrt(2) with x0 its scaled embedding, gates a block after the FFN: x = x +
    // rms_norm(W_proj (gelu(W_gate x) * input_l)) * post_norm.
    int64_t n_embd_per_layer = 0;
    // gemma4 (E2B, E4B): the last n_kv_shared layers store no K and V; each attends over the cache of the last layer
    // of its kind that has one (attention.shared_kv_layers; kv_layer).
    int64_t n_kv_shared = 0;
    // gemma3n (Gemma 3n E2B, E4B): AltUp, n_altup hidden streams of n_embd a token (0: one stream, none of this).
    // Before the layers stream 0 is the scaled embedding x0 and stream k > 0 is W_altup_proj[k-1] x0 rescaled to
    // |x0|. Each layer predicts, corrects, and runs its blocks on the active stream (altup_active):
    //   r(v) = tanh(W_router (rms_norm(v) * router_norm / n_embd))                        [n_altup]
    //   predict: p_j = s_j + sum_k (W_predict r(s_act))[j * n_altup + k] s_k
    //   the blocks read p_act; their output a; correct: s_j = p_j + (a - p_act) ((W_correct r(a))_j + 1)
    //   then the per-layer input's block adds rms_norm(W_proj (gelu(W_gate (s_act * correct_scale)) * ple[l]))
    //   * post_norm to every stream but the first.
    // After the layers stream k > 0 is W_altup_unembd[k-1] s_k rescaled to |s_act|, and the token's output the mean
    // of the streams.
    int64_t n_altup = 0, altup_active = 0;
    bool altup() const { return n_altup > 0; }
    // gemma3n: Laurel, a low-rank branch beside the attention (the layers with laurel_l, laurel_r): over the
    // attention's input xn, laurel = xn + rms_norm(W_r W_l xn) * laurel_post_norm, and the FFN's residual is
    // (x + attention + laurel) / sqrt(2).
    // gemma3n: activation sparsity of the FFN's gate in the first n_sparse_layers layers (as llama.cpp fixes it: 10,
    // at the 95th percentile): g = max(g - (mean(g) + sparsity_std_mul * std(g)), 0) before the activation, the
    // standard deviation with n - 1.
    int64_t n_sparse_layers = 0;
    float sparsity_std_mul = 0.0f;
    bool layer_sparse(int64_t layer) const { return layer < n_sparse_layers; }

    bool layer_has_rope(int64_t layer) const {
        const auto l = static_cast<size_t>(layer);  // (a NextN block past the array: none)
        if (!rope_layers.empty()) return l < rope_layers.size() && rope_layers[l];
        return no_rope_step == 0 || (layer + 1) % no_rope_step != 0;
    }
    // The factor of the queries of a token at `pos` (1 without the temperature).
    double attn_temp(int64_t pos) const {
        if (attn_temp_scale == 0.0f) return 1.0;
        return 1.0 + attn_temp_scale * std::log(std::floor(static_cast<double>(pos + attn_temp_offset) /
                                                           static_cast<double>(attn_temp_floor)) + 1.0);
    }
    // Whether a layer's queries take the temperature (llama4: its layers without RoPE only)
    bool layer_attn_temp(int64_t layer) const {
        return attn_temp_scale != 0.0f && !(attn_temp_nope_only && layer_has_rope(layer));
    }
    // YaRN: the share in [0, 1] of pair i (dims 2i, 2i+1 of n_rot) whose frequency stays unscaled; 0 without YaRN.
    double yarn_ramp(int64_t i) const;

    bool layer_is_local(int64_t layer) const {
        const auto l = static_cast<size_t>(layer);  // (a NextN block past the array: global)
        if (sliding_window > 0 && !local_layers.empty()) return l < local_layers.size() && local_layers[l];
        return sliding_window > 0 && (swa_pattern == 0 || layer % swa_pattern != swa_pattern - 1);
    }
    // The first position a token at `pos` of this layer attends to.
    int64_t first_visible(int64_t layer, int64_t pos) const {
        if (layer_is_chunked(layer)) return pos / attn_chunk * attn_chunk;
        return layer_is_local(layer) && pos >= sliding_window ? pos - sliding_window + 1 : 0;
    }
    // Whether the local layers' RoPE differs from the global one (then backends keep two angle tables).
    bool two_ropes() const {
        return sliding_window > 0 && (rope_base_local != rope_base || rope_freq_scale_local != rope_freq_scale ||
                                      (n_rot_local > 0 && n_rot_local != n_rot) || rope_local_plain ||
                                      rope_divisors_global_only);
    }
    // The attention geometry of a layer: its head size, KV heads and rotated dims (a local layer's may differ:
    // head_dim_local), and its Q and K (or V) widths per token.
    int64_t layer_head_dim(int64_t layer) const {
        return head_dim_local > 0 && layer_is_local(layer) ? head_dim_local : head_dim;
    }
    int64_t layer_n_head_kv(int64_t layer) const {
        return n_head_kv_local > 0 && layer_is_local(layer) ? n_head_kv_local : n_head_kv;
    }
    int64_t layer_n_rot(int64_t layer) const { return n_rot_local > 0 && layer_is_local(layer) ? n_rot_local : n_rot; }
    int64_t layer_n_head(int64_t layer) const {
        return n_head_local > 0 && layer_is_local(layer) ? n_head_local : n_head;
    }
    int64_t layer_n_embd_q(int64_t layer) const { return layer_n_head(layer) * layer_head_dim(layer); }
    int64_t layer_n_ff(int64_t layer) const {
        return n_ff_layers.empty() ? n_ff : n_ff_layers[static_cast<size_t>(layer)];
    }
    // deepseek2's Multi-head Latent Attention (kv_lora_rank > 0): a query of n_head heads, each head_dim
    // (attention.key_length_mla) = head_dim - n_rot dims without RoPE and n_rot with, from Wq xn or (q_lora_rank > 0)
    // Wq_b rms_norm(Wq_a xn); per token one latent of kv_lora_rank values, rms_norm(the first kv_lora_rank of
    // Wkv_a xn), and one RoPE key of n_rot (its last n_rot) shared by the heads. Head h's key is Wk_b[h] latent
    // beside the RoPE key, its value Wv_b[h] latent (head_dim_v, attention.value_length_mla): the cache keeps the
    // latent and the RoPE key alone (kv_heads 1, kv_head_dim kv_lora_rank + n_rot), and attention absorbs Wk_b into
    // the query and Wv_b into the output, as llama.cpp does.
    int64_t kv_lora_rank = 0, q_lora_rank = 0, head_dim_v = 0;
    // Files converted before llama.cpp split attn_kv_b (no attention.key_length_mla): the heads' key and value
    // matrices fused in attn_kv_b, per head Wk then Wv (LayerWeights::split_kv_b); key_length and value_length are
    // the heads' sizes then.
    bool mla_fused_kv_b = false;
    // deepseek2: the file's rope.scaling.yarn_log_multiplier (0.1 mscale_all_dim), which scales attn_scale by
    // (1 + 0.1 mscale_all_dim ln(factor))^2 (ModelConfig::from_gguf); and the shared experts beside the routed ones
    // (their FFN is n_expert_shared * n_ff_exp wide: layer_n_ff of an expert layer)
    float yarn_log_mul = 0.0f;
    int64_t n_expert_shared = 0;
    // deepseek2: attn_scale and rope_mscale from rope.scaling.attn_factor, the RoPE scaling and yarn_log_mul, as
    // llama.cpp computes them (ModelConfig::from_gguf says how)
    void set_mla_scales(float attn_factor);
    bool mla() const { return kv_lora_rank > 0; }
    int64_t mla_nope() const { return head_dim - n_rot; }  // a head's query dims without RoPE
    int64_t mla_row() const { return kv_lora_rank + n_rot; }  // the cache's row: latent, then RoPE key
    // DeepSeek Sparse Attention (deepseek32: DeepSeek-V3.2): MLA whose query of token t attends only to the
    // indexer_top_k positions j <= pos of the highest index scores (all of them while pos < indexer_top_k), the
    // lightning indexer of each layer (dsa_indexer.h says how it scores). Its keys, one of indexer_head_dim a
    // position, are cached after the latent and RoPE key in the same row (kv_head_dim). indexer_top_k 0: none.
    int64_t indexer_n_head = 0, indexer_head_dim = 0, indexer_top_k = 0;
    static constexpr float kIndexerNormEps = 1e-6f;  // the indexer key's LayerNorm's, as llama.cpp fixes it
    bool dsa() const { return indexer_top_k > 0; }
    // glm-dsa (GLM-5): the indexer's RoPE pairs are adjacent ones (deepseek32's NEOX), and (GLM-5.2) only the layers
    // marked here have an indexer of their own, the others attending to the positions the last such layer chose
    // for the token ([n_layer]; empty: every layer has one).
    bool indexer_neox = true;
    std::vector<uint8_t> indexer_layers;
    bool layer_indexer(int64_t layer) const {
        return indexer_layers.empty() || indexer_layers[static_cast<size_t>(layer)] != 0;
    }
    // The layers with a K and V cache of their own: the attending layers (a hybrid's recurrent ones keep a state
    // instead) before the last n_kv_shared. A shared layer (gemma4) reads the cache of kv_layer(l): as llama.cpp
    // maps them, the last of the layers before the shared ones when it is global, the one before it when local
    // (from_gguf checks that those are of the shared layers' kinds). A KV cache holds the layers with one in order:
    // layer l reads its entry kv_index(l).
    bool layer_has_kv(int64_t layer) const { return layer < n_layer - n_kv_shared && layer_has_attention(layer); }
    // Whether a layer attends: a mixer that is not recurrent, or (falcon-h1) attention beside the recurrent one
    bool layer_has_attention(int64_t layer) const {
        return layer_has_mixer(layer) && (!layer_is_recurrent(layer) || ssm_beside_attn);
    }
    int64_t kv_layer(int64_t layer) const {
        if (layer < n_layer - n_kv_shared) return layer;
        return n_layer - n_kv_shared - (layer_is_local(layer) ? 2 : 1);
    }
    int64_t kv_layers_before(int64_t layer) const {  // the layers with a cache of their own among [0, layer)
        int64_t n = 0;
        for (int64_t l = 0; l < layer; ++l) n += layer_has_kv(l) ? 1 : 0;
        return n;
    }
    int64_t kv_index(int64_t layer) const { return kv_layers_before(kv_layer(layer)); }
    int64_t n_layer_kv() const { return kv_layers_before(n_layer); }
    int64_t layer_n_embd_kv(int64_t layer) const {
        return mla() ? mla_row() : layer_n_head_kv(layer) * layer_head_dim(layer);
    }

    // Reads and validates the hyperparameters of a supported architecture. Throws FileError naming the file and
    // the key that is missing or out of range.
    static ModelConfig from_gguf(const GgufFile& file);

    // The KV cache's row: the KV heads and head size of the widest layer (the local layers' when theirs is wider).
    bool local_kv_wider() const {
        return head_dim_local > 0 && sliding_window > 0 &&
               (n_head_kv_local > 0 ? n_head_kv_local : n_head_kv) * head_dim_local > n_head_kv * head_dim;
    }
    int64_t kv_heads() const {
        if (mla()) return 1;
        return local_kv_wider() ? (n_head_kv_local > 0 ? n_head_kv_local : n_head_kv) : n_head_kv;
    }
    int64_t kv_head_dim() const {
        if (mla()) return mla_row() + (dsa() ? indexer_head_dim : 0);
        return local_kv_wider() ? head_dim_local : head_dim;
    }
    int64_t n_embd_kv() const { return kv_heads() * kv_head_dim(); }  // K (and V) width per token, the widest layer's
    // Q width per token, the widest layer's
    int64_t n_embd_q() const { return std::max(n_head, n_head_local) * std::max(head_dim, head_dim_local); }
};

// Whether quill can run this general.architecture (llama, qwen2, qwen2moe, qwen3, qwen3moe, qwen35, qwen35moe,
// gemma, gemma2, gemma3, gemma3n, gemma4, phi3, smollm3, mistral3, gpt-oss, glm4, glm4moe, granite, granitehybrid,
// nemotron_h, olmo2, exaone, exaone4, ernie4_5, seed_oss, lfm2, deepseek2, llama4, command-r, cohere2, and the variants
// qwen2vl, qwen3vl, qwen3vlmoe, lfm2moe, qwen3next, mistral4, granitemoe, minimax-m2, ernie4_5-moe, olmoe,
// nemotron_h_moe, falcon-h1, hunyuan-dense, hunyuan-moe, arcee, apertus, bailingmoe2, dots1, afmoe, exaone-moe,
// cohere2moe, granite_swa, deepseek32, glm-dsa, mamba2, mamba).
bool architecture_supported(const std::string& arch);
// "llama, qwen2, qwen3, ...": for messages.
std::string supported_architectures();

}  // namespace quill
