#include "engine/model/synthetic.h"

#include "engine/error.h"
#include "engine/format/quant_random.h"
#include "engine/model/layer_matrices.h"
#include "engine/model/weight_vectors.h"
#include "engine/rng.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>

namespace quill {

namespace {

// The chat template of the files of the other architectures (ChatML, as Qwen's; the synthetic vocabulary spells
// its markers in byte tokens).
constexpr const char* kChatTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// The turns of Granite 3's and GLM-4's templates (without their tools, documents and thinking; the tests put the
// published ones in the file).
constexpr const char* kGraniteTemplate =
    "{% for message in messages %}<|start_of_role|>{{ message['role'] }}<|end_of_role|>{{ message['content'] }}"
    "<|end_of_text|>\n{% endfor %}{% if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>{% endif %}";
constexpr const char* kGlm4Template =
    "[gMASK]<sop>{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

struct Preset {
    const char* name;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_base;
};

constexpr Preset kPresets[] = {
    {"stories15m", 288, 6, 6, 6, 768, 32000, 256, 10000.0f},
    // rows of whole 256-element super-blocks (the i-quants' blocks) in a model a test makes in a moment
    {"llama-tiny-256", 256, 4, 4, 2, 768, 512, 256, 10000.0f},
    {"stories110m", 768, 12, 12, 12, 2048, 32000, 1024, 10000.0f},
    {"smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f},
    {"llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f},
    {"llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f},
};

// Shapes of the architectures beyond llama, each setting its architecture's features: `-tiny` ones of a few MB with
// every feature in use (small soft-caps and a short window, so that they change the logits of random weights), and
// the shapes of released models.
ModelConfig base_config(const char* arch, const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head,
                        int64_t n_head_kv, int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx) {
    ModelConfig c;
    c.arch = arch;
    c.name = std::string("synthetic-") + name;
    c.n_vocab = n_vocab;
    c.n_embd = n_embd;
    c.n_layer = n_layer;
    c.n_head = n_head;
    c.n_head_kv = n_head_kv;
    c.head_dim = head_dim;
    c.n_ff = n_ff;
    c.n_ctx_train = n_ctx;
    c.yarn_n_ctx_orig = n_ctx;
    c.n_rot = head_dim;
    c.rope = ModelConfig::Rope::neox;
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    return c;
}

// gemma2: alternate local (window) and global layers, soft-capped scores and logits, post-norms, tied output.
ModelConfig gemma2_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                          int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, int64_t window,
                          float attn_cap, float final_cap) {
    ModelConfig c = base_config("gemma2", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.rms_eps = 1e-6f;
    c.ffn_act = ModelConfig::Activation::gelu_tanh;
    c.embd_scale = std::sqrt(static_cast<float>(n_embd));
    c.sliding_window = window;
    c.swa_pattern = 2;
    c.attn_logit_softcap = attn_cap;
    c.final_logit_softcap = final_cap;
    return c;
}

// gemma (Gemma 1): GeGLU, embeddings scaled by sqrt(n_embd), NEOX RoPE, a tied output; no window, caps or post-norms.
ModelConfig gemma_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                         int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx) {
    ModelConfig c = base_config("gemma", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.rms_eps = 1e-6f;
    c.rope = ModelConfig::Rope::neox;
    c.ffn_act = ModelConfig::Activation::gelu_tanh;
    c.embd_scale = std::sqrt(static_cast<float>(n_embd));
    return c;
}

// phi3: fused QKV and gate/up, partial rotary dims, long and short RoPE factors with an attention factor.
ModelConfig phi3_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                        int64_t n_rot, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, int64_t n_ctx_orig) {
    ModelConfig c =
        base_config("phi3", name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head, n_ff, n_vocab, n_ctx);
    c.n_rot = n_rot;
    c.yarn_n_ctx_orig = n_ctx_orig;
    // sqrt(1 + ln(n_ctx / n_ctx_orig) / ln(n_ctx_orig)), as the converter of Phi-3's long-context models writes it
    c.rope_mscale = static_cast<float>(std::sqrt(
        1.0 + std::log(static_cast<double>(n_ctx) / static_cast<double>(n_ctx_orig)) / std::log(double(n_ctx_orig))));
    return c;
}

// qwen3moe: qwen3's attention (Q/K norms, head_dim apart from n_embd / n_head) and a mixture of n_expert SwiGLU
// experts of n_ff_exp features, n_used of them per token; feed_forward_length is n_ff.
ModelConfig qwen3moe_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                            int64_t head_dim, int64_t n_ff, int64_t n_ff_exp, int64_t n_expert, int64_t n_used,
                            int64_t n_vocab, int64_t n_ctx) {
    ModelConfig c =
        base_config("qwen3moe", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.rms_eps = 1e-6f;
    c.rope_base = c.rope_base_local = 1e6f;
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    return c;
}

// gpt-oss: alternating local (window) and global layers with attention sinks, Q/K/V/O biases, a mixture of n_expert
// experts (n_used a token) with biased router and products and the clamped SwiGLU, YaRN RoPE stretching an original
// context n_ctx_orig by `yarn`; feed_forward_length is the experts' width, as its files state it.
ModelConfig gpt_oss_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                           int64_t n_ff_exp, int64_t n_expert, int64_t n_used, int64_t n_vocab, int64_t n_ctx,
                           int64_t window, float yarn, int64_t n_ctx_orig) {
    ModelConfig c = base_config("gpt-oss", name, n_embd, n_layer, n_head, n_head_kv, 64, n_ff_exp, n_vocab, n_ctx);
    c.rope_base = c.rope_base_local = 150000.0f;
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.sliding_window = window;
    c.swa_pattern = 2;
    c.ffn_act = ModelConfig::Activation::swiglu_oai;
    c.rope_yarn = true;
    c.rope_freq_scale = c.rope_freq_scale_local = 1.0f / yarn;
    c.yarn_n_ctx_orig = n_ctx_orig;
    c.rope_mscale = static_cast<float>(1.0 + 0.1 * std::log(yarn));
    return c;
}

// What gemma4 and gemma3n share: GeGLU, embeddings scaled by sqrt(n_embd), attention scale 1 with V norms, a window on
// all layers but every swa_pattern-th, RoPE base 1e6 on the global layers and 10,000 on the local ones.
ModelConfig gemma_v_norm_config(const char* arch, const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head,
                                int64_t n_head_kv, int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx,
                                int64_t window, int64_t swa_pattern) {
    ModelConfig c = base_config(arch, name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.rms_eps = 1e-6f;
    c.ffn_act = ModelConfig::Activation::gelu_tanh;
    c.embd_scale = std::sqrt(static_cast<float>(n_embd));
    c.attn_scale = 1.0f;
    c.sliding_window = window;
    c.swa_pattern = swa_pattern;
    c.rope_base = 1e6f;
    c.rope_base_local = 10000.0f;
    c.v_norm = true;
    return c;
}

// gemma4: local layers (a window, every swa_pattern-th layer global) with their own head size, KV heads and rotated
// dims beside global layers that take V from K and rotate a quarter of their dims (rope_freqs), Q, K and V norms,
// attention scale 1, post-norms, a layer output scale, soft-capped logits, tied output.
ModelConfig gemma4_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv_local,
                          int64_t n_head_kv, int64_t head_dim_local, int64_t head_dim, int64_t n_ff, int64_t n_vocab,
                          int64_t n_ctx, int64_t window, int64_t swa_pattern, float final_cap) {
    ModelConfig c = gemma_v_norm_config("gemma4", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab,
                                        n_ctx, window, swa_pattern);
    c.head_dim_local = head_dim_local;
    c.n_head_kv_local = n_head_kv_local;
    c.n_rot_local = head_dim_local;
    c.rope_divisors_global_only = true;
    c.final_logit_softcap = final_cap;
    return c;
}

// gemma3n: gemma4's attention (one head size), every swa_pattern-th layer global, AltUp's 4 streams, Laurel,
// per-layer inputs of 256, the gate's sparsity in the first 10 layers and the layers from the 21st on sharing the
// caches of the 19th and 20th (llama.cpp fixes all of these), logits soft-capped at 30, tied output.
ModelConfig gemma3n_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                           int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, int64_t window,
                           int64_t swa_pattern) {
    ModelConfig c = gemma_v_norm_config("gemma3n", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab,
                                        n_ctx, window, swa_pattern);
    c.final_logit_softcap = 30.0f;
    c.n_altup = 4;
    c.n_embd_per_layer = 256;
    c.n_kv_shared = std::max<int64_t>(0, n_layer - 20);
    c.n_sparse_layers = std::min<int64_t>(10, n_layer);
    c.sparsity_std_mul = 1.6448533535003662f;
    return c;
}

// gemma4's mixture (26B-A4B): gemma4-tiny's attention, a dense FFN of n_ff features beside n_expert GeGLU experts
// of n_ff_exp, n_used a token, in every layer.
ModelConfig gemma4_moe_config(const char* name, int64_t n_ff, int64_t n_expert, int64_t n_ff_exp, int64_t n_used) {
    ModelConfig c = gemma4_config(name, 128, 4, 4, 2, 1, 32, 64, n_ff, 320, 1024, 8, 2, 0.5f);
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.moe_shared_ffn = true;
    return c;
}

// glm4: partial rotary dims in adjacent pairs, Q/K/V biases, gate and up in one matrix, post-norms.
ModelConfig glm4_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                        int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx) {
    ModelConfig c = base_config("glm4", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.n_rot = head_dim / 2;
    c.rope = ModelConfig::Rope::adjacent;
    return c;
}

// A mixture of n_expert experts of n_ff_exp features, n_used a token, chosen by sigmoid(logit) + a selection bias
// and weighted by the chosen sigmoids (normalized) times `scale`, after n_dense leading dense layers (DeepSeek-V3's
// routing: glm4moe, lfm2moe).
void set_sigmoid_experts(ModelConfig& c, int64_t n_ff_exp, int64_t n_expert, int64_t n_used, int64_t n_dense,
                         float scale) {
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.moe_gating_sigmoid = c.moe_selection_bias = true;
    c.moe_weights_scale = scale;
    c.n_leading_dense = n_dense;
}

// glm4moe: NEOX RoPE over half of each head's dims, Q/K/V biases, the FFN's input norm named post_attention_norm,
// n_dense leading dense layers of n_ff features, then n_expert SwiGLU experts of n_ff_exp (n_used a token, chosen by
// sigmoid(logit) + a selection bias, weighted by the normalized sigmoids times `scale`) beside an ungated shared
// expert of n_ff_exp; n_nextn multi-token-prediction blocks written after the layers and never run.
ModelConfig glm4moe_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                           int64_t head_dim, int64_t n_ff, int64_t n_ff_exp, int64_t n_expert, int64_t n_used,
                           int64_t n_dense, float scale, int64_t n_nextn, int64_t n_vocab, int64_t n_ctx) {
    ModelConfig c = base_config("glm4moe", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.n_rot = head_dim / 2;
    c.rope_base = c.rope_base_local = 1e6f;
    set_sigmoid_experts(c, n_ff_exp, n_expert, n_used, n_dense, scale);
    c.moe_shared_expert = true;
    c.n_layer_nextn = n_nextn;
    for (int64_t l = 0; l < n_layer + n_nextn; ++l) c.n_ff_layers.push_back(c.layer_moe(l) ? n_ff_exp : n_ff);
    c.n_ff = std::max(n_ff, n_ff_exp);
    return c;
}

// llama4 (Llama 4): adjacent RoPE pairs (base 500,000), every `step`-th layer with n_expert SwiGLU experts of n_ff_exp
// (n_used a token, each reading the token's input times sigmoid(its logit)) beside an ungated shared expert of
// n_ff_exp, a dense FFN of n_ff in the others; as llama.cpp fixes them: chunks of 8192 positions on three layers of
// four, no RoPE and the attention temperature on every fourth, Q and K divided by their rms after RoPE unless there
// are 128 experts (Maverick).
ModelConfig llama4_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                          int64_t n_ff, int64_t n_ff_exp, int64_t n_expert, int64_t n_used, int64_t step,
                          int64_t n_vocab, int64_t n_ctx) {
    ModelConfig c =
        base_config("llama4", name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head, n_ff, n_vocab, n_ctx);
    c.rope = ModelConfig::Rope::adjacent;
    c.rope_base = c.rope_base_local = 500000.0f;
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.moe_layer_step = step;
    c.moe_shared_expert = c.moe_gating_sigmoid = c.moe_weight_input = true;
    c.moe_norm_weights = false;
    for (int64_t l = 0; l < n_layer; ++l) c.n_ff_layers.push_back(c.layer_moe(l) ? n_ff_exp : n_ff);
    c.attn_chunk = 8192;
    c.attn_chunk_pattern = c.no_rope_step = 4;
    c.attn_temp_scale = 0.1f;
    c.attn_temp_floor = 8192;
    c.attn_temp_offset = 1;
    c.attn_temp_nope_only = true;
    c.qk_l2_norm = n_expert != 128;
    return c;
}

// Whether a synthetic glm4moe has Q and K norms (GLM-4.5's use_qk_norm): the tiny shape has them, GLM-4.5-Air's not.
bool glm4moe_qk_norm(const ModelConfig& c) {
    return c.arch == "glm4moe" && c.name.find("air") == std::string::npos;
}

// lfm2moe (LFM2-8B-A1B): lfm2's layers, the first n_dense with a dense FFN, the others with n_expert SwiGLU experts
// of n_ff_exp features (n_used a token, chosen by sigmoid(logit) + a selection bias, weighted by the normalized
// sigmoids).
ModelConfig lfm2moe_config(ModelConfig c, int64_t n_ff_exp, int64_t n_expert, int64_t n_used, int64_t n_dense) {
    c.file_arch = "lfm2moe";
    set_sigmoid_experts(c, n_ff_exp, n_expert, n_used, n_dense, 1.0f);
    return c;
}

// minimax-m2 (MiniMax-M2): qwen3moe's layers with Q/K norms over the whole projection, NEOX RoPE over n_rot of each
// head's dims, and in every layer n_expert SwiGLU experts of n_ff_exp features (n_used a token, chosen by
// sigmoid(logit) + a selection bias, weighted by the normalized sigmoids); feed_forward_length is the experts' width.
ModelConfig minimax_m2_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                              int64_t head_dim, int64_t n_rot, int64_t n_ff_exp, int64_t n_expert, int64_t n_used,
                              int64_t n_vocab, int64_t n_ctx) {
    ModelConfig c = qwen3moe_config(name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff_exp, n_ff_exp, n_expert,
                                    n_used, n_vocab, n_ctx);
    c.file_arch = "minimax-m2";
    c.n_rot = n_rot;
    c.rope_base = c.rope_base_local = 5e6f;
    c.qk_norm_whole = true;
    set_sigmoid_experts(c, n_ff_exp, n_expert, n_used, 0, 1.0f);
    return c;
}

// ernie4_5-moe (ERNIE-4.5-21B-A3B): ernie4_5's layers (adjacent RoPE pairs, a tied output), the first n_dense with
// a dense FFN of c.n_ff, the others with n_expert SwiGLU experts of n_ff_exp features (n_used a token, chosen by the
// softmax of their logits plus a selection bias, weighted by the chosen probabilities renormalized) beside an
// ungated shared expert of n_ff_shexp.
ModelConfig ernie4_5_moe_config(ModelConfig c, int64_t n_ff_exp, int64_t n_expert, int64_t n_used, int64_t n_dense,
                                int64_t n_ff_shexp) {
    c.file_arch = "ernie4_5-moe";
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.n_leading_dense = n_dense;
    c.moe_selection_bias = true;
    c.moe_shared_expert = true;
    for (int64_t l = 0; l < c.n_layer; ++l) c.n_ff_layers.push_back(c.layer_moe(l) ? n_ff_shexp : c.n_ff);
    c.n_ff = std::max(c.n_ff, n_ff_shexp);
    return c;
}

// olmoe (OLMoE): qwen3moe's layers with heads of n_embd / n_head whose Q and K are normalized over the whole
// projection, n_expert SwiGLU experts of n_ff features in every layer (n_used a token, weighted by their shares of
// the softmax over all the logits, not renormalized); feed_forward_length is the experts' width.
ModelConfig olmoe_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                         int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t n_vocab, int64_t n_ctx) {
    ModelConfig c = qwen3moe_config(name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head, n_ff, n_ff, n_expert,
                                    n_used, n_vocab, n_ctx);
    c.file_arch = "olmoe";
    c.rms_eps = 1e-5f;
    c.rope_base = c.rope_base_local = 10000.0f;
    c.qk_norm_whole = true;
    c.moe_norm_weights = false;
    return c;
}

// hunyuan-dense (Hunyuan 0.5B-7B): qwen3's layers (heads of head_dim, NEOX RoPE) whose Q and K heads are normalized
// after RoPE; RoPE base 10,000 NTK-scaled by alpha, base * alpha^(head_dim / (head_dim - 2)) in float, as llama.cpp
// reads rope.scaling.alpha (alpha_key: the file carries the key; else the base folded in, as the converter writes it).
ModelConfig hunyuan_dense_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                                 int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, float alpha,
                                 bool alpha_key) {
    ModelConfig c = base_config("qwen3", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.file_arch = "hunyuan-dense";
    c.qk_norm_after_rope = true;
    const auto d = static_cast<float>(head_dim);
    c.rope_base = c.rope_base_local = 10000.0f * std::pow(alpha, d / (d - 2.0f));
    if (alpha_key) c.rope_alpha = alpha;
    return c;
}

// hunyuan-moe (Hunyuan-A13B): hunyuan-dense's attention and, in every layer, n_expert SwiGLU experts of n_ff_exp
// features (n_used a token, the softmax of their logits) beside a SwiGLU shared expert of n_ff_shexp without a gate;
// feed_forward_length is the experts' width (llama.cpp sizes them by it).
ModelConfig hunyuan_moe_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                               int64_t head_dim, int64_t n_ff_exp, int64_t n_ff_shexp, int64_t n_expert, int64_t n_used,
                               int64_t n_vocab, int64_t n_ctx, float rope_base) {
    ModelConfig c = qwen3moe_config(name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff_shexp, n_ff_exp, n_expert,
                                    n_used, n_vocab, n_ctx);
    c.file_arch = "hunyuan-moe";
    c.rms_eps = 1e-5f;
    c.rope_base = c.rope_base_local = rope_base;
    c.qk_norm_after_rope = true;
    c.moe_shared_expert = true;
    return c;
}

// arcee (AFM-4.5B): llama's layers (adjacent RoPE pairs) with an FFN of ReLU squared without a gate; apertus (Apertus
// 8B, 70B): qwen3's attention (per-head Q/K norms before NEOX RoPE) with an FFN of xIELU without a gate, each layer's
// alpha_n, alpha_p, beta, eps its own (spread around the trained models' 0.8, 0.8, 0.5, -1e-6 raw values; eps stays
// near 0: xIELU jumps by about an * eps at 0, where fp16 rounding of llama.cpp's product inputs would move values
// across). Their tiny files add Llama 3's RoPE divisors and (apertus) an output bias.
ModelConfig ungated_config(const char* file_arch, const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head,
                           int64_t n_head_kv, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, float rope_base) {
    const bool arcee = std::string(file_arch) == "arcee";
    ModelConfig c = base_config(arcee ? "llama" : "qwen3", name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head,
                                n_ff, n_vocab, n_ctx);
    c.file_arch = file_arch;
    if (arcee) c.rope = ModelConfig::Rope::adjacent;
    c.rope_base = c.rope_base_local = rope_base;
    c.ffn_act = arcee ? ModelConfig::Activation::relu_sqr : ModelConfig::Activation::xielu;
    for (int64_t l = 0; l < n_layer && !arcee; ++l) {
        const auto x = static_cast<float>(l % 4);
        c.xielu_alpha_n.push_back(0.3f + 0.4f * x);
        c.xielu_alpha_p.push_back(1.2f - 0.3f * x);
        c.xielu_beta.push_back(0.5f + 0.1f * x);
        c.xielu_eps.push_back(l % 2 == 0 ? -1e-6f : -1e-4f);
    }
    return c;
}

// The mixtures of bailingmoe2, dots1 and afmoe: n_dense leading dense layers of c.n_ff features, then n_expert SwiGLU
// experts of n_ff_exp (n_used a token, chosen by sigmoid(logit) + a selection bias among the n_group_used best of
// n_group groups where n_group > 1, weighted by the normalized sigmoids times `scale`) beside an ungated shared
// expert of n_shared * n_ff_shexp features; n_nextn multi-token-prediction blocks written after the layers and never
// run.
struct SharedMoe {
    int64_t n_ff_exp, n_expert, n_used, n_group, n_group_used, n_dense, n_shared, n_ff_shexp;
    float scale;
    int64_t n_nextn;
};

ModelConfig shared_moe_config(ModelConfig c, const char* file_arch, const SharedMoe& m) {
    c.file_arch = file_arch;
    set_sigmoid_experts(c, m.n_ff_exp, m.n_expert, m.n_used, m.n_dense, m.scale);
    c.moe_n_group = m.n_group;
    c.moe_n_group_used = m.n_group_used;
    c.n_expert_shared = m.n_shared;
    c.moe_shared_expert = m.n_shared > 0;
    c.n_layer_nextn = m.n_nextn;
    if (c.moe_shared_expert)
        for (int64_t l = 0; l < c.n_layer + m.n_nextn; ++l)
            c.n_ff_layers.push_back(c.layer_moe(l) ? m.n_shared * m.n_ff_shexp : c.n_ff);
    c.n_ff = std::max(c.n_ff, m.n_shared * m.n_ff_shexp);
    return c;
}

// bailingmoe2 (Ling 2.0): qwen3moe's attention with Q, K and V in one matrix (attn_qkv), NEOX RoPE over n_rot of each
// head's dims, and shared_moe_config's mixture.
ModelConfig bailingmoe2_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                               int64_t n_rot, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, const SharedMoe& m) {
    ModelConfig c = qwen3moe_config(name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head, n_ff, m.n_ff_exp,
                                    m.n_expert, m.n_used, n_vocab, n_ctx);
    c.n_rot = n_rot;
    c.rope_base = c.rope_base_local = 600000.0f;
    return shared_moe_config(c, "bailingmoe2", m);
}

// dots1 (dots.llm1): qwen3moe's attention with as many KV heads as heads, every dim rotated, and shared_moe_config's
// mixture.
ModelConfig dots1_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t head_dim,
                         int64_t n_ff, int64_t n_vocab, int64_t n_ctx, const SharedMoe& m) {
    ModelConfig c = qwen3moe_config(name, n_embd, n_layer, n_head, n_head, head_dim, n_ff, m.n_ff_exp, m.n_expert,
                                    m.n_used, n_vocab, n_ctx);
    c.rms_eps = 1e-5f;
    c.rope_base = c.rope_base_local = 1e7f;
    return shared_moe_config(c, "dots1", m);
}

// qwen3moe's attention (RMS epsilon 1e-5) with three local layers of four (a window of `window`) and every fourth
// global without RoPE: afmoe's and exaone-moe's
ModelConfig windowed_qwen3moe(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                              int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, int64_t window,
                              const SharedMoe& m) {
    ModelConfig c = qwen3moe_config(name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, m.n_ff_exp, m.n_expert,
                                    m.n_used, n_vocab, n_ctx);
    c.rms_eps = 1e-5f;
    c.sliding_window = window;
    c.swa_pattern = c.no_rope_step = 4;
    return c;
}

// afmoe (Arcee Trinity): windowed_qwen3moe's attention with its output gated by sigmoid(W_gate xn), post-norms,
// embeddings scaled by sqrt(n_embd), the local layers rotating with base 10,000, and shared_moe_config's mixture.
ModelConfig afmoe_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                         int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, int64_t window,
                         const SharedMoe& m) {
    ModelConfig c =
        windowed_qwen3moe(name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx, window, m);
    c.rope_base_local = 10000.0f;
    c.embd_scale = std::sqrt(static_cast<float>(n_embd));
    c.attn_gate_proj = true;
    return shared_moe_config(c, "afmoe", m);
}

// exaone-moe (K-EXAONE): windowed_qwen3moe's attention and shared_moe_config's mixture, its NextN blocks dense FFNs of
// n_ff.
ModelConfig exaone_moe_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                              int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, int64_t window,
                              const SharedMoe& m) {
    ModelConfig c = shared_moe_config(
        windowed_qwen3moe(name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx, window, m),
        "exaone-moe", m);
    for (int64_t l = c.n_layer; l < c.n_layer + c.n_layer_nextn; ++l) c.n_ff_layers[static_cast<size_t>(l)] = n_ff;
    return c;
}

// step35 (Step-3.5-Flash): qwen3moe's attention with one gate a head, att_h * sigmoid(W_gate xn)_h; every fourth
// layer global from the first, the others local (a window of `window`) with n_head_local query heads of their own,
// rotating all of head_dim with base 10,000 where the global ones rotate half of it with base 5e6 and Llama 3's
// divisors (rope_freqs); the SwiGLUs of layers clamp_from and later clamped at clamp_exp (the experts') and clamp_shexp
// (the dense FFN's and the shared expert's); shared_moe_config's mixture with one shared expert.
struct Step35Attn {
    int64_t n_head, n_head_local, n_head_kv, head_dim, window, clamp_from;
    float clamp_exp, clamp_shexp;
};

ModelConfig step35_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_ff, int64_t n_vocab,
                          int64_t n_ctx, const Step35Attn& a, const SharedMoe& m) {
    ModelConfig c = qwen3moe_config(name, n_embd, n_layer, a.n_head, a.n_head_kv, a.head_dim, n_ff, m.n_ff_exp,
                                    m.n_expert, m.n_used, n_vocab, n_ctx);
    c.rms_eps = 1e-5f;
    c.rope_base = 5e6f;
    c.rope_base_local = 10000.0f;
    c.n_rot = a.head_dim / 2;
    c.n_rot_local = a.head_dim;
    c.rope_divisors_global_only = true;
    c.attn_gate_proj = c.attn_gate_per_head = true;
    c.sliding_window = a.window;
    c.n_head_local = a.n_head_local;
    for (int64_t l = 0; l < n_layer + m.n_nextn; ++l) c.local_layers.push_back(l % 4 != 0);
    c = shared_moe_config(c, "step35", m);
    for (auto [limit, limits] : {std::pair{a.clamp_exp, &c.swiglu_clamp_exp},
                                 std::pair{a.clamp_shexp, &c.swiglu_clamp_shexp}}) {
        if (limit <= 0.0f) continue;
        limits->assign(static_cast<size_t>(n_layer + m.n_nextn), 0.0f);  // (none in the MTP blocks)
        std::fill(limits->begin() + a.clamp_from, limits->begin() + n_layer, limit);
    }
    return c;
}

// laguna (Laguna XS.2): qwen3moe's attention with its output times softplus(W_gate xn), a gate a head (per_head) or a
// value; every fourth layer global from the first (a window of `window`) with n_head query heads rotating half of
// head_dim with YaRN (base 500,000, `yarn` times an original context of n_ctx / yarn), the others local with
// n_head_local of their own rotating all of head_dim with base 10,000 and no scaling; shared_moe_config's mixture
// with one shared expert.
ModelConfig laguna_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_ff, int64_t n_vocab,
                          int64_t n_ctx, const Step35Attn& a, bool per_head, float yarn, const SharedMoe& m) {
    ModelConfig c = qwen3moe_config(name, n_embd, n_layer, a.n_head, a.n_head_kv, a.head_dim, n_ff, m.n_ff_exp,
                                    m.n_expert, m.n_used, n_vocab, n_ctx);
    c.rope_base = 500000.0f;
    c.rope_yarn = true;
    c.rope_freq_scale = 1.0f / yarn;
    c.yarn_n_ctx_orig = n_ctx / static_cast<int64_t>(yarn);
    c.rope_mscale = static_cast<float>(1.0 + 0.1 * std::log(static_cast<double>(yarn)));
    c.n_rot = a.head_dim / 2;
    c.attn_gate_proj = c.attn_gate_softplus = true;
    c.attn_gate_per_head = per_head;
    c.n_head_local = a.n_head_local;
    if (a.window > 0) {
        c.sliding_window = a.window;
        c.rope_base_local = 10000.0f;
        c.rope_freq_scale_local = 1.0f;
        c.rope_local_plain = true;
        c.n_rot_local = a.head_dim;
        for (int64_t l = 0; l < n_layer; ++l) c.local_layers.push_back(l % 4 != 0);
    }
    return shared_moe_config(c, "laguna", m);
}

ModelConfig glm4v_config(ModelConfig c, std::array<int64_t, 4> sections) {
    c.rope = ModelConfig::Rope::neox;
    for (size_t i = 0; i < 4; ++i) c.rope_sections[i] = sections[i];
    return c;
}

// granite: embedding, residual, attention and logit multipliers, adjacent RoPE pairs (an output matrix of its own,
// which Granite 3 ties to the embeddings: with random weights and the embedding multiplier, a tied output's largest
// logit is the input token's).
ModelConfig granite_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                           int64_t n_ff, int64_t n_vocab, int64_t n_ctx, float embd, float residual, float attn,
                           float logit) {
    ModelConfig c =
        base_config("granite", name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head, n_ff, n_vocab, n_ctx);
    c.rope = ModelConfig::Rope::adjacent;
    c.embd_scale = embd;
    c.residual_scale = residual;
    c.attn_scale = attn;
    c.logit_scale = logit;
    return c;
}

// Mamba-2's sizes in ModelConfig's terms (as read_mamba2_sizes reads them): a conv of `conv` taps, n_group groups
// of B and C of d_state (ssm_n_k_heads of ssm_head_k), `heads` heads of head_dim channels of x (ssm_n_v_heads of
// ssm_head_v)
void set_mamba2_sizes(ModelConfig& c, int64_t conv, int64_t d_state, int64_t n_group, int64_t heads,
                      int64_t head_dim) {
    c.ssm_conv = conv;
    c.ssm_head_k = d_state;
    c.ssm_n_k_heads = n_group;
    c.ssm_n_v_heads = heads;
    c.ssm_head_v = head_dim;
}

// granitehybrid (Granite 4.0 H): granite's multipliers, Mamba-2 layers but every attn_every-th (l % N == N - 1: GQA
// attention without RoPE, as Granite 4.0 H's files turn it off), a dense SwiGLU FFN in every layer; the Mamba-2 layers'
// conv of `conv` taps over x (inner 2 n_embd in heads of n_embd * 2 / mamba_heads) and B, C (n_group groups of
// d_state).
ModelConfig granitehybrid_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t attn_every,
                                 int64_t n_head, int64_t n_head_kv, int64_t n_ff, int64_t n_vocab, int64_t n_ctx,
                                 int64_t conv, int64_t d_state, int64_t n_group, int64_t mamba_heads) {
    ModelConfig c = granite_config(name, n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx, 12.0f, 0.22f,
                                   1.0f / static_cast<float>(n_embd / n_head), 8.0f);
    c.arch = "granitehybrid";
    c.no_rope_step = 1;
    for (int64_t l = 0; l < n_layer; ++l) c.mamba2_layers.push_back(l % attn_every != attn_every - 1);
    set_mamba2_sizes(c, conv, d_state, n_group, mamba_heads, 2 * n_embd / mamba_heads);
    return c;
}

// granitehybrid's mixture (Granite 4.0 H Tiny, Small): n_expert experts of n_ff_exp features (n_used a token, the
// softmax of their logits renormalized) beside an ungated shared expert of c.n_ff.
ModelConfig granitehybrid_moe_config(ModelConfig c, int64_t n_ff_exp, int64_t n_expert, int64_t n_used) {
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.moe_shared_expert = true;
    return c;
}

// granite_swa (Granite 4 with interleaved sliding-window attention): granite's layers with attention sinks in every
// layer, the local ones as `local` says ('L' local, 'G' global, a letter a layer) with a window of `window`, RoPE
// where `rope` says ('R' RoPE, '-' none).
ModelConfig granite_swa_config(ModelConfig c, int64_t window, const std::string& local, const std::string& rope) {
    c.file_arch = "granite_swa";
    c.sliding_window = window;
    for (int64_t l = 0; l < c.n_layer; ++l) {
        c.local_layers.push_back(local[static_cast<size_t>(l % static_cast<int64_t>(local.size()))] == 'L');
        c.rope_layers.push_back(rope[static_cast<size_t>(l % static_cast<int64_t>(rope.size()))] == 'R');
    }
    return c;
}

// granitemoe (Granite 3.x MoE, granite's layers with granitehybrid's mixture; `shared`: with the shared expert of
// c.n_ff that granitemoeshared files have)
ModelConfig granitemoe_config(ModelConfig c, int64_t n_ff_exp, int64_t n_expert, int64_t n_used, bool shared) {
    c = granitehybrid_moe_config(c, n_ff_exp, n_expert, n_used);
    c.file_arch = "granitemoe";
    c.moe_shared_expert = shared;
    return c;
}

// command-r (Command R, R+): LayerNorms, attention and FFN in parallel from one norm, adjacent RoPE pairs, the
// logits multiplied by `logit`, a tied output; with 64 layers or more (R+) Q and K norms of a row per head.
ModelConfig command_r_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                             int64_t n_ff, int64_t n_vocab, int64_t n_ctx, float rope_base, float logit) {
    ModelConfig c =
        base_config("command-r", name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head, n_ff, n_vocab, n_ctx);
    c.rope = ModelConfig::Rope::adjacent;
    c.rope_base = c.rope_base_local = rope_base;
    c.layer_norm = c.parallel_blocks = true;
    c.logit_mul = logit;
    return c;
}

// cohere2 (Command R7B, Command A): command-r's blocks (no Q/K norms) with every fourth layer global and without
// RoPE, the others local with a window.
ModelConfig cohere2_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                           int64_t n_ff, int64_t n_vocab, int64_t n_ctx, float rope_base, float logit, int64_t window) {
    ModelConfig c = command_r_config(name, n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx, rope_base, logit);
    c.arch = "cohere2";
    c.sliding_window = window;
    c.swa_pattern = c.no_rope_step = 4;
    return c;
}

// cohere2moe (Cohere's MoE Command models): cohere2's blocks (RMSNorm), the first layer of every four global, RoPE on
// the local layers and the leading dense ones, shared_moe_config's mixture (softmax gating without a selection bias,
// the shared expert averaged with the experts' sum) and its NextN blocks of the same kind, never run.
ModelConfig cohere2moe_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                              int64_t n_ff, int64_t n_vocab, int64_t n_ctx, float rope_base, float logit,
                              int64_t window, const SharedMoe& m) {
    ModelConfig c = cohere2_config(name, n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx, rope_base, logit,
                                   window);
    c.layer_norm = false;
    c.rms_eps = 1e-5f;
    c.swa_pattern = c.no_rope_step = 0;
    for (int64_t l = 0; l < n_layer; ++l) {
        c.local_layers.push_back(l % 4 != 0);
        c.rope_layers.push_back(l % 4 != 0 || l < m.n_dense);
    }
    c = shared_moe_config(c, "cohere2moe", m);
    c.moe_gating_sigmoid = c.moe_selection_bias = false;
    c.moe_norm_weights = true;
    c.moe_shared_scale = c.moe_shared_expert ? 0.5f : 1.0f;
    return c;
}

// nemotron_h (Nemotron-H): each layer one block by `pattern`, as the converter reads hybrid_override_pattern: 'M'
// Mamba-2 (mamba_heads heads of mamba_head_dim, n_group groups of B and C of d_state, a conv of `conv` taps), '*'
// GQA attention without RoPE, '-' an FFN of ReLU squared without a gate.
ModelConfig nemotron_h_config(const char* name, int64_t n_embd, const std::string& pattern, int64_t n_head,
                              int64_t n_head_kv, int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx,
                              int64_t conv, int64_t d_state, int64_t n_group, int64_t mamba_heads,
                              int64_t mamba_head_dim) {
    const auto n_layer = static_cast<int64_t>(pattern.size());
    ModelConfig c =
        base_config("nemotron_h", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.ffn_act = ModelConfig::Activation::relu_sqr;
    c.no_rope_step = 1;
    for (char k : pattern) {
        c.mamba2_layers.push_back(k == 'M');
        c.layer_blocks.push_back(k == '-' ? ModelConfig::kFfnBlock : ModelConfig::kMixerBlock);
        c.n_ff_layers.push_back(k == '-' ? n_ff : 0);
    }
    set_mamba2_sizes(c, conv, d_state, n_group, mamba_heads, mamba_head_dim);
    return c;
}

// nemotron_h_moe (Nemotron 3 Nano): nemotron_h's layers with n_expert ReLU-squared experts of n_ff_exp features
// without a gate in each FFN layer, n_used a token by sigmoid routing with a selection bias, their weights
// renormalized and scaled by `scale`, beside a shared expert of the same kind and c.n_ff features.
ModelConfig nemotron_h_moe_config(ModelConfig c, int64_t n_ff_exp, int64_t n_expert, int64_t n_used, float scale) {
    c.file_arch = "nemotron_h_moe";
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.moe_shared_expert = c.moe_gating_sigmoid = c.moe_selection_bias = true;
    c.moe_weights_scale = scale;
    return c;
}

// falcon-h1 (Falcon-H1): in every layer GQA attention with NEOX RoPE (n_head of head_dim, apart from n_embd) beside a
// Mamba-2 mixer (mamba_heads heads of mamba_head_dim, n_group groups of B and C of d_state, a conv of `conv` taps and
// its bias), both on the same normed input, then a SwiGLU FFN.
ModelConfig falcon_h1_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                             int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, float rope_base,
                             int64_t conv, int64_t d_state, int64_t n_group, int64_t mamba_heads,
                             int64_t mamba_head_dim) {
    ModelConfig c =
        base_config("falcon-h1", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.rope_base = c.rope_base_local = rope_base;
    c.mamba2_layers.assign(static_cast<size_t>(n_layer), 1);
    c.ssm_beside_attn = true;
    set_mamba2_sizes(c, conv, d_state, n_group, mamba_heads, mamba_head_dim);
    return c;
}

// mamba2, mamba: every layer a recurrent mixer alone (no attention, no FFN: one placeholder head no layer reads, as
// ModelConfig::from_gguf leaves it), its state of d_state a channel fed by a conv of `conv` taps; an output matrix of
// its own.
ModelConfig mixer_alone_config(const char* arch, const char* name, int64_t n_embd, int64_t n_layer, int64_t n_vocab,
                               int64_t conv, int64_t d_state) {
    ModelConfig c = base_config(arch, name, n_embd, n_layer, 1, 1, 2, 0, n_vocab, 1 << 20);
    c.no_rope_step = 1;
    c.layer_blocks.assign(static_cast<size_t>(n_layer), ModelConfig::kMixerBlock);
    c.ssm_conv = conv;
    c.ssm_head_k = d_state;
    return c;
}

// mamba2 (Mamba-2: Mamba-Codestral, state-spaces' mamba2-*): mixer_alone_config's layers of Mamba-2, `heads` heads of
// 2 n_embd / heads channels over n_group groups of B and C, the conv's bias and the grouped norm.
ModelConfig mamba2_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_vocab, int64_t conv,
                          int64_t d_state, int64_t n_group, int64_t heads) {
    ModelConfig c = mixer_alone_config("mamba2", name, n_embd, n_layer, n_vocab, conv, d_state);
    c.mamba2_layers.assign(static_cast<size_t>(n_layer), 1);
    set_mamba2_sizes(c, conv, d_state, n_group, heads, 2 * n_embd / heads);
    return c;
}

// mamba (Mamba-1: state-spaces' mamba-*, falcon-mamba): mixer_alone_config's layers of Mamba-1, 2 n_embd channels, dt
// of dt_rank, the conv's bias; with dt_b_c_rms (falcon-mamba) the RMS norms of dt, B and C.
ModelConfig mamba_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_vocab, int64_t conv,
                         int64_t d_state, int64_t dt_rank, bool dt_b_c_rms) {
    ModelConfig c = mixer_alone_config("mamba", name, n_embd, n_layer, n_vocab, conv, d_state);
    c.mamba1_layers.assign(static_cast<size_t>(n_layer), 1);
    c.ssm_n_v_heads = 2 * n_embd;
    c.ssm_head_v = c.ssm_n_k_heads = 1;
    c.ssm_dt_rank = dt_rank;
    c.ssm_dt_b_c_rms = dt_b_c_rms;
    return c;
}

// olmo2 and exaone4: no input norms, Q/K norms (olmo2: over the whole projection), post-norms; exaone4 with a
// window: every fourth layer global and without RoPE.
ModelConfig post_norm_config(const char* arch, const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head,
                             int64_t n_head_kv, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, int64_t window) {
    ModelConfig c = base_config(arch, name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head, n_ff, n_vocab, n_ctx);
    c.rms_eps = 1e-6f;
    c.input_norms = false;
    c.qk_norm_whole = c.arch == "olmo2";
    c.sliding_window = window;
    if (window > 0) c.swa_pattern = c.no_rope_step = 4;
    return c;
}

// olmo2 with a window (OLMo 3): three layers in four local, YaRN of `yarn` over the original n_ctx_orig on the
// global ones only (the local ones unscaled).
ModelConfig olmo3_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_ff,
                         int64_t n_vocab, int64_t n_ctx, int64_t window, float yarn, int64_t n_ctx_orig,
                         float rope_base) {
    ModelConfig c = post_norm_config("olmo2", name, n_embd, n_layer, n_head, n_head, n_ff, n_vocab, n_ctx, 0);
    c.sliding_window = window;
    c.swa_pattern = 4;
    c.rope_base = c.rope_base_local = rope_base;
    c.rope_yarn = true;
    c.rope_freq_scale = 1.0f / yarn;
    c.yarn_n_ctx_orig = n_ctx_orig;
    c.rope_mscale = static_cast<float>(1.0 + 0.1 * std::log(yarn));
    c.rope_local_plain = true;
    return c;
}

// ernie4_5: llama's layers with adjacent RoPE pairs and a tied output; seed_oss: Q/K/V biases, NEOX RoPE, a head
// size apart from n_embd / n_head, the FFN's norm named post_attention_norm.
ModelConfig llama_like_config(const char* arch, const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head,
                              int64_t n_head_kv, int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_ctx) {
    ModelConfig c = base_config(arch, name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    if (c.arch == "ernie4_5") c.rope = ModelConfig::Rope::adjacent;
    return c;
}

ModelConfig tiny_eps(ModelConfig c) {
    c.rms_eps = 1e-12f;
    return c;
}

// Architectures that run as another, on a copy of the base shape `c`: the language models of Qwen2-VL/2.5-VL
// (qwen2vl: qwen2 with Q, K and V biases) and Qwen3-VL (qwen3vl, qwen3vlmoe: qwen3, qwen3moe) with M-RoPE's
// sections (interleaved but for qwen2vl), and EXAONE 3.x (exaone: llama's layers in NEOX pairs, no sections).
ModelConfig variant_config(ModelConfig c, const char* file_arch, const char* name,
                           std::array<int64_t, 4> sections) {
    c.file_arch = file_arch;
    c.name = std::string("synthetic-") + name;
    c.rope = ModelConfig::Rope::neox;
    for (size_t i = 0; i < 4; ++i) c.rope_sections[i] = sections[i];
    c.rope_sections_interleaved = c.file_arch != "qwen2vl";
    return c;
}

// qwen35: every full_attn_interval-th layer full attention (GQA, gated queries, Q/K norms, NEOX RoPE over n_rot
// of head_dim), the others gated delta nets (a conv of `conv` taps, n_k_heads heads of head_k for q and k, n_v_heads
// for v), a dense SwiGLU FFN after a post-attention norm in every layer.
ModelConfig qwen35_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                          int64_t head_dim, int64_t n_rot, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, int64_t conv,
                          int64_t head_k, int64_t n_k_heads, int64_t n_v_heads) {
    ModelConfig c = base_config("qwen35", name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx);
    c.rms_eps = 1e-6f;
    c.rope_base = c.rope_base_local = 1e7f;
    c.n_rot = n_rot;
    c.attn_out_gate = true;
    c.full_attn_interval = 4;
    c.ssm_conv = conv;
    c.ssm_head_k = c.ssm_head_v = head_k;
    c.ssm_n_k_heads = n_k_heads;
    c.ssm_n_v_heads = n_v_heads;
    return c;
}

// lfm2: short convs of 3 taps (LFM2's) at the layers not in `attention`, GQA with Q/K norms and NEOX RoPE at those,
// a dense SwiGLU FFN in every layer; an output matrix of its own, which LFM2 ties to the embeddings (with random
// weights a tied output's largest logit is the input token's: greedy decoding would repeat it).
ModelConfig lfm2_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                        int64_t n_ff, int64_t n_vocab, int64_t n_ctx, std::initializer_list<int64_t> attention) {
    ModelConfig c =
        base_config("lfm2", name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head, n_ff, n_vocab, n_ctx);
    c.rope_base = c.rope_base_local = 1e6f;
    c.ssm_conv = 3;
    c.short_conv_layers.assign(static_cast<size_t>(n_layer), true);
    for (int64_t l : attention) c.short_conv_layers[static_cast<size_t>(l)] = false;
    return c;
}

// qwen35moe: qwen35's layers with a mixture of n_expert SwiGLU experts of n_ff_exp features (n_used a token, weighted
// by the softmax over their logits) and a shared expert of n_ff features with its sigmoid gate, in place of the FFN.
ModelConfig qwen35moe_config(ModelConfig c, int64_t n_ff_exp, int64_t n_expert, int64_t n_used) {
    c.arch = "qwen35moe";
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.moe_shared_expert = c.moe_shared_gate = true;
    return c;
}

// qwen3next (Qwen3-Next): qwen35moe's layers with plain NEOX RoPE and the delta nets grouped by key head
// (ModelConfig::ssm_grouped): ssm_ba, and the first delta net's q, k, v and z in one ssm_in as the older files have
// them (the others in attn_qkv and attn_gate), so that one file holds both layouts.
ModelConfig qwen3next_config(ModelConfig c) {
    c.file_arch = "qwen3next";
    c.ssm_grouped = true;
    return c;
}

// qwen2moe: qwen2's layers (Q, K and V biases, NEOX RoPE) with a mixture of n_expert SwiGLU experts of n_ff_exp
// features, n_used a token weighted by their shares of the softmax over all the logits, and a shared expert of n_ff
// features with its sigmoid gate.
ModelConfig qwen2moe_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                            int64_t n_ff, int64_t n_ff_exp, int64_t n_expert, int64_t n_used, int64_t n_vocab,
                            int64_t n_ctx) {
    ModelConfig c =
        base_config("qwen2moe", name, n_embd, n_layer, n_head, n_head_kv, n_embd / n_head, n_ff, n_vocab, n_ctx);
    c.rms_eps = 1e-6f;
    c.rope_base = c.rope_base_local = 1e6f;
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.moe_shared_expert = c.moe_shared_gate = true;
    c.moe_norm_weights = false;
    return c;
}

// deepseek2: Multi-head Latent Attention (a latent of kv_lora_rank and a RoPE key of n_rot cached per token; heads of
// nope + n_rot query dims and v_dim value dims; q_lora_rank 0: a plain Wq), adjacent RoPE pairs, the first n_dense
// layers dense (n_ff) and the others n_expert experts of n_ff_exp (n_used a token) beside n_shared ungated shared
// ones; V2-Lite's routing (softmax shares, not renormalized) until the caller sets V3's.
ModelConfig deepseek2_config(const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head,
                             std::array<int64_t, 5> mla, int64_t n_ff, int64_t n_ff_exp, int64_t n_expert,
                             int64_t n_used, int64_t n_shared, int64_t n_dense, int64_t n_vocab, int64_t n_ctx) {
    const auto [q_lora, kv_lora, nope, n_rot, v_dim] = mla;
    ModelConfig c = base_config("deepseek2", name, n_embd, n_layer, n_head, 1, nope + n_rot, n_ff, n_vocab, n_ctx);
    c.rope = ModelConfig::Rope::adjacent;
    c.rms_eps = 1e-6f;
    c.n_rot = n_rot;
    c.q_lora_rank = q_lora;
    c.kv_lora_rank = kv_lora;
    c.head_dim_v = v_dim;
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    c.n_expert_shared = n_shared;
    c.moe_shared_expert = n_shared > 0;
    c.moe_norm_weights = false;
    c.n_leading_dense = n_dense;
    c.n_ff_layers.assign(static_cast<size_t>(n_layer), n_shared * n_ff_exp);
    std::fill_n(c.n_ff_layers.begin(), n_dense, n_ff);
    c.n_ff = *std::max_element(c.n_ff_layers.begin(), c.n_ff_layers.end());
    c.set_mla_scales(1.0f);
    return c;
}

// deepseek2 with YaRN of `factor` over n_ctx_orig positions with mscale_all_dim (yarn_log_multiplier 0.1 of it)
ModelConfig deepseek2_yarn(ModelConfig c, float factor, int64_t n_ctx_orig, float mscale_all_dim) {
    c.rope_yarn = true;
    c.rope_freq_scale = c.rope_freq_scale_local = 1.0f / factor;
    c.yarn_n_ctx_orig = n_ctx_orig;
    c.yarn_log_mul = 0.1f * mscale_all_dim;
    c.set_mla_scales(1.0f);
    return c;
}

// deepseek2 as files converted before llama.cpp split attn_kv_b have it (their KV heads n_head)
ModelConfig fused_kv_b(ModelConfig c) {
    c.mla_fused_kv_b = true;
    c.n_head_kv = c.n_head;
    return c;
}

// deepseek2 with DeepSeek-V3's routing: sigmoid gating, a selection bias, n_group groups of which n_group_used
// are kept, the chosen weights renormalized and scaled
ModelConfig deepseek3_routing(ModelConfig c, int64_t n_group, int64_t n_group_used, float scale) {
    c.moe_gating_sigmoid = true;
    c.moe_n_group = n_group;
    c.moe_n_group_used = n_group_used;
    c.moe_norm_weights = true;
    c.moe_weights_scale = scale;
    return c;
}

// Mistral Small 4 (mistral4) and Mistral Large 3 (converted as deepseek2) as llama.cpp's Mistral conversion writes
// them, on deepseek2 with YaRN: softmax routing renormalized and scaled, Llama 4's attention temperature `temp` over
// steps of the YaRN's original context
ModelConfig mistral_mla(ModelConfig c, const char* file_arch, float temp) {
    c.file_arch = file_arch;
    c.moe_norm_weights = true;
    c.moe_weights_scale = 1.5f;
    c.attn_temp_scale = temp;
    c.attn_temp_floor = c.yarn_n_ctx_orig;
    return c;
}

// DeepSeek-V3.2 (deepseek32): deepseek2 with DeepSeek Sparse Attention, a lightning indexer of n_idx_head heads of
// idx_dim keeping the top_k positions of a query
ModelConfig dsa_config(ModelConfig c, int64_t n_idx_head, int64_t idx_dim, int64_t top_k,
                       const char* file_arch = "deepseek32") {
    c.file_arch = file_arch;
    c.indexer_neox = c.file_arch == "deepseek32";
    c.indexer_n_head = n_idx_head;
    c.indexer_head_dim = idx_dim;
    c.indexer_top_k = top_k;
    c.set_mla_scales(1.0f);  // (YaRN's magnitude as llama.cpp sets it for other files than deepseek2's)
    return c;
}

// GLM-5 (glm-dsa) as its published configuration gives it (no file could be fetched here), in n_layer layers of
// which the first is dense, with n_expert of its 256 experts: MLA with a low-rank query of 2048, heads of 192 + 64
// query dims and 256 value dims, sigmoid routing renormalized and scaled by 2.5 without groups, a shared expert,
// RoPE base 1e6 without YaRN, a lightning indexer of 32 heads of 128 keeping 2048 positions.
ModelConfig glm5_config(const char* name, int64_t n_layer, int64_t n_expert) {
    ModelConfig c = deepseek3_routing(deepseek2_config(name, 6144, n_layer, 64, {2048, 512, 192, 64, 256}, 12288,
                                                       2048, n_expert, 8, 1, 1, 154880, 202752),
                                      0, 0, 2.5f);
    c.rope_base = c.rope_base_local = 1e6f;
    return dsa_config(c, 32, 128, 2048, "glm-dsa");
}

// GLM-4.7-Flash (converted as deepseek2) in its first n_layer layers, as its config.json gives it (no file could be
// fetched here to check against): MLA with a low-rank query, sigmoid routing renormalized and scaled by 1.8, no
// groups, a shared expert, RoPE base 1e6.
ModelConfig glm47_flash_config(const char* name, int64_t n_layer) {
    ModelConfig c = deepseek3_routing(
        deepseek2_config(name, 2048, n_layer, 20, {768, 512, 192, 64, 256}, 10240, 1536, 64, 4, 1, 1, 154880, 202752),
        0, 0, 1.8f);
    c.rope_base = c.rope_base_local = 1e6f;
    return c;
}

// gemma4 E2B/E4B: gemma4's layers with per-layer inputs of n_embd_per_layer values, the last n_kv_shared layers
// reading the caches of earlier ones with FFNs twice as wide (E2B's), V in every layer.
ModelConfig gemma4_e_config(ModelConfig c, int64_t n_embd_per_layer, int64_t n_kv_shared) {
    c.n_embd_per_layer = n_embd_per_layer;
    c.n_kv_shared = n_kv_shared;
    for (int64_t l = 0; l < c.n_layer; ++l) c.n_ff_layers.push_back(c.layer_has_kv(l) ? c.n_ff : 2 * c.n_ff);
    c.n_ff *= 2;
    return c;
}

// Presets of the architectures beyond llama, with the settings their files carry: a tiny shape of each with every
// feature present (qwen3's Q/K norms and a head_dim apart from n_embd / n_head, smollm3's no-RoPE fourth layer,
// mistral3's YaRN and attention temperature over a short original context), and real shapes.
struct ArchPreset {
    const char* name;
    const char* arch;
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_base, rms_eps;
    float yarn_factor;         // rope.scaling.type yarn with this factor; 0: no RoPE scaling
    int64_t yarn_n_ctx_orig;   // rope.scaling.original_context_length
    float attn_temp_scale;     // mistral3: attention.temperature_scale
};

constexpr ArchPreset kArchPresets[] = {
    {"qwen3-tiny", "qwen3", 128, 4, 4, 2, 64, 320, 512, 256, 1e6f, 1e-6f, 0.0f, 0, 0.0f},
    {"qwen3-tiny-yarn", "qwen3", 128, 4, 4, 2, 64, 320, 512, 256, 1e6f, 1e-6f, 4.0f, 64, 0.0f},
    {"smollm3-tiny", "smollm3", 128, 5, 4, 1, 32, 352, 512, 256, 5e6f, 1e-6f, 0.0f, 0, 0.0f},
    {"mistral3-tiny", "mistral3", 128, 4, 4, 2, 48, 320, 512, 256, 1e6f, 1e-5f, 16.0f, 16, 0.1f},
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1e6f, 1e-6f, 0.0f, 0, 0.0f},
};

ModelConfig arch_preset_config(const ArchPreset& p) {
    ModelConfig c;
    c.arch = p.arch;
    c.name = std::string("synthetic-") + p.name;
    c.n_vocab = p.n_vocab;
    c.n_embd = p.n_embd;
    c.n_layer = p.n_layer;
    c.n_head = p.n_head;
    c.n_head_kv = p.n_head_kv;
    c.head_dim = p.head_dim;
    c.n_ff = p.n_ff;
    c.n_ctx_train = p.n_ctx;
    c.n_rot = p.head_dim;
    c.rms_eps = p.rms_eps;
    c.rope_base = c.rope_base_local = p.rope_base;
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
    if (c.arch == "qwen3") c.rope = ModelConfig::Rope::neox;
    if (c.arch == "smollm3") c.no_rope_step = 4;
    c.yarn_n_ctx_orig = p.n_ctx;
    if (p.yarn_factor > 0.0f) {  // (mistral3: yarn_log_multiplier 1, so no magnitude scale)
        c.rope_yarn = true;
        c.rope_freq_scale = c.rope_freq_scale_local = 1.0f / p.yarn_factor;
        c.yarn_n_ctx_orig = p.yarn_n_ctx_orig;
        if (c.arch != "mistral3") c.rope_mscale = static_cast<float>(1.0 + 0.1 * std::log(p.yarn_factor));
    }
    c.attn_temp_scale = p.attn_temp_scale;
    if (c.attn_temp_scale != 0.0f) c.attn_temp_floor = c.yarn_n_ctx_orig;
    return c;
}

std::vector<ModelConfig> arch_shapes() {
    return {
        // layers 0-2 and 4 recurrent, 3 full; 2 KV heads for 4 query heads, 16 of 64 dims rotated; 2 key heads for 4
        // value heads in the delta nets
        qwen35_config("qwen35-tiny", 128, 5, 4, 2, 64, 16, 256, 320, 1024, 4, 32, 2, 4),
        // the shape of Qwen3.5-0.8B (its config.json as we read it; no file could be fetched here to check)
        qwen35_config("qwen35-0.8b", 1024, 24, 8, 2, 256, 64, 3584, 248320, 262144, 4, 128, 16, 16),
        qwen3moe_config("qwen3moe-tiny", 128, 3, 4, 2, 64, 128, 64, 8, 2, 320, 1024),
        // qwen35-tiny's layers with 8 experts of 64 features (2 a token) and a shared expert of 96
        qwen35moe_config(qwen35_config("qwen35moe-tiny", 128, 5, 4, 2, 64, 16, 96, 320, 1024, 4, 32, 2, 4), 64, 8, 2),
        // the shape of Qwen3.5-35B-A3B (its config.json as we read it; no file could be fetched here to check), and
        // its first 8 layers (a benchmark of a size CI can run)
        qwen35moe_config(qwen35_config("qwen3.5-35b-a3b", 2048, 40, 16, 2, 256, 64, 512, 248320, 262144, 4, 128, 16,
                                       32), 512, 256, 8),
        qwen35moe_config(qwen35_config("qwen3.5-35b-a3b-8l", 2048, 8, 16, 2, 256, 64, 512, 248320, 262144, 4, 128, 16,
                                       32), 512, 256, 8),
        // qwen35moe-tiny's shape, and Qwen3-Next-80B-A3B's (its config.json as we read it: 512 experts of 512, 10 a
        // token; no file could be fetched here to check) with its first 8 layers
        qwen3next_config(qwen35moe_config(qwen35_config("qwen3next-tiny", 128, 5, 4, 2, 64, 16, 96, 320, 1024, 4, 32, 2,
                                                        4), 64, 8, 2)),
        qwen3next_config(qwen35moe_config(qwen35_config("qwen3-next-80b-a3b", 2048, 48, 16, 2, 256, 64, 512, 151936,
                                                        262144, 4, 128, 16, 32), 512, 512, 10)),
        qwen3next_config(qwen35moe_config(qwen35_config("qwen3-next-80b-a3b-8l", 2048, 8, 16, 2, 256, 64, 512, 151936,
                                                        262144, 4, 128, 16, 32), 512, 512, 10)),
        // 8 experts of 64 features (2 a token) and a shared expert of 192; Qwen1.5-MoE-A2.7B as its files state it
        qwen2moe_config("qwen2moe-tiny", 128, 3, 4, 2, 192, 64, 8, 2, 320, 1024),
        qwen2moe_config("qwen1.5-moe-a2.7b", 2048, 24, 16, 16, 5632, 1408, 60, 4, 151936, 8192),
        // (every feature: a low-rank query, a leading dense layer, 8 experts in 4 groups of which 2 are used, the
        // selection bias, a shared expert, YaRN with mscale)
        deepseek3_routing(deepseek2_yarn(deepseek2_config("deepseek2-tiny", 128, 3, 4, {64, 64, 32, 16, 32}, 192, 64,
                                                          8, 2, 1, 1, 320, 1024), 4.0f, 64, 0.707f), 4, 2, 2.5f),
        deepseek2_config("deepseek2-lite-tiny", 128, 3, 4, {0, 64, 32, 16, 32}, 192, 64, 8, 2, 2, 1, 320, 1024),
        fused_kv_b(deepseek2_config("deepseek2-fused-tiny", 128, 3, 4, {0, 64, 32, 16, 32}, 192, 64, 8, 2, 2, 1, 320,
                                    1024)),
        // (rows of whole 256-blocks but the 128 of attn_k_b, Q8_0 then: the speed comparison's Q4_K file)
        deepseek3_routing(deepseek2_config("deepseek2-small", 1024, 4, 8, {512, 256, 128, 64, 128}, 2816, 512, 16, 4, 1,
                                           1, 32000, 4096), 4, 2, 2.5f),
        // (YaRN of factor 4 over 8 positions, the temperature's steps 8 positions: 4 steps in the tests' prompts)
        mistral_mla(deepseek2_yarn(deepseek2_config("mistral4-tiny", 128, 3, 4, {64, 64, 32, 16, 32}, 192, 64, 8, 2, 1,
                                                    1, 320, 1024), 4.0f, 8, 1.0f), "mistral4", 0.25f),
        // (deepseek2-tiny's layers with an indexer of 16 heads of 64 keeping 10 positions: the tests' 32-token prompt
        // selects; 16 heads make a score of exactly 0, all of a key's ReLUs 0, rare)
        dsa_config(deepseek3_routing(deepseek2_yarn(deepseek2_config("deepseek32-tiny", 128, 3, 4, {64, 64, 32, 16, 32},
                                                                     192, 64, 8, 2, 1, 1, 320, 1024), 4.0f, 64, 0.707f),
                                     4, 2, 2.5f), 16, 64, 10),
        // (deepseek32-tiny's widths without YaRN or groups, GLM-5's RoPE base, layer 1 reusing layer 0's choice)
        [] {
            ModelConfig c = dsa_config(deepseek3_routing(deepseek2_config("glm-dsa-tiny", 128, 3, 4,
                                                                          {64, 64, 32, 16, 32}, 192, 64, 8, 2, 1, 1,
                                                                          320, 1024),
                                                         0, 0, 2.5f),
                                       16, 64, 10, "glm-dsa");
            c.rope_base = c.rope_base_local = 1e6f;
            c.indexer_layers = {1, 0, 1};
            return c;
        }(),
        glm5_config("glm-5-2l", 2, 32),
        // DeepSeek-V3.2 as its config.json gives it (no file could be fetched here), its first two layers with 32 of
        // its 256 experts (a dense layer, then experts): the speed comparison's shape
        dsa_config(deepseek3_routing(deepseek2_yarn(deepseek2_config("deepseek-v3.2-2l", 7168, 2, 128,
                                                                     {1536, 512, 128, 64, 128}, 18432, 2048, 32, 8, 1,
                                                                     1, 129280, 163840),
                                                    40.0f, 4096, 1.0f),
                                     8, 4, 2.5f),
                   64, 128, 2048),
        glm47_flash_config("glm-4.7-flash", 47),
        glm47_flash_config("glm-4.7-flash-8l", 8),
        deepseek2_yarn(deepseek2_config("deepseek-v2-lite", 2048, 27, 16, {0, 512, 128, 64, 128}, 10944, 1408, 64, 6, 2,
                                        1, 102400, 163840), 40.0f, 4096, 0.707f),
        deepseek2_yarn(deepseek2_config("deepseek-v2-lite-8l", 2048, 8, 16, {0, 512, 128, 64, 128}, 10944, 1408, 64, 6,
                                        2, 1, 102400, 163840), 40.0f, 4096, 0.707f),
        // layers 0, 2 and 4 short convs, 1 and 3 attention with 2 KV heads for 4 query heads
        lfm2_config("lfm2-tiny", 128, 5, 4, 2, 256, 320, 1024, {1, 3}),
        // LFM2-350M and LFM2-1.2B as their config.json files state them (no file could be fetched here to check)
        lfm2_config("lfm2-350m", 1024, 16, 16, 8, 4608, 65536, 128000, {2, 5, 8, 10, 12, 14}),
        lfm2_config("lfm2-1.2b", 2048, 16, 32, 8, 8192, 65536, 128000, {2, 5, 8, 10, 12, 14}),
        // lfm2-tiny's layers, 0 dense, 1-4 with 8 experts of 64 features (2 a token)
        lfm2moe_config(lfm2_config("lfm2moe-tiny", 128, 5, 4, 2, 256, 320, 1024, {1, 3}), 64, 8, 2, 1),
        // LFM2-8B-A1B as its config.json states it (no file could be fetched here to check)
        lfm2moe_config(lfm2_config("lfm2-8b-a1b", 2048, 24, 32, 8, 7168, 65536, 128000, {2, 6, 10, 14, 18, 21}), 1792,
                       32, 4, 2),
        // Qwen3-30B-A3B as its GGUF files state it, and the same with 8 layers (a benchmark of a size CI can run)
        qwen3moe_config("qwen3-30b-a3b", 2048, 48, 32, 4, 128, 6144, 768, 128, 8, 151936, 40960),
        qwen3moe_config("qwen3-30b-a3b-8l", 2048, 8, 32, 4, 128, 6144, 768, 128, 8, 151936, 40960),
        // 3 layers of 8 experts of 64 features (2 a token), heads of 64 (Q 256 wide over n_embd 128) rotating 32 dims
        minimax_m2_config("minimax-m2-tiny", 128, 3, 4, 2, 64, 32, 64, 8, 2, 320, 1024),
        // 3 layers of 8 experts of 64 features (4 a token), 4 heads of 32 and as many KV heads (llama.cpp's olmoe
        // sizes the K norm n_embd)
        olmoe_config("olmoe-tiny", 128, 3, 4, 4, 64, 8, 4, 320, 1024),
        // OLMoE-1B-7B (0924, 0125) as its config.json states it (no file could be fetched here to check)
        olmoe_config("olmoe-1b-7b", 2048, 16, 16, 16, 1024, 64, 8, 50304, 4096),
        // 4 layers of 128, 4 heads of 64 (Q 256 wide), 2 KV heads, RoPE base NTK-scaled by alpha 50 (the key in the
        // file); Hunyuan-7B's first four layers (alpha 1000 folded into the base, as its converter writes it)
        hunyuan_dense_config("hunyuan-dense-tiny", 128, 4, 4, 2, 64, 320, 320, 1024, 50.0f, true),
        hunyuan_dense_config("hunyuan-7b-4l", 4096, 4, 32, 8, 128, 14336, 128256, 262144, 1000.0f, false),
        // 3 layers of 8 experts of 64 (2 a token) beside a shared expert of 96; Hunyuan-A13B's first two layers
        hunyuan_moe_config("hunyuan-moe-tiny", 128, 3, 4, 2, 64, 64, 96, 8, 2, 320, 1024, 1e6f),
        hunyuan_moe_config("hunyuan-a13b-2l", 4096, 2, 32, 8, 128, 3072, 3072, 64, 8, 128167, 262144, 11158840.0f),
        // 4 layers of 128 with ReLU² FFNs of 320; AFM-4.5B's first four layers (its config.json as we read it)
        ungated_config("arcee", "arcee-tiny", 128, 4, 4, 2, 320, 320, 1024, 10000.0f),
        ungated_config("arcee", "afm-4.5b-4l", 2560, 4, 20, 4, 18432, 128004, 65536, 10000.0f),
        // 4 layers of 128 with xIELU FFNs of 320, each layer's parameters its own; Apertus-8B's first four layers
        ungated_config("apertus", "apertus-tiny", 128, 4, 4, 2, 320, 320, 1024, 10000.0f),
        ungated_config("apertus", "apertus-8b-4l", 4096, 4, 32, 8, 21504, 131072, 65536, 12000000.0f),
        // MiniMax-M2 (and M2.1) as its config.json states it (no file could be fetched here to check), and its first
        // two layers (a benchmark of a size this machine can hold)
        minimax_m2_config("minimax-m2", 3072, 62, 48, 8, 128, 64, 1536, 256, 8, 200064, 196608),
        minimax_m2_config("minimax-m2-2l", 3072, 2, 48, 8, 128, 64, 1536, 256, 8, 200064, 196608),
        // layer 0 dense (192 features), 1 and 2 with 8 experts of 64 in 4 groups of which 2 are used (2 experts a
        // token, weights scaled by 2.5) beside a shared expert of 96; 4 heads of 32 (2 KV heads) rotating 16 dims;
        // one MTP block after them
        bailingmoe2_config("bailingmoe2-tiny", 128, 3, 4, 2, 16, 192, 320, 1024, {64, 8, 2, 4, 2, 1, 1, 96, 2.5f, 1}),
        // Ling-mini-2.0 as its config.json is remembered (no file could be fetched here to check: 20 layers, the
        // first dense of 5120, 256 experts of 512 in 8 groups of which 4 are used, 8 a token, a shared expert of 512,
        // heads of 128 rotating half), and its first two layers (the dense one and one with experts)
        bailingmoe2_config("ling-mini-2.0", 2048, 20, 16, 4, 64, 5120, 157184, 32768,
                           {512, 256, 8, 8, 4, 1, 1, 512, 2.5f, 1}),
        bailingmoe2_config("ling-mini-2.0-2l", 2048, 2, 16, 4, 64, 5120, 157184, 32768,
                           {512, 256, 8, 8, 4, 1, 1, 512, 2.5f, 0}),
        // layer 0 dense (192 features), 1 and 2 with 8 experts of 64 (2 a token, weights scaled by 2.5) beside two
        // shared experts of 64; 4 heads of 32 and as many KV heads
        dots1_config("dots1-tiny", 128, 3, 4, 32, 192, 320, 1024, {64, 8, 2, 0, 0, 1, 2, 64, 2.5f, 0}),
        // dots.llm1 as its config.json is remembered (no file could be fetched here to check: 62 layers, the first
        // dense of 10944, 128 experts of 1408, 6 a token, two shared ones), and its first two layers
        dots1_config("dots1", 4096, 62, 32, 128, 10944, 152064, 32768, {1408, 128, 6, 0, 0, 1, 2, 1408, 2.5f, 0}),
        dots1_config("dots1-2l", 4096, 2, 32, 128, 10944, 152064, 32768, {1408, 128, 6, 0, 0, 1, 2, 1408, 2.5f, 0}),
        // layer 0 dense (192 features), 1-4 with 8 experts of 64 (2 a token, weights scaled by 2.826) beside a shared
        // expert of 64; 4 heads of 32 (2 KV heads); layers 0-2 and 4 local with a window of 8, 3 global without RoPE
        afmoe_config("afmoe-tiny", 128, 5, 4, 2, 32, 192, 320, 1024, 8, {64, 8, 2, 0, 0, 1, 1, 64, 2.826f, 0}),
        // layer 0 dense (192 features), 1-4 with 8 experts of 64 (2 a token, chosen by sigmoid + a selection bias,
        // weights normalized and scaled by 2.5) beside a shared expert of 96; 4 heads of 32 (2 KV heads); layers 0-2
        // and 4 local with a window of 8 and RoPE, 3 global without; one dense NextN block after them
        exaone_moe_config("exaone-moe-tiny", 128, 5, 4, 2, 32, 192, 320, 1024, 8, {64, 8, 2, 0, 0, 1, 1, 96, 2.5f, 1}),
        // K-EXAONE-236B-A23B as its config.json is remembered (no file could be fetched here to check: 48 layers, the
        // first dense of 18432, 128 experts of 2048, 8 a token, a shared one, 64 heads of 128 over 8 KV heads, a
        // window of 128, one NextN block), and its first two layers with 16 of the experts (a size this machine holds)
        exaone_moe_config("k-exaone", 6144, 48, 64, 8, 128, 18432, 153600, 262144, 128,
                          {2048, 128, 8, 0, 0, 1, 1, 2048, 2.5f, 1}),
        exaone_moe_config("k-exaone-2l", 6144, 2, 64, 8, 128, 18432, 153600, 262144, 128,
                          {2048, 16, 8, 0, 0, 1, 1, 2048, 2.5f, 0}),
        // Trinity Mini as its config.json is remembered (no file could be fetched here to check: 32 layers, the
        // first two dense of 6144, 128 experts of 1024, 8 a token, a shared one, 32 heads of 128 over 4 KV heads, a
        // window of 2048), and its first four layers (two dense, two with experts; three local, one global)
        afmoe_config("trinity-mini", 2048, 32, 32, 4, 128, 6144, 200192, 131072, 2048,
                     {1024, 128, 8, 0, 0, 2, 1, 1024, 2.826f, 0}),
        afmoe_config("trinity-mini-4l", 2048, 4, 32, 4, 128, 6144, 200192, 131072, 2048,
                     {1024, 128, 8, 0, 0, 2, 1, 1024, 2.826f, 0}),
        // step35-tiny: layer 0 global and dense, 1-3 local with 6 heads to the global layers' 4 (both over 2 KV
        // heads of 32), 4 global; 8 experts of 64 (2 a token, scale 2.5) beside a shared expert of 96, every
        // SwiGLU clamped (0.5 the experts', 0.8 the others'), one MTP block
        step35_config("step35-tiny", 128, 5, 192, 320, 1024, {4, 6, 2, 32, 8, 0, 0.5f, 0.8f},
                      {64, 8, 2, 0, 0, 1, 1, 96, 2.5f, 1}),
        // Step-3.5-Flash as its config.json was remembered (no file can be fetched here: no hub): 45 layers of 4096,
        // 64 heads on the global layers and 96 on the local ones over 8 KV heads of 128, a window of 512, 3 dense
        // layers of 11264, 288 experts of 1280 (8 a token, scale 3) beside a shared one of 1280, the SwiGLUs of the
        // last layers clamped at 7 and 16; its first four layers with 64 of the experts (three dense, one with
        // experts)
        step35_config("step35-flash", 4096, 45, 11264, 128896, 262144, {64, 96, 8, 128, 512, 43, 7.0f, 16.0f},
                      {1280, 288, 8, 0, 0, 3, 1, 1280, 3.0f, 0}),
        step35_config("step35-flash-4l", 4096, 4, 11264, 128896, 262144, {64, 96, 8, 128, 512, 4, 7.0f, 16.0f},
                      {1280, 64, 8, 0, 0, 3, 1, 1280, 3.0f, 0}),
        // laguna-tiny: layer 0 global and dense, 1-3 local with 6 heads to the global layers' 4 (both over 2 KV
        // heads of 32), 4 global; a softplus gate a head; YaRN 4x on the global layers; 8 experts of 64 (2 a token,
        // scale 2.5) beside a shared expert of 96. laguna-m-tiny: every layer global, a gate a value (Laguna M.1's).
        laguna_config("laguna-tiny", 128, 5, 192, 320, 1024, {4, 6, 2, 32, 8, 0, 0.0f, 0.0f}, true, 4.0f,
                      {64, 8, 2, 0, 0, 1, 1, 96, 2.5f, 0}),
        laguna_config("laguna-m-tiny", 128, 3, 192, 320, 1024, {4, 0, 2, 32, 0, 0, 0.0f, 0.0f}, false, 4.0f,
                      {64, 8, 2, 0, 0, 1, 1, 96, 2.5f, 0}),
        // Laguna XS.2 as llama.cpp's comments describe it (40 layers, 48 heads on the global layers and 64 on the
        // local ones, one dense layer, YaRN over 64 dims on the global layers, 128 dims with base 10,000 on the local
        // ones) and its other sizes guessed (no config could be read here: no hub): 2048 wide, 8 KV heads of 128, a
        // window of 512, 256 experts of 512 (8 a token, scale 2.5) beside a shared one of 512, YaRN 32x over 4096;
        // its first four layers (one dense; one global, three local)
        laguna_config("laguna-xs2", 2048, 40, 8192, 100352, 131072, {48, 64, 8, 128, 512, 0, 0.0f, 0.0f}, true,
                      32.0f, {512, 256, 8, 0, 0, 1, 1, 512, 2.5f, 0}),
        laguna_config("laguna-xs2-4l", 2048, 4, 8192, 100352, 131072, {48, 64, 8, 128, 512, 0, 0.0f, 0.0f}, true,
                      32.0f, {512, 256, 8, 0, 0, 1, 1, 512, 2.5f, 0}),
        // one KV head (as Gemma 2B's) of a head size apart from n_embd / n_head; Gemma 2B and 7B as their files state
        // them (no file could be fetched here to check)
        gemma_config("gemma-tiny", 128, 3, 4, 1, 48, 256, 320, 1024),
        gemma_config("gemma-2b", 2048, 18, 8, 1, 256, 16384, 256000, 8192),
        gemma_config("gemma-7b", 3072, 28, 16, 16, 256, 24576, 256000, 8192),
        gemma2_config("gemma2-tiny", 128, 4, 4, 2, 48, 256, 320, 1024, 8, 0.1f, 0.5f),
        gemma2_config("gemma2-2b", 2304, 26, 8, 4, 256, 9216, 256000, 8192, 4096, 50.0f, 30.0f),
        // layers 0 and 2 local (head size 32, two KV heads), 1 and 3 global (64, one KV head); a window of 8
        gemma4_config("gemma4-tiny", 128, 4, 4, 2, 1, 32, 64, 256, 320, 1024, 8, 2, 0.5f),
        // the same with 8 experts of 64 features (2 a token) beside a dense FFN of 128 in each layer
        gemma4_moe_config("gemma4-moe-tiny", 128, 8, 64, 2),
        // E2B's features: six layers (local, local, global, ...), per-layer inputs of 32, the last three (two local,
        // one global) reading the caches of layers 1 and 2 with FFNs of 512 (256 before)
        gemma4_e_config(gemma4_config("gemma4-e-tiny", 128, 6, 4, 2, 1, 32, 64, 256, 320, 1024, 8, 3, 0.5f), 32, 3),
        // Gemma 4 E2B as its GGUF files state it
        gemma4_e_config(gemma4_config("gemma4-e2b", 1536, 35, 8, 1, 1, 256, 512, 6144, 262144, 131072, 512, 5, 30.0f),
                        256, 20),
        // 22 layers of 64 (every second global, a window of 8): 0-9 with the gate's sparsity, 20 (local) and 21
        // (global) reading the caches of layers 18 and 19
        gemma3n_config("gemma3n-tiny", 64, 22, 2, 1, 32, 128, 320, 1024, 8, 2),
        // Gemma 3n E2B and E4B as their config.json state them (no file could be fetched here to check), and E2B's
        // widths in 22 layers (llama.cpp shares the caches from the 21st layer on: the fewest that keep it)
        gemma3n_config("gemma3n-e2b", 2048, 30, 8, 2, 256, 8192, 262400, 32768, 512, 5),
        gemma3n_config("gemma3n-e4b", 2048, 35, 8, 2, 256, 16384, 262400, 32768, 512, 5),
        gemma3n_config("gemma3n-e2b-22l", 2048, 22, 8, 2, 256, 8192, 262400, 32768, 512, 5),
        phi3_config("phi3-tiny", 128, 3, 4, 2, 24, 192, 320, 1024, 128),
        // a window of 8 that the tests' 32-token prompt crosses, YaRN over an original context of 64
        gpt_oss_config("gpt-oss-tiny", 128, 4, 4, 2, 64, 8, 4, 320, 1024, 8, 4.0f, 64),
        // gpt-oss-20b as its GGUF files state it, and the same with 8 layers (a benchmark of a size CI can run)
        gpt_oss_config("gpt-oss-20b", 2880, 24, 64, 8, 2880, 32, 4, 201088, 131072, 128, 32.0f, 4096),
        gpt_oss_config("gpt-oss-20b-8l", 2880, 8, 64, 8, 2880, 32, 4, 201088, 131072, 128, 32.0f, 4096),
        phi3_config("phi-4-mini", 3072, 32, 24, 8, 96, 8192, 200064, 131072, 4096),
        glm4_config("glm4-tiny", 128, 3, 4, 2, 32, 192, 320, 1024),
        glm4_config("glm-4-9b", 4096, 40, 32, 2, 128, 13696, 151552, 32768),
        // layer 0 dense (192 features), 1 and 2 with 8 experts of 64 (2 a token, weights scaled by 2.5, GLM-4.5's
        // routed_scaling_factor) beside a shared expert of 64; Q/K norms; one MTP block after them
        glm4moe_config("glm4moe-tiny", 128, 3, 4, 2, 32, 192, 64, 8, 2, 1, 2.5f, 1, 320, 1024),
        // GLM-4.5-Air as its config.json states it (no file could be fetched here to check), and its first two
        // layers (the dense one and one with experts: a benchmark of a size CI can run)
        glm4moe_config("glm-4.5-air", 4096, 46, 96, 8, 128, 10944, 1408, 128, 8, 1, 1.0f, 1, 151552, 131072),
        glm4moe_config("glm-4.5-air-2l", 4096, 2, 96, 8, 128, 10944, 1408, 128, 8, 1, 1.0f, 0, 151552, 131072),
        // 4 layers: 1 and 3 with 4 experts of 64 (2 a token) beside a shared expert of 64, 0 and 2 dense (128); 0-2
        // chunked with RoPE and the Q/K norm, 3 global without RoPE and with the temperature (both from position 8191)
        llama4_config("llama4-tiny", 64, 4, 2, 1, 128, 64, 4, 2, 2, 320, 16384),
        // Llama 4 Scout 17B-16E and Maverick 17B-128E as their config.json state them (no file could be fetched
        // here to check), and Scout's first four layers (llama.cpp runs no fewer: its temperature input needs a layer
        // without RoPE, the fourth)
        llama4_config("llama4-scout", 5120, 48, 40, 8, 16384, 8192, 16, 1, 1, 202048, 10485760),
        llama4_config("llama4-scout-4l", 5120, 4, 40, 8, 16384, 8192, 16, 1, 1, 202048, 10485760),
        llama4_config("llama4-maverick", 5120, 48, 40, 8, 16384, 8192, 128, 1, 2, 202048, 1048576),
        // GLM-4.1V's language model: M-RoPE in NEOX pairs; sections 2, 2, 2, 2 of 8 pairs leave pairs 6 and 7 still
        glm4v_config(glm4_config("glm4v-tiny", 128, 3, 4, 2, 32, 192, 320, 1024), {2, 2, 2, 2}),
        glm4v_config(glm4_config("glm-4.1v-9b", 4096, 40, 32, 2, 128, 13696, 151552, 65536), {8, 12, 12, 0}),
        // Granite 3.3 2B's multipliers (its attention multiplier 1/64 over a head of 64)
        granite_config("granite-tiny", 128, 3, 4, 2, 256, 320, 1024, 12.0f, 0.22f, 0.015625f, 8.0f),
        // (8 experts of 64, 2 a token, and a shared expert of 96)
        granitemoe_config(granite_config("granitemoe-tiny", 128, 3, 4, 2, 96, 320, 1024, 12.0f, 0.22f, 0.015625f,
                                         8.0f), 64, 8, 2, true),
        // granite_swa: 5 layers, 0 and 4 global, 1-3 local (a window of 8), RoPE on layers 1, 2 and 4, sinks; a dense
        // one, and one with 8 experts of 64 (2 a token) beside a fused shared expert of 96; an attention multiplier of
        // 0.25, so that the scores (and RoPE's share of them) are not all alike
        granite_swa_config(granite_config("granite-swa-tiny", 128, 5, 4, 2, 256, 320, 1024, 12.0f, 0.22f, 0.25f, 8.0f),
                           8, "GLLLG", "-RR-R"),
        granite_swa_config(granitemoe_config(granite_config("granite-swa-moe-tiny", 128, 5, 4, 2, 96, 320, 1024, 12.0f,
                                                            0.22f, 0.25f, 8.0f), 64, 8, 2, true),
                           8, "GLLLG", "-RR-R"),
        // Granite 3.3 2B's widths with Granite 4's window layout as remembered (no granite_swa file could be fetched
        // here to check: three local layers of 512 in four, RoPE on the local ones), its first four layers
        granite_swa_config(granite_config("granite-swa-2b-4l", 2048, 4, 32, 8, 8192, 100352, 131072, 12.0f, 0.22f,
                                          0.015625f, 8.0f), 512, "LLLG", "RRR-"),
        // Granite 3.1 3B-A800M as its config.json gives it, as remembered (no file could be fetched here to check)
        granitemoe_config(granite_config("granite-3.1-3b-a800m", 1536, 32, 24, 8, 512, 49155, 131072, 12.0f, 0.22f,
                                         0.015625f, 6.0f), 512, 40, 8, false),
        granite_config("granite-3.3-2b", 2048, 40, 32, 8, 8192, 49159, 131072, 12.0f, 0.22f, 0.015625f, 8.0f),
        // layers 1 and 3 attention (GQA 4/2), 0, 2 and 4 Mamba-2 (8 heads of 32, 2 groups of B and C of 64)
        granitehybrid_config("granitehybrid-tiny", 128, 5, 2, 4, 2, 256, 320, 1024, 4, 64, 2, 8),
        // the same with 8 experts of 64 features (2 a token) beside a shared expert of 96 (H Tiny's kind of layer)
        granitehybrid_moe_config(
            granitehybrid_config("granitehybrid-moe-tiny", 128, 5, 2, 4, 2, 96, 320, 1024, 4, 64, 2, 8), 64, 8, 2),
        // the shapes of Granite 4.0 H Micro and H 1B as public descriptions give them (40 layers, every tenth
        // attention; no config or file could be fetched here), with Granite 3.3's multipliers
        granitehybrid_config("granite-4.0-h-micro", 2048, 40, 10, 32, 8, 8192, 100352, 1048576, 4, 128, 1, 64),
        // its first 10 layers (9 Mamba-2, one attention): a benchmark of a size CI can run
        granitehybrid_config("granite-4.0-h-micro-10l", 2048, 10, 10, 32, 8, 8192, 100352, 1048576, 4, 128, 1, 64),
        granitehybrid_config("granite-4.0-h-1b", 1536, 40, 10, 12, 4, 4096, 100352, 1048576, 4, 128, 1, 48),
        // layers 0-2 and 4 local with a window of 8, 3 global without RoPE; a logit scale of Command R7B's 0.25; a
        // context of 4096 (Cohere's templates render a preamble of some 3,000 tokens of the byte vocabulary)
        cohere2_config("cohere2-tiny", 128, 5, 4, 2, 256, 320, 4096, 50000.0f, 0.25f, 8),
        // Command R7B as public descriptions of its config.json give it (no file could be fetched here to check), and
        // its first four layers (three local, one global: a benchmark
        // of a size CI can run)
        cohere2_config("command-r7b", 4096, 32, 32, 8, 14336, 256000, 131072, 50000.0f, 0.25f, 4096),
        // cohere2moe: 6 layers, 0 and 4 global (0 a dense FFN of 256 with RoPE, 4 without), the others local (a
        // window of 8); layers 1-5 with 8 experts of 64 (2 a token, softmax gating, weights normalized) and a shared
        // expert of 64 averaged with them; one NextN block after them
        cohere2moe_config("cohere2moe-tiny", 128, 6, 4, 2, 256, 320, 4096, 50000.0f, 0.25f, 8,
                          {64, 8, 2, 0, 0, 1, 1, 64, 1.0f, 1}),
        // a shape of a cohere2moe model's first two layers, assumed (no config of one could be read here): Command
        // R7B's attention and dense FFN, then 32 experts of 2048 (8 a token) beside a shared one
        cohere2moe_config("cohere2moe-2l", 4096, 2, 32, 8, 14336, 256000, 131072, 50000.0f, 0.25f, 4096,
                          {2048, 32, 8, 0, 0, 1, 1, 2048, 1.0f, 0}),
        cohere2_config("command-r7b-4l", 4096, 4, 32, 8, 14336, 256000, 131072, 50000.0f, 0.25f, 4096),
        // 64 layers, as llama.cpp gives command-r Q and K norms only from R+'s depth on
        command_r_config("command-r-tiny", 64, 64, 2, 1, 128, 320, 1024, 10000.0f, 0.0625f),
        // Command R v01's attention without GQA, in 3 layers (no Q/K norms) and a context for its template's preamble
        command_r_config("command-r-v01-tiny", 128, 3, 4, 4, 256, 320, 4096, 10000.0f, 0.0625f),
        // Command R (08-2024) and R+ (08-2024) as public descriptions give them (no file could be fetched here to
        // check), and Command R's first two layers (a benchmark of a size CI can run)
        command_r_config("command-r-35b", 8192, 40, 64, 8, 22528, 256000, 131072, 4e6f, 0.0625f),
        command_r_config("command-r-35b-2l", 8192, 2, 64, 8, 22528, 256000, 131072, 4e6f, 0.0625f),
        command_r_config("command-r-plus-104b", 12288, 64, 96, 8, 33792, 256000, 131072, 75e6f, 0.8333f),
        // layer 0 an FFN (256 features), 1 and 4 Mamba-2 (8 heads of 32, 2 groups of B and C of 64), 2 and 5 GQA
        // attention 4/2 without RoPE, 3 an FFN (after attention: the CPU backend's prefetch of the next layer's KV)
        nemotron_h_config("nemotron_h-tiny", 128, "-M*-M*", 4, 2, 32, 256, 320, 1024, 4, 64, 2, 8, 32),
        // Nemotron Nano 9B v2's widths as its config.json gives them (4480, 128 Mamba heads of 80 over 8 groups of
        // d_state 128, GQA 40/8 of 128, an FFN of 15680; no config or file could be fetched here to check), in four
        // layers of each kind (Mamba-2, FFN, attention, FFN): a benchmark of a size CI can run
        nemotron_h_config("nemotron-nano-9b-v2-4l", 4480, "M-*-", 40, 8, 128, 15680, 131072, 131072, 4, 128, 8, 128,
                          80),
        // the same layers with 8 experts of 64 features in the FFN layers (2 a token, weights scaled by 2.5, Nemotron
        // 3 Nano's routed_scaling_factor) beside a shared expert of 96
        nemotron_h_moe_config(
            nemotron_h_config("nemotron_h_moe-tiny", 128, "-M*-M*", 4, 2, 32, 96, 320, 1024, 4, 64, 2, 8, 32), 64, 8,
            2, 2.5f),
        // Nemotron 3 Nano 30B-A3B's widths as its config.json gives them (2688; 64 Mamba heads of 64 over 8 groups of
        // d_state 128; GQA 32/2 of 128; 128 experts of 1856, 6 a token, beside a shared expert of 3712; no config or
        // file could be fetched here to check), in four layers (Mamba-2, experts, attention, experts): a benchmark of
        // a size CI can run
        nemotron_h_moe_config(nemotron_h_config("nemotron-3-nano-30b-a3b-4l", 2688, "M-*-", 32, 2, 128, 3712, 131072,
                                                262144, 4, 128, 8, 64, 64),
                              1856, 128, 6, 2.5f),
        // 3 layers of GQA 4/2 of 48 (192 wide, apart from n_embd) beside Mamba-2 (8 heads of 32, 2 groups of B and C of
        // d_state 64, a conv of 4 taps), the grouped norm in layer 1 alone, an FFN of 256
        falcon_h1_config("falcon-h1-tiny", 128, 3, 4, 2, 48, 256, 320, 1024, 1e6f, 4, 64, 2, 8, 32),
        // Falcon-H1-0.5B's widths as its config.json gives them (1024; GQA 8/2 of 64; Mamba-2 of 24 heads of 64 over
        // one group of d_state 128; an FFN of 2048; rope_theta 1e11; no config or file could be fetched here to check)
        // and its first 4 layers: a benchmark of a size CI can run
        falcon_h1_config("falcon-h1-0.5b", 1024, 36, 8, 2, 64, 2048, 32784, 16384, 1e11f, 4, 128, 1, 24, 64),
        falcon_h1_config("falcon-h1-0.5b-4l", 1024, 4, 8, 2, 64, 2048, 32784, 16384, 1e11f, 4, 128, 1, 24, 64),
        // 3 Mamba-2 layers of 8 heads of 32 over 2 groups of B and C of d_state 64, a conv of 4 taps
        mamba2_config("mamba2-tiny", 128, 3, 320, 4, 64, 2, 8),
        // Mamba-Codestral 7B's widths as its config.json gives them (4096; 128 heads of 64 over 8 groups of d_state
        // 128; a vocabulary of 32768; no config or file could be fetched here to check), in 4 of its 64 layers: a
        // benchmark of a size CI can run
        mamba2_config("mamba-codestral-7b", 4096, 64, 32768, 4, 128, 8, 128),
        mamba2_config("mamba-codestral-7b-4l", 4096, 4, 32768, 4, 128, 8, 128),
        // 3 Mamba-1 layers of 256 channels, d_state 16, dt of rank 32, a conv of 4 taps; falcon-mamba's with the RMS
        // norms of dt, B and C
        mamba_config("mamba-tiny", 128, 3, 320, 4, 16, 32, false),
        mamba_config("falcon-mamba-tiny", 128, 3, 320, 4, 16, 32, true),
        // state-spaces/mamba-2.8b's and tiiuae/falcon-mamba-7b's widths as their config.json give them (2560, 64
        // layers, dt_rank 160, vocabulary 50280; 4096, 64 layers, dt_rank 256, vocabulary 65024; d_state 16; no
        // config or file could be fetched here to check), in 4 layers: benchmarks of a size CI can run
        mamba_config("mamba-2.8b-4l", 2560, 4, 50280, 4, 16, 160, false),
        mamba_config("falcon-mamba-7b-4l", 4096, 4, 65024, 4, 16, 256, true),
        post_norm_config("olmo2", "olmo2-tiny", 128, 3, 4, 2, 256, 320, 1024, 0),
        post_norm_config("olmo2", "olmo-2-7b", 4096, 32, 32, 32, 11008, 100352, 4096, 0),
        // 4 layers (3 local with a window of 8), YaRN of 4 on the last
        olmo3_config("olmo3-tiny", 128, 4, 4, 256, 320, 1024, 8, 4.0f, 1024, 10000.0f),
        // OLMo 3 7B as its config.json states it (a window of 4096, YaRN 8 over 8192; no file could be fetched here
        // to check), and its first four layers
        olmo3_config("olmo-3-7b", 4096, 32, 32, 11008, 100278, 65536, 4096, 8.0f, 8192, 500000.0f),
        olmo3_config("olmo-3-7b-4l", 4096, 4, 32, 11008, 100278, 65536, 4096, 8.0f, 8192, 500000.0f),
        // 64 layers, as llama.cpp gives exaone4 sliding-window layers only in the 32B's depth; a window of 8
        post_norm_config("exaone4", "exaone4-tiny", 64, 64, 2, 1, 128, 320, 1024, 8),
        post_norm_config("exaone4", "exaone-4.0-1.2b", 2048, 30, 32, 8, 4096, 102400, 65536, 0),
        llama_like_config("ernie4_5", "ernie4_5-tiny", 128, 3, 4, 2, 32, 256, 320, 1024),
        llama_like_config("ernie4_5", "ernie-4.5-0.3b", 1024, 18, 16, 2, 64, 3072, 103424, 131072),
        // ernie4_5-tiny's layers: 0 dense (256 features), 1 and 2 with 8 experts of 64 (2 a token) beside a shared
        // expert of 96
        ernie4_5_moe_config(llama_like_config("ernie4_5", "ernie4_5-moe-tiny", 128, 3, 4, 2, 32, 256, 320, 1024), 64,
                            8, 2, 1, 96),
        // ERNIE-4.5-21B-A3B as its config.json states it (the shared expert 12288 / 4 wide, as llama.cpp's converter
        // writes it; no file could be fetched here to check), and its first four layers
        ernie4_5_moe_config(llama_like_config("ernie4_5", "ernie-4.5-21b-a3b", 2560, 28, 20, 4, 128, 12288, 103424,
                                              131072), 1536, 64, 6, 1, 3072),
        ernie4_5_moe_config(llama_like_config("ernie4_5", "ernie-4.5-21b-a3b-4l", 2560, 4, 20, 4, 128, 12288, 103424,
                                              131072), 1536, 64, 6, 1, 3072),
        llama_like_config("seed_oss", "seed_oss-tiny", 128, 3, 4, 2, 48, 256, 320, 1024),
        llama_like_config("seed_oss", "seed-oss-36b", 5120, 64, 80, 8, 128, 27648, 155136, 524288),
        // 4 pairs in each of the four sections of 32 pairs: those of the extra section (12-15 and 28-31) keep still.
        // (qwen2vl-tiny's RMS epsilon is 1e-12: llama.cpp's qwen2vl does not read the file's and divides by the
        // plain RMS, where quill follows the file as Hugging Face does; real files' activations make the difference
        // nil, a tiny random model's not.)
        variant_config(tiny_eps(llama_like_config("qwen2", "", 128, 3, 2, 1, 64, 256, 320, 1024)), "qwen2vl",
                       "qwen2vl-tiny", {4, 4, 4, 4}),
        variant_config(arch_preset_config(kArchPresets[0]), "qwen3vl", "qwen3vl-tiny", {4, 4, 4, 4}),
        variant_config(qwen3moe_config("", 128, 3, 4, 2, 64, 128, 64, 8, 2, 320, 1024), "qwen3vlmoe",
                       "qwen3vlmoe-tiny", {4, 4, 4, 4}),
        // Qwen2.5-VL-7B's and Qwen3-VL-8B's language models as their config.json states them (no file could be
        // fetched here to check)
        variant_config(llama_like_config("qwen2", "", 3584, 28, 28, 4, 128, 18944, 152064, 128000), "qwen2vl",
                       "qwen2.5-vl-7b", {16, 24, 24, 0}),
        variant_config(arch_preset_config(
                           {"", "qwen3", 4096, 36, 32, 8, 128, 12288, 151936, 262144, 5e6f, 1e-6f, 0.0f, 0, 0.0f}),
                       "qwen3vl", "qwen3-vl-8b", {24, 20, 20, 0}),
        variant_config(llama_like_config("llama", "", 128, 3, 4, 2, 32, 256, 320, 1024), "exaone", "exaone-tiny",
                       {0, 0, 0, 0}),
        // EXAONE 3.5 7.8B as its config.json states it
        variant_config(llama_like_config("llama", "", 4096, 32, 32, 8, 128, 14336, 102400, 32768), "exaone",
                       "exaone-3.5-7.8b", {0, 0, 0, 0}),
    };
}

// A pool of valid blocks made by quantizing random floats once (random_blocks of the same magnitude for the types
// quill cannot quantize); tensors are filled by copying pool blocks in a random order, which is as fast as memcpy
// and gives data with the statistics of real quantized weights.
class BlockPool {
public:
    BlockPool(GgmlType type, Rng& rng) : block_bytes_(type_traits(type).type_size) {
        const int64_t bs = type_traits(type).block_size;
        const int64_t n = kBlocks * bs;
        bytes_.resize(kBlocks * block_bytes_);
        if (!type_traits(type).can_quantize) {
            random_blocks(type, rng.next(), kBlocks, static_cast<float>(kScale), bytes_.data());
            return;
        }
        std::vector<float> x(n);
        for (auto& v : x) v = static_cast<float>((rng.uniform() * 2.0 - 1.0) * kScale);
        quantize_row(type, x.data(), bytes_.data(), n);
    }
    void fill(uint8_t* dst, size_t n_blocks, Rng& rng) const {
        for (size_t i = 0; i < n_blocks;) {
            size_t start = rng.next() % kBlocks, run = std::min<size_t>(kBlocks - start, n_blocks - i);
            run = std::min<size_t>(run, 64);
            std::memcpy(dst + i * block_bytes_, bytes_.data() + start * block_bytes_, run * block_bytes_);
            i += run;
        }
    }

private:
    static constexpr size_t kBlocks = 4096;
    static constexpr double kScale = 0.05;  // the floats' range: uniform in [-kScale, kScale]
    size_t block_bytes_;
    std::vector<uint8_t> bytes_;
};

// The chat template a saved model of the architecture carries (its family's format, over the byte vocabulary; ChatML
// for qwen3, smollm3 and mistral3), or nullptr (llama).
const char* chat_template(const std::string& arch) {
    if (arch == "gemma" || arch == "gemma2" || arch == "gemma3n")
        return "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}{% set role = "
               "'model' %}{% else %}{% set role = message['role'] %}{% endif %}<start_of_turn>{{ role }}\n{{ "
               "message['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}"
               "<start_of_turn>model\n{% endif %}";
    if (arch == "phi3")
        return "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
               "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";
    if (arch == "gemma4")  // (the turns of Gemma 4's template, without its tools and thinking)
        return "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}{% set role = "
               "'model' %}{% else %}{% set role = message['role'] %}{% endif %}<|turn>{{ role }}\n{{ "
               "message['content'] | trim }}<turn|>\n{% endfor %}{% if add_generation_prompt %}"
               "<|turn>model\n{% endif %}";
    if (arch == "granite" || arch == "granitehybrid" || arch == "granitemoe" || arch == "granite_swa")
        return kGraniteTemplate;
    if (arch == "glm4" || arch == "glm4moe") return kGlm4Template;
    // (the turns of Command R's template, without its preamble)
    if (arch == "command-r" || arch == "cohere2" || arch == "cohere2moe")
        return "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{% set role = "
               "'<|USER_TOKEN|>' %}{% elif message['role'] == 'system' %}{% set role = '<|SYSTEM_TOKEN|>' %}{% else "
               "%}{% set role = '<|CHATBOT_TOKEN|>' %}{% endif %}<|START_OF_TURN_TOKEN|>{{ role }}{{ "
               "message['content'] }}<|END_OF_TURN_TOKEN|>{% endfor %}{% if add_generation_prompt %}"
               "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}";
    return arch == "llama" ? nullptr : kChatTemplate;
}

// The control tokens of the architecture's chat format, which a saved model's vocabulary ends with.
std::vector<std::string> control_tokens(const std::string& arch) {
    if (arch == "gemma" || arch == "gemma2" || arch == "gemma3n") return {"<start_of_turn>", "<end_of_turn>"};
    if (arch == "phi3") return {"<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};
    if (arch == "gemma4") return {"<|turn>", "<turn|>", "<|channel>", "<channel|>"};
    if (arch == "glm4" || arch == "glm4moe")
        return {"<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"};
    if (arch == "granite" || arch == "granitehybrid")
        return {"<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|tool_call|>"};
    if (arch == "seed_oss") return {"<seed:bos>", "<seed:eos>", "<seed:think>", "</seed:think>"};
    if (arch == "qwen35" || arch == "qwen35moe")  // (Qwen3.5's ChatML)
        return {"<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    if (arch == "lfm2") return {"<|startoftext|>", "<|im_start|>", "<|im_end|>"};  // (LFM2's ChatML)
    if (arch == "command-r" || arch == "cohere2")
        return {"<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
                "<|SYSTEM_TOKEN|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"};
    if (arch == "nemotron_h") return {"<|im_start|>", "<|im_end|>", "<think>", "</think>"};  // (Nemotron 3's ChatML)
    if (arch == "falcon-h1") return {"<|im_start|>", "<|im_end|>"};  // (the ChatML markers its file's template uses)
    return {};
}

}  // namespace

std::vector<std::string> synthetic_shape_names() {
    std::vector<std::string> names;
    for (const auto& p : kPresets) names.emplace_back(p.name);
    for (const auto& p : kArchPresets) names.emplace_back(p.name);
    for (const ModelConfig& c : arch_shapes()) names.push_back(c.name.substr(std::string("synthetic-").size()));
    return names;
}

ModelConfig synthetic_config(const std::string& shape) {
    for (const auto& p : kPresets)
        if (shape == p.name)
            return arch_preset_config({p.name, "llama", p.n_embd, p.n_layer, p.n_head, p.n_head_kv, p.n_embd / p.n_head,
                                       p.n_ff, p.n_vocab, p.n_ctx, p.rope_base, 1e-5f, 0.0f, 0, 0.0f});
    for (const auto& p : kArchPresets)
        if (shape == p.name) return arch_preset_config(p);
    for (const ModelConfig& c : arch_shapes())
        if (c.name == "synthetic-" + shape) return c;
    std::string known;
    for (const auto& n : synthetic_shape_names()) known += (known.empty() ? "" : ", ") + n;
    throw UsageError(fmt::format("unknown --synthetic shape '{}' (known: {})", shape, known));
}

std::unique_ptr<SyntheticModel> SyntheticModel::make(const ModelConfig& c, GgmlType type, uint64_t seed) {
    if (!type_traits(type).can_quantize && !random_blocks_supported(type))
        throw UsageError(fmt::format("--dtype {}: quill cannot make weights of this type", type_name(type)));
    auto m = std::make_unique<SyntheticModel>();
    m->config = c;
    m->type = type;
    Rng rng(seed);
    BlockPool pool(type, rng);
    // (q8_fallback: Q8_0 where the rows are not whole blocks of the type, as llama-quantize falls back for
    // deepseek2's attn_k_b; its blocks from a pool of their own, made when first needed)
    std::unique_ptr<BlockPool> q8_pool;
    auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out, bool q8_fallback = false) {
        const bool q8 = q8_fallback && n_in % type_traits(m->type).block_size != 0;
        const GgmlType type = q8 ? GgmlType::Q8_0 : m->type;
        if (q8 && !q8_pool) q8_pool = std::make_unique<BlockPool>(GgmlType::Q8_0, rng);
        BlockPool& blocks = q8 ? *q8_pool : pool;
        if (n_in % type_traits(type).block_size != 0)
            throw UsageError(fmt::format("--dtype {}: row length {} is not a multiple of its block size {}",
                                         type_name(type), n_in, type_traits(type).block_size));
        TensorView t;
        t.name = name;
        t.type = type;
        t.ne = {n_in, n_out, 1, 1};
        t.n_bytes = row_size(type, n_in) * n_out;
        m->buffers.emplace_back(t.n_bytes);
        blocks.fill(m->buffers.back().data(), t.n_bytes / type_traits(type).type_size, rng);
        t.data = m->buffers.back().data();
        return t;
    };
    // n matrices [n_out rows, n_in] as one 3-D tensor (deepseek2's attn_k_b and attn_v_b: one a head)
    auto stacked = [&](const std::string& name, int64_t n_in, int64_t n_out, int64_t n, bool q8_fallback = false) {
        TensorView t = matrix(name, n_in, n_out * n, q8_fallback);
        t.ne = {n_in, n_out, n, 1};
        return t;
    };
    // The experts' matrices as one 3-D tensor [n_expert, n_out rows, n_in], as the file holds them.
    auto experts = [&](const std::string& name, int64_t n_in, int64_t n_out) {
        TensorView t = matrix(name, n_in, n_out * c.n_expert);
        t.ne = {n_in, n_out, c.n_expert, 1};
        return t;
    };
    // The router: F32, as converted files keep it, with logits spread enough to rank the experts clearly (and
    // deepseek32's indexer.proj, F32 in converted files too: n_out rows).
    auto router = [&](const std::string& name, int64_t n_out = 0) {
        n_out = n_out > 0 ? n_out : c.n_expert;
        TensorView t;
        t.name = name;
        t.type = GgmlType::F32;
        t.ne = {c.n_embd, n_out, 1, 1};
        t.n_bytes = static_cast<size_t>(c.n_embd * n_out) * sizeof(float);
        m->buffers.emplace_back(t.n_bytes);
        auto* w = reinterpret_cast<float*>(m->buffers.back().data());
        for (int64_t i = 0; i < c.n_embd * n_out; ++i)
            w[i] = static_cast<float>((rng.uniform() * 2.0 - 1.0) * 0.25);
        t.data = m->buffers.back().data();
        return t;
    };
    auto norm = [&](int64_t n) {
        std::vector<float> w(n);
        for (auto& v : w) v = static_cast<float>(0.8 + 0.4 * rng.uniform());
        return w;
    };
    // Values uniform in [lo, hi): gpt-oss's biases and sinks.
    auto uniform = [&](int64_t n, double lo, double hi) {
        std::vector<float> w(n);
        for (auto& v : w) v = static_cast<float>(lo + (hi - lo) * rng.uniform());
        return w;
    };
    // phi3's factors: n_rot / 2 divisors in [1, hi)
    auto factors = [&](double hi) {
        std::vector<float> f(c.n_rot / 2);
        for (auto& v : f) v = static_cast<float>(1.0 + (hi - 1.0) * rng.uniform());
        return f;
    };
    const bool phi3 = c.arch == "phi3", gemma2 = c.arch == "gemma2", gemma4 = c.arch == "gemma4";
    const bool gemma3n = c.arch == "gemma3n";
    const bool glm4 = c.arch == "glm4", olmo2 = c.arch == "olmo2", exaone4 = c.arch == "exaone4";
    const bool qwen35 = c.arch == "qwen35" || c.arch == "qwen35moe";
    m->weights.tok_embd = matrix("token_embd.weight", c.n_embd, c.n_vocab);
    m->weights.output_norm = norm(c.n_embd);
    const bool cohere = c.arch == "command-r" || c.arch == "cohere2";
    if (gemma2 || gemma4 || gemma3n || c.arch == "gemma" || c.arch == "ernie4_5" ||
        cohere) {  // (no output matrix of their own)
        m->weights.output = m->weights.tok_embd;
        m->weights.output_tied = true;
    } else {
        m->weights.output = matrix("output.weight", c.n_embd, c.n_vocab);
    }
    if (phi3) {
        m->weights.rope_factors_long = factors(4.0);
        m->weights.rope_factors_short = factors(1.5);
    }
    if (exaone4) m->weights.rope_freqs = factors(4.0);  // (Llama 3's RoPE divisors, as EXAONE 4.0 has them)
    if (c.file_arch == "step35") {  // (as many as the local layers rotate; the global ones read the first half)
        m->weights.rope_freqs = factors(4.0);
        m->weights.rope_freqs.resize(static_cast<size_t>(c.n_rot_local / 2), 1.0f);
    }
    // (arcee, apertus: the tiny files' Llama 3 divisors)
    if ((c.file_arch == "arcee" || c.file_arch == "apertus") && c.n_embd <= 256) m->weights.rope_freqs = factors(4.0);
    if (gemma4) {  // "proportional" RoPE: the global layers rotate the first quarter of their pairs, the rest not
        m->weights.rope_freqs.assign(static_cast<size_t>(c.n_rot / 2), 1e30f);
        std::fill_n(m->weights.rope_freqs.begin(), c.n_rot / 8, 1.0f);
    }
    if (c.n_embd_per_layer > 0) {
        m->weights.per_layer_tok_embd =
            matrix("per_layer_token_embd.weight", c.n_layer * c.n_embd_per_layer, c.n_vocab);
        m->weights.per_layer_model_proj =
            matrix("per_layer_model_proj.weight", c.n_embd, c.n_layer * c.n_embd_per_layer);
        m->weights.per_layer_proj_norm = norm(c.n_embd_per_layer);
    }
    if (c.altup()) {
        m->weights.altup_proj = stacked("altup_proj.weight", c.n_embd, c.n_embd, c.n_altup - 1);
        m->weights.altup_unembd_proj = stacked("altup_unembd_proj.weight", c.n_embd, c.n_embd, c.n_altup - 1);
        m->weights.split_altup();
    }
    // Layer i's weights (i >= n_layer: a multi-token-prediction block's layer, written and never run)
    auto make_layer = [&](int64_t i) {
        const std::string b = fmt::format("blk.{}.", i);
        // (exaone-moe's NextN blocks: a dense FFN, not experts)
        const bool moe = c.layer_moe(i) && !(i >= c.n_layer && c.file_arch == "exaone-moe");
        LayerWeights L;
        if (c.input_norms && c.layer_has_mixer(i)) L.attn_norm = norm(c.n_embd);
        const int64_t nq = c.layer_n_embd_q(i), nkv = c.layer_n_embd_kv(i);
        if (!c.layer_has_mixer(i)) {  // (nemotron_h: a layer of an FFN alone)
        } else if (c.layer_is_recurrent(i) && c.mamba2()) {  // (granitehybrid's Mamba-2 layer)
            L.ssm_in = matrix(b + "ssm_in.weight", c.n_embd,
                              2 * c.ssm_d_inner() + 2 * c.ssm_n_k_heads * c.ssm_head_k + c.ssm_n_v_heads);
            L.ssm_out = matrix(b + "ssm_out.weight", c.ssm_d_inner(), c.n_embd);
            // (the conv's taps as qwen35's; D near 1, as trained models' are)
            L.ssm_conv1d = uniform(c.ssm_conv_channels() * c.ssm_conv, -0.6, 0.6);
            L.ssm_conv1d_b = uniform(c.ssm_conv_channels(), -0.1, 0.1);
            L.ssm_dt = uniform(c.ssm_n_v_heads, -1.0, 1.0);
            L.ssm_a = uniform(c.ssm_n_v_heads, -2.0, -0.1);
            L.ssm_d = uniform(c.ssm_n_v_heads, 0.5, 1.5);
            // (falcon-h1: the norm is optional, and Falcon-H1's files have none: the tiny shape's layer 1 alone)
            if (!c.ssm_beside_attn || (i == 1 && c.name.ends_with("-tiny"))) L.ssm_norm = norm(c.ssm_d_inner());
        } else if (c.layer_is_recurrent(i) && c.mamba1()) {  // (a Mamba-1 layer)
            const int64_t inner = c.ssm_d_inner(), ds = c.ssm_head_k;
            L.ssm_in = matrix(b + "ssm_in.weight", c.n_embd, 2 * inner);
            L.ssm_x = matrix(b + "ssm_x.weight", inner, c.ssm_dt_rank + 2 * ds);
            L.ssm_dt_proj = matrix(b + "ssm_dt.weight", c.ssm_dt_rank, inner);
            L.ssm_out = matrix(b + "ssm_out.weight", inner, c.n_embd);
            // (Mamba-2's sizes: A = -exp(A_log) of decays spread over (0, 1), D near 1)
            L.ssm_conv1d = uniform(inner * c.ssm_conv, -0.6, 0.6);
            L.ssm_conv1d_b = uniform(inner, -0.1, 0.1);
            L.ssm_dt = uniform(inner, -1.0, 1.0);
            L.ssm_a = uniform(inner * ds, -2.0, -0.1);
            L.ssm_d = uniform(inner, 0.5, 1.5);
        } else if (c.layer_is_short_conv(i)) {  // (lfm2's short conv: b, c, x; taps of the size of qwen35's)
            L.ssm_in = matrix(b + "shortconv.in_proj.weight", c.n_embd, 3 * c.n_embd);
            L.ssm_out = matrix(b + "shortconv.out_proj.weight", c.n_embd, c.n_embd);
            L.ssm_conv1d = uniform(c.n_embd * c.ssm_conv, -0.6, 0.6);
        } else if (c.layer_is_recurrent(i)) {  // (qwen35's gated delta net)
            if (c.ssm_grouped && i == 0) {  // (qwen3next's older layout, in its first delta net)
                L.ssm_in = matrix(b + "ssm_in.weight", c.n_embd, c.ssm_conv_channels() + c.ssm_d_inner());
            } else {
                L.ssm_in = matrix(b + "attn_qkv.weight", c.n_embd, c.ssm_conv_channels());
                L.ssm_z = matrix(b + "attn_gate.weight", c.n_embd, c.ssm_d_inner());
            }
            if (c.ssm_grouped) {
                L.ssm_beta = matrix(b + "ssm_ba.weight", c.n_embd, 2 * c.ssm_n_v_heads);
            } else {
                L.ssm_beta = matrix(b + "ssm_beta.weight", c.n_embd, c.ssm_n_v_heads);
                L.ssm_alpha = matrix(b + "ssm_alpha.weight", c.n_embd, c.ssm_n_v_heads);
            }
            L.ssm_out = matrix(b + "ssm_out.weight", c.ssm_d_inner(), c.n_embd);
            // taps of the size that keeps the conv's output near its input's; a = -exp(A_log) with decays
            // exp(softplus(alpha + dt) a) spread over (0, 1)
            L.ssm_conv1d = uniform(c.ssm_conv_channels() * c.ssm_conv, -0.6, 0.6);
            L.ssm_dt = uniform(c.ssm_n_v_heads, -1.0, 1.0);
            L.ssm_a = uniform(c.ssm_n_v_heads, -2.0, -0.1);
            L.ssm_norm = norm(c.ssm_head_v);
        } else if (c.mla()) {  // (deepseek2: the query, plain or low-rank; the latent and RoPE key; k_b, v_b a head)
            if (c.q_lora_rank > 0) {
                L.wq_a = matrix(b + "attn_q_a.weight", c.n_embd, c.q_lora_rank);
                L.wq_b = matrix(b + "attn_q_b.weight", c.q_lora_rank, nq);
                L.attn_q_a_norm = norm(c.q_lora_rank);
            } else {
                L.wq = matrix(b + "attn_q.weight", c.n_embd, nq);
            }
            L.wkv_a = matrix(b + "attn_kv_a_mqa.weight", c.n_embd, c.mla_row());
            L.attn_kv_a_norm = norm(c.kv_lora_rank);
            if (c.mla_fused_kv_b) {  // (an older file's attn_kv_b)
                L.wkv_b = matrix(b + "attn_kv_b.weight", c.kv_lora_rank, c.n_head * (c.mla_nope() + c.head_dim_v));
                L.split_kv_b(c);
            } else {
                L.wk_b = stacked(b + "attn_k_b.weight", c.mla_nope(), c.kv_lora_rank, c.n_head, true);
                L.wv_b = stacked(b + "attn_v_b.weight", c.kv_lora_rank, c.head_dim_v, c.n_head);
                L.split_mla_heads();
            }
            // (deepseek32's lightning indexer, glm-dsa's in its layers with one; the key norm's bias of the size of
            // its spread)
            if (c.dsa() && c.layer_indexer(i)) {
                L.idx_wq_b =
                    matrix(b + "indexer.attn_q_b.weight", c.q_lora_rank, c.indexer_n_head * c.indexer_head_dim);
                L.idx_wk = matrix(b + "indexer.attn_k.weight", c.n_embd, c.indexer_head_dim);
                L.idx_proj = router(b + "indexer.proj.weight", c.indexer_n_head);
                L.idx_k_norm = norm(c.indexer_head_dim);
                L.idx_k_norm_b = uniform(c.indexer_head_dim, -0.2, 0.2);
            }
        } else if (phi3 || c.file_arch == "bailingmoe2") {  // the fused tensors of the file, viewed as their parts
                                                              // (as Weights::from_gguf does)
            L.split_qkv(matrix(b + "attn_qkv.weight", c.n_embd, nq + 2 * nkv), c, i);
        } else {
            L.wq = matrix(b + "attn_q.weight", c.n_embd, c.attn_out_gate ? 2 * nq : nq);
            // (gemma4 E2B/E4B: a shared-KV layer's file has Q alone; gemma3n's has K and V, unread)
            if (c.layer_has_kv(i) || gemma3n) L.wk = matrix(b + "attn_k.weight", c.n_embd, nkv);
            // (gemma4's global layers take V from K, as Gemma 4 31B's do; E2B and E4B have V in every layer)
            if ((c.layer_has_kv(i) || gemma3n) && (!gemma4 || c.layer_is_local(i) || c.n_embd_per_layer > 0))
                L.wv = matrix(b + "attn_v.weight", c.n_embd, nkv);
        }
        if (c.ssm_beside_attn) {  // (falcon-h1: attention beside the Mamba-2 mixer)
            L.wq = matrix(b + "attn_q.weight", c.n_embd, nq);
            L.wk = matrix(b + "attn_k.weight", c.n_embd, nkv);
            L.wv = matrix(b + "attn_v.weight", c.n_embd, nkv);
        }
        if (c.attn_gate_proj) L.wgate = matrix(b + "attn_gate.weight", c.n_embd, c.layer_n_gate(i));
        if (c.layer_has_attention(i))
            L.wo = matrix(b + "attn_output.weight", c.mla() ? c.n_head * c.head_dim_v : nq, c.n_embd);
        if (c.input_norms && !c.parallel_blocks && c.layer_has_ffn(i)) L.ffn_norm = norm(c.n_embd);
        // (gemma4's mixture, the shared expert: a dense FFN beside the experts; a leading dense layer's instead)
        const bool dense = (c.layer_dense_ffn(i) || !moe) && c.layer_has_ffn(i);
        const std::string ffn = c.moe_shared_expert && moe ? "_shexp" : "";  // (the shared expert's names)
        const bool fused_shexp = c.file_arch == "granite_swa" && moe;  // (its shared expert's gate and up in one)
        if (dense && (phi3 || glm4 || fused_shexp)) {
            L.split_gate_up(matrix(b + "ffn_up" + ffn + ".weight", c.n_embd, 2 * c.n_ff), c);
        } else if (dense) {  // (nemotron_h: no gate)
            if (c.ffn_gated()) L.ffn_gate = matrix(b + "ffn_gate" + ffn + ".weight", c.n_embd, c.layer_n_ff(i));
            L.ffn_up = matrix(b + "ffn_up" + ffn + ".weight", c.n_embd, c.layer_n_ff(i));
        }
        if (dense) L.ffn_down = matrix(b + "ffn_down" + ffn + ".weight", c.layer_n_ff(i), c.n_embd);
        // (a gate of the size that spreads sigmoid(g . xn) over (0, 1))
        if (c.moe_shared_gate) L.ffn_gate_inp_shexp = uniform(c.n_embd, -0.3, 0.3);
        if (c.n_embd_per_layer > 0) {
            L.per_layer_inp_gate = matrix(b + "inp_gate.weight", c.n_embd, c.n_embd_per_layer);
            L.per_layer_proj = matrix(b + "proj.weight", c.n_embd_per_layer, c.n_embd);
            L.per_layer_post_norm = norm(c.n_embd);
        }
        // (DeepSeek-V3's selection bias, of the size of the sigmoid's differences between experts)
        if (c.arch == "deepseek2" && c.layer_moe(i) && c.moe_gating_sigmoid)
            L.ffn_exp_probs_b = uniform(c.n_expert, -0.1, 0.1);
        if (moe) {
            L.ffn_gate_inp = router(b + "ffn_gate_inp.weight");
            // (a selection bias of the size of the probabilities' spread, so that it changes which experts win)
            if (c.moe_selection_bias) L.ffn_exp_probs_b = uniform(c.n_expert, -0.5, 0.5);
            if (gemma4 || c.file_arch == "granite_swa") {  // (gate and up of each expert in one tensor, gate first)
                L.ffn_gate_up_exps = experts(b + "ffn_gate_up_exps.weight", c.n_embd, 2 * c.n_ff_exp);
            } else {  // (nemotron_h_moe: no gate)
                if (c.ffn_gated()) L.ffn_gate_exps = experts(b + "ffn_gate_exps.weight", c.n_embd, c.n_ff_exp);
                L.ffn_up_exps = experts(b + "ffn_up_exps.weight", c.n_embd, c.n_ff_exp);
            }
            L.ffn_down_exps = experts(b + "ffn_down_exps.weight", c.n_ff_exp, c.n_embd);
            L.split_experts();
        }
        if (c.moe_shared_ffn) {
            L.ffn_gate_inp_s = uniform(c.n_embd, 0.5, 1.5);
            L.ffn_pre_norm_2 = norm(c.n_embd);
            L.ffn_post_norm_1 = norm(c.n_embd);
            L.ffn_post_norm_2 = norm(c.n_embd);
            L.ffn_down_exps_s = uniform(c.n_expert, 0.5, 1.5);
        }
        if (gemma3n) {  // (Laurel's rank 64 and AltUp's router and coefficients, as llama.cpp sizes them)
            L.laurel_l = matrix(b + "laurel_l.weight", c.n_embd, 64);
            L.laurel_r = matrix(b + "laurel_r.weight", 64, c.n_embd, true);  // (Q8_0 where 64 is under a block)
            L.laurel_post_norm = norm(c.n_embd);
            L.altup_router = uniform(c.n_altup * c.n_embd, -0.5, 0.5);
            L.altup_router_norm = norm(c.n_embd);
            L.altup_predict_coef = uniform(c.n_altup * c.n_altup * c.n_altup, -0.3, 0.3);
            L.altup_correct_coef = uniform(c.n_altup * c.n_altup, -0.3, 0.3);
            L.altup_correct_scale = norm(c.n_embd);
        }
        if (gemma2 || gemma4 || gemma3n || glm4 || olmo2 || exaone4 || c.file_arch == "afmoe") {
            L.attn_post_norm = norm(c.n_embd);
            L.ffn_post_norm = norm(c.n_embd);
        }
        if (c.arch == "command-r" && c.n_layer >= 64) {  // (Command R+: a row per head)
            L.attn_q_norm = norm(nq);
            L.attn_k_norm = norm(nkv);
        }
        if (c.qk_norm_whole) {  // (olmo2, minimax-m2: over the whole Q and K)
            L.attn_q_norm = norm(nq);
            L.attn_k_norm = norm(nkv);
        } else if (gemma3n) {  // (a shared-KV layer's K norm too, unread)
            L.attn_q_norm = norm(c.head_dim);
            L.attn_k_norm = norm(c.head_dim);
        } else if (c.arch == "qwen3" || c.arch == "qwen3moe" || gemma4 || exaone4 || glm4moe_qk_norm(c) ||
                   ((qwen35 || c.arch == "lfm2") && !c.layer_is_recurrent(i))) {
            L.attn_q_norm = norm(c.layer_head_dim(i));
            // (an MTP block's attention, never run, has K's norm too: bailingmoe2's and exaone-moe's llama.cpp
            // require it)
            const bool mtp_k_norm = c.file_arch == "bailingmoe2" || c.file_arch == "exaone-moe";
            if (c.layer_has_kv(i) || (i >= c.n_layer && mtp_k_norm))
                L.attn_k_norm = norm(c.layer_head_dim(i));
        }
        if (glm4 || c.arch == "glm4moe" || c.arch == "seed_oss" || c.arch == "qwen2" ||
            c.arch == "qwen2moe") {  // (their Q, K and V biases)
            L.bq = uniform(nq, -0.1, 0.1);
            L.bk = uniform(nkv, -0.1, 0.1);
            L.bv = uniform(nkv, -0.1, 0.1);
        }
        if (gemma4) L.out_scale = uniform(1, 0.5, 1.5);
        if (c.file_arch == "granite_swa") L.attn_sinks = uniform(c.n_head, -1.0, 2.0);  // (gpt-oss's size)
        if (c.file_arch == "apertus" && c.n_embd <= 256) L.bo = uniform(c.n_embd, -0.1, 0.1);  // (its optional bias)
        if (c.arch == "gpt-oss") {
            // Sinks of the size of the scores, so that they take a share of each softmax; gate and up biases out to
            // +-8, so that the SwiGLU's clamp at 7 cuts some of them.
            L.attn_sinks = uniform(c.n_head, -1.0, 2.0);
            L.bq = uniform(c.n_embd_q(), -0.1, 0.1);
            L.bk = uniform(c.n_embd_kv(), -0.1, 0.1);
            L.bv = uniform(c.n_embd_kv(), -0.1, 0.1);
            L.bo = uniform(c.n_embd, -0.1, 0.1);
            L.ffn_gate_inp_b = uniform(c.n_expert, -0.5, 0.5);
            L.ffn_gate_exps_b = uniform(c.n_expert * c.n_ff_exp, -8.0, 8.0);
            L.ffn_up_exps_b = uniform(c.n_expert * c.n_ff_exp, -8.0, 8.0);
            L.ffn_down_exps_b = uniform(c.n_expert * c.n_embd, -0.1, 0.1);
        }
        return L;
    };
    for (int64_t i = 0; i < c.n_layer; ++i) m->weights.layers.push_back(make_layer(i));
    for (int64_t i = c.n_layer; i < c.n_layer + c.n_layer_nextn; ++i) {
        // glm4moe's multi-token-prediction block: a MoE layer and its nextn tensors (eh_proj reads the embedding and
        // the hidden state side by side)
        const std::string b = fmt::format("blk.{}.nextn.", i);
        m->mtp_layers.push_back(make_layer(i));
        m->mtp_matrices.push_back(matrix(b + "eh_proj.weight", 2 * c.n_embd, c.n_embd));
        for (const char* v : {"enorm.weight", "hnorm.weight", "shared_head_norm.weight"})
            m->mtp_vectors.push_back({b + v, norm(c.n_embd)});
        if (c.file_arch == "bailingmoe2")  // (its llama.cpp requires the block's output norm too)
            m->mtp_vectors.push_back({fmt::format("blk.{}.layer_output_norm.weight", i), norm(c.n_embd)});
    }
    m->weights.n_expert_used = c.n_expert_used;
    return m;
}

size_t SyntheticModel::weight_bytes() const {
    size_t n = 0;
    for (const auto& b : buffers) n += b.size();
    return n;
}

namespace {

// step35's and laguna's mixture keys (read_shared_sigmoid_moe's): the shared expert's width, the weights' scale and
// normalization, the gating function, the leading dense layers.
void save_shared_sigmoid_moe_keys(GgufWriter& w, const std::string& p, const ModelConfig& c) {
    w.set(p + "expert_shared_feed_forward_length", uint32_t(c.layer_n_ff(c.n_layer - 1)));
    w.set(p + "expert_weights_scale", c.moe_weights_scale);
    w.set(p + "expert_weights_norm", c.moe_norm_weights);
    w.set(p + "expert_gating_func", uint32_t(c.moe_gating_sigmoid ? 2 : 1));
    w.set(p + "leading_dense_block_count", uint32_t(c.n_leading_dense));
}

// step35's keys as its converter writes them: heads, KV heads, the pattern and the clamps one a block (MTP blocks
// too), rope.dimension_count twice the global layers' (llama.cpp halves it), the shared expert's width.
void save_step35_keys(GgufWriter& w, const ModelConfig& c) {
    const std::string p = "step35.";
    const int64_t n_block = c.n_layer + c.n_layer_nextn;
    std::vector<GgufValue> heads, kv_heads, local, clamp_exp, clamp_shexp;
    for (int64_t l = 0; l < n_block; ++l) {
        heads.emplace_back(uint32_t(c.layer_n_head(l)));
        kv_heads.emplace_back(uint32_t(c.layer_n_head_kv(l)));
        local.emplace_back(c.layer_is_local(l));
        clamp_exp.emplace_back(ModelConfig::layer_clamp(c.swiglu_clamp_exp, l));
        clamp_shexp.emplace_back(ModelConfig::layer_clamp(c.swiglu_clamp_shexp, l));
    }
    w.set(p + "attention.head_count", GgufValue::array(GgufType::U32, heads));
    w.set(p + "attention.head_count_kv", GgufValue::array(GgufType::U32, kv_heads));
    w.set(p + "attention.key_length", uint32_t(c.head_dim));
    w.set(p + "attention.value_length", uint32_t(c.head_dim));
    w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
    w.set(p + "attention.sliding_window_pattern", GgufValue::array(GgufType::BOOL, local));
    w.set(p + "rope.dimension_count", uint32_t(2 * c.n_rot));
    if (c.n_rot_local != 2 * c.n_rot) w.set(p + "rope.dimension_count_swa", uint32_t(c.n_rot_local));
    w.set(p + "rope.freq_base_swa", c.rope_base_local);
    save_shared_sigmoid_moe_keys(w, p, c);
    w.set(p + "moe_every_n_layers", uint32_t(1));
    if (c.n_layer_nextn > 0) w.set(p + "nextn_predict_layers", uint32_t(c.n_layer_nextn));
    if (!c.swiglu_clamp_exp.empty()) w.set(p + "swiglu_clamp_exp", GgufValue::array(GgufType::F32, clamp_exp));
    if (!c.swiglu_clamp_shexp.empty()) w.set(p + "swiglu_clamp_shexp", GgufValue::array(GgufType::F32, clamp_shexp));
}

// laguna's keys as its converter writes them: heads one a layer, the local layers' RoPE dims, the mixture's keys (no
// pattern: llama.cpp's every fourth layer global from the first).
void save_laguna_keys(GgufWriter& w, const ModelConfig& c) {
    const std::string p = "laguna.";
    std::vector<GgufValue> heads;
    for (int64_t l = 0; l < c.n_layer; ++l) heads.emplace_back(uint32_t(c.layer_n_head(l)));
    w.set(p + "attention.head_count", GgufValue::array(GgufType::U32, heads));
    w.set(p + "attention.key_length", uint32_t(c.head_dim));
    w.set(p + "attention.value_length", uint32_t(c.head_dim));
    if (c.sliding_window > 0) {
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "rope.dimension_count_swa", uint32_t(c.n_rot_local));
        w.set(p + "rope.freq_base_swa", c.rope_base_local);
    }
    save_shared_sigmoid_moe_keys(w, p, c);
}

}  // namespace

void SyntheticModel::save(const std::string& path) const {
    const ModelConfig& c = config;
    GgufWriter w;
    const std::string p = c.gguf_arch() + ".";
    w.set("general.architecture", c.gguf_arch());
    w.set("general.name", c.name);
    w.set("general.alignment", uint32_t(32));
    w.set(p + "context_length", uint32_t(c.n_ctx_train));
    w.set(p + "embedding_length", uint32_t(c.n_embd));
    w.set(p + "block_count", uint32_t(c.n_layer + c.n_layer_nextn));
    const bool shared_moe = c.file_arch == "bailingmoe2" || c.file_arch == "dots1" || c.file_arch == "afmoe";
    // (mamba2, mamba: head_count and feed_forward_length 0, as their converter writes them)
    const bool attention_free = c.arch == "mamba2" || c.arch == "mamba";
    if (attention_free) {
        w.set(p + "feed_forward_length", uint32_t(0));
    } else if (c.arch == "nemotron_h") {  // (a width a layer, 0 where a layer has no FFN)
        std::vector<GgufValue> ff;
        for (int64_t l = 0; l < c.n_layer; ++l)  // (nemotron_h_moe: the experts' width)
            ff.emplace_back(uint32_t(!c.layer_has_ffn(l) ? 0 : c.moe() ? c.n_ff_exp : c.layer_n_ff(l)));
        w.set(p + "feed_forward_length", GgufValue::array(GgufType::U32, ff));
    } else if ((c.arch == "granitehybrid" || c.file_arch == "granitemoe" || c.file_arch == "granite_swa" ||
                c.file_arch == "hunyuan-moe") && c.moe()) {  // (Granite's, Hunyuan's: n_ff wide)
        w.set(p + "feed_forward_length", uint32_t(c.n_ff_exp));
    } else if (c.n_ff_layers.empty() || c.arch == "glm4moe" || c.arch == "deepseek2" ||
               c.file_arch == "ernie4_5-moe" || c.arch == "llama4" || shared_moe || c.file_arch == "exaone-moe" ||
               c.file_arch == "cohere2moe" || c.file_arch == "step35" ||
               c.file_arch == "laguna") {
        // (the leading dense width; llama4: the dense layers')
        w.set(p + "feed_forward_length", uint32_t(c.n_leading_dense > 0 ? c.layer_n_ff(0) : c.n_ff));
    } else {
        std::vector<GgufValue> ff;
        for (int64_t n : c.n_ff_layers) ff.emplace_back(uint32_t(n));
        w.set(p + "feed_forward_length", GgufValue::array(GgufType::U32, ff));
    }
    w.set(p + "attention.head_count", uint32_t(attention_free ? 0 : c.n_head));
    std::vector<GgufValue> local_kinds, kv_heads, attn_kv_heads;  // gemma4, granitehybrid: one a layer
    for (int64_t l = 0; l < c.n_layer; ++l) {
        local_kinds.emplace_back(c.layer_is_local(l));
        kv_heads.emplace_back(uint32_t(c.layer_is_short_conv(l) ? 0 : c.layer_n_head_kv(l)));  // (lfm2: 0 a conv)
        attn_kv_heads.emplace_back(uint32_t(!c.layer_has_kv(l) ? 0 : c.n_head_kv));
    }
    if (c.arch == "gemma4" || (c.arch == "lfm2" && c.recurrent()))
        w.set(p + "attention.head_count_kv", GgufValue::array(GgufType::U32, kv_heads));
    else if (c.mamba2() && !c.ssm_beside_attn && !attention_free)  // (0: a Mamba-2 layer)
        w.set(p + "attention.head_count_kv", GgufValue::array(GgufType::U32, attn_kv_heads));
    else if (!attention_free)
        w.set(p + "attention.head_count_kv", uint32_t(c.n_head_kv));
    const bool qwen35 = c.arch == "qwen35" || c.arch == "qwen35moe";
    if (c.mla() && c.mla_fused_kv_b) {  // (an older deepseek2 file: the heads' sizes)
        w.set(p + "attention.key_length", uint32_t(c.head_dim));
        w.set(p + "attention.value_length", uint32_t(c.head_dim_v));
    } else if (c.mla()) {  // (deepseek2: the cache's row and the latent; the heads' sizes in the *_mla keys)
        w.set(p + "attention.key_length", uint32_t(c.mla_row()));
        w.set(p + "attention.value_length", uint32_t(c.kv_lora_rank));
        w.set(p + "attention.key_length_mla", uint32_t(c.head_dim));
        w.set(p + "attention.value_length_mla", uint32_t(c.head_dim_v));
    }
    if (c.mla()) {
        w.set(p + "attention.kv_lora_rank", uint32_t(c.kv_lora_rank));
        w.set(p + "attention.q_lora_rank", uint32_t(c.q_lora_rank));
        w.set(p + "leading_dense_block_count", uint32_t(c.n_leading_dense));
        w.set(p + "expert_shared_count", uint32_t(c.n_expert_shared));
        w.set(p + "expert_weights_scale", c.moe_weights_scale);
        w.set(p + "expert_weights_norm", c.moe_norm_weights);
        w.set(p + "expert_gating_func", uint32_t(c.moe_gating_sigmoid ? 2 : 1));
        if (c.moe_n_group > 1) {
            w.set(p + "expert_group_count", uint32_t(c.moe_n_group));
            w.set(p + "expert_group_used_count", uint32_t(c.moe_n_group_used));
        }
        if (c.rope_yarn) w.set(p + "rope.scaling.yarn_log_multiplier", c.yarn_log_mul);
        if (c.attn_temp_scale != 0.0f) w.set(p + "attention.temperature_length", uint32_t(c.attn_temp_floor));
        if (c.dsa()) {
            w.set(p + "attention.indexer.head_count", uint32_t(c.indexer_n_head));
            w.set(p + "attention.indexer.key_length", uint32_t(c.indexer_head_dim));
            w.set(p + "attention.indexer.top_k", uint32_t(c.indexer_top_k));
            if (!c.indexer_layers.empty()) {  // (glm-dsa: GLM-5.2's converter writes a bool a layer)
                std::vector<GgufValue> types;
                for (int64_t l = 0; l < c.n_layer; ++l) types.emplace_back(c.layer_indexer(l));
                w.set(p + "attention.indexer.types", GgufValue::array(GgufType::BOOL, types));
            }
        }
    } else if ((c.head_dim * c.n_head != c.n_embd && !attention_free) || c.arch == "gemma4" || c.arch == "gemma3n" ||
               qwen35 || c.arch == "nemotron_h" || c.arch == "falcon-h1") {
        w.set(p + "attention.key_length", uint32_t(c.head_dim));
        w.set(p + "attention.value_length", uint32_t(c.head_dim));
    }
    if (!attention_free) w.set(p + "rope.dimension_count", uint32_t(c.n_rot));
    if (c.rope_alpha > 0.0f) {  // (hunyuan-dense: the base before alpha's scaling, and alpha)
        const auto d = static_cast<float>(c.head_dim);
        w.set(p + "rope.freq_base", c.rope_base / std::pow(c.rope_alpha, d / (d - 2.0f)));
        w.set(p + "rope.scaling.alpha", c.rope_alpha);
    } else if (!attention_free) {
        w.set(p + "rope.freq_base", c.rope_base);
    }
    // (Cohere's LayerNorm; nemotron_h's as its converter writes it, which llama.cpp's RMS norms read)
    w.set(p + (c.layer_norm || c.arch == "nemotron_h" ? "attention.layer_norm_epsilon"
                                                      : "attention.layer_norm_rms_epsilon"),
          c.rms_eps);
    w.set(p + "vocab_size", uint32_t(c.n_vocab));
    if (c.rope_yarn) {
        w.set(p + "rope.scaling.type", "yarn");
        w.set(p + "rope.scaling.factor", 1.0f / c.rope_freq_scale);
        w.set(p + "rope.scaling.original_context_length", uint32_t(c.yarn_n_ctx_orig));
        if (c.arch == "mistral3") {
            w.set(p + "rope.scaling.yarn_beta_fast", c.yarn_beta_fast);
            w.set(p + "rope.scaling.yarn_beta_slow", c.yarn_beta_slow);
            w.set(p + "rope.scaling.yarn_log_multiplier", 1.0f);
        }
    }
    // (mistral3's key; llama4's files carry none: llama.cpp fixes its temperature)
    if (c.attn_temp_scale != 0.0f && c.arch != "llama4") w.set(p + "attention.temperature_scale", c.attn_temp_scale);
    if (c.moe()) {
        w.set(p + "expert_count", uint32_t(c.n_expert));
        w.set(p + "expert_used_count", uint32_t(c.n_expert_used));
        // (olmoe's converter writes none: its experts are feed_forward_length wide)
        if (c.file_arch != "olmoe") w.set(p + "expert_feed_forward_length", uint32_t(c.n_ff_exp));
    }
    int64_t shexp = c.n_layer - 1;  // (the last layer with experts: nemotron_h's last may be attention alone)
    while (shexp > 0 && !(c.layer_moe(shexp) && c.layer_has_ffn(shexp))) --shexp;
    if (c.arch == "llama4") w.set(p + "interleave_moe_layer_step", uint32_t(c.moe_layer_step));
    // (dots1's and afmoe's converters write none; bailingmoe2's the width of one of the shared experts)
    if (c.moe_shared_expert && c.arch != "glm4moe" && c.arch != "deepseek2" && c.arch != "llama4" &&
        (!shared_moe || c.file_arch == "bailingmoe2"))
        w.set(p + "expert_shared_feed_forward_length",
              uint32_t(c.layer_n_ff(shexp) / std::max<int64_t>(1, c.n_expert_shared)));
    if (c.file_arch == "ernie4_5-moe") {  // (its converter's keys: no gating function, softmax)
        w.set(p + "interleave_moe_layer_step", uint32_t(1));
        w.set(p + "leading_dense_block_count", uint32_t(c.n_leading_dense));
    } else if (c.moe_selection_bias && c.arch != "nemotron_h") {  // (glm4moe, lfm2moe, minimax-m2: their converters'
        // keys)
        w.set(p + "expert_gating_func", uint32_t(c.moe_gating_sigmoid ? 2 : 1));
        if (c.file_arch != "minimax-m2") w.set(p + "leading_dense_block_count", uint32_t(c.n_leading_dense));
    }
    if (c.arch == "glm4moe") {
        w.set(p + "expert_shared_count", uint32_t(c.layer_n_ff(c.n_layer - 1) / c.n_ff_exp));
        w.set(p + "expert_weights_norm", c.moe_norm_weights);
        w.set(p + "expert_weights_scale", c.moe_weights_scale);
        if (c.n_layer_nextn > 0) w.set(p + "nextn_predict_layers", uint32_t(c.n_layer_nextn));
    }
    if (shared_moe) {  // (read_shared_expert_moe's keys)
        w.set(p + "expert_shared_count", uint32_t(c.n_expert_shared));
        w.set(p + "expert_weights_norm", c.moe_norm_weights);
        w.set(p + "expert_weights_scale", c.moe_weights_scale);
        if (c.moe_n_group > 0) {
            w.set(p + "expert_group_count", uint32_t(c.moe_n_group));
            w.set(p + "expert_group_used_count", uint32_t(c.moe_n_group_used));
        }
        if (c.file_arch == "bailingmoe2") w.set(p + "nextn_predict_layers", uint32_t(c.n_layer_nextn));
        if (c.sliding_window > 0) w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        if (c.sliding_window > 0) w.set(p + "rope.freq_base_swa", c.rope_base_local);
    }
    if (c.file_arch == "exaone-moe") {  // (as its converter writes them)
        w.set(p + "expert_gating_func", uint32_t(c.moe_gating_sigmoid ? 2 : 1));
        w.set(p + "leading_dense_block_count", uint32_t(c.n_leading_dense));
        w.set(p + "expert_shared_count", uint32_t(1));
        w.set(p + "expert_weights_norm", c.moe_norm_weights);
        w.set(p + "expert_weights_scale", c.moe_weights_scale);
        w.set(p + "nextn_predict_layers", uint32_t(c.n_layer_nextn));
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "attention.sliding_window_pattern", GgufValue::array(GgufType::BOOL, local_kinds));
        w.set(p + "rope.scaling.type", "none");
    }
    if (c.file_arch == "step35") save_step35_keys(w, c);
    if (c.file_arch == "laguna") save_laguna_keys(w, c);
    if (c.arch == "gemma2") {
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "attn_logit_softcapping", c.attn_logit_softcap);
        w.set(p + "final_logit_softcapping", c.final_logit_softcap);
    }
    if (c.arch == "gpt-oss" && c.sliding_window > 0)
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
    if (c.arch == "gemma4") {
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "attention.sliding_window_pattern", GgufValue::array(GgufType::BOOL, local_kinds));
        w.set(p + "attention.key_length_swa", uint32_t(c.head_dim_local));
        w.set(p + "attention.value_length_swa", uint32_t(c.head_dim_local));
        w.set(p + "rope.dimension_count_swa", uint32_t(c.n_rot_local));
        w.set(p + "rope.freq_base_swa", c.rope_base_local);
        w.set(p + "final_logit_softcapping", c.final_logit_softcap);
        w.set(p + "embedding_length_per_layer_input", uint32_t(c.n_embd_per_layer));  // (llama.cpp requires it)
        if (c.n_kv_shared > 0) w.set(p + "attention.shared_kv_layers", uint32_t(c.n_kv_shared));
    }
    if (c.arch == "gemma3n") {  // (as its converter writes them)
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "attention.sliding_window_pattern", GgufValue::array(GgufType::BOOL, local_kinds));
        w.set(p + "rope.freq_base_swa", c.rope_base_local);
        w.set(p + "final_logit_softcapping", c.final_logit_softcap);
        w.set(p + "altup.active_idx", uint32_t(c.altup_active));
        w.set(p + "altup.num_inputs", uint32_t(c.n_altup));
        w.set(p + "embedding_length_per_layer_input", uint32_t(c.n_embd_per_layer));
        w.set(p + "attention.shared_kv_layers", uint32_t(c.n_kv_shared));
        std::vector<GgufValue> sparsity;
        for (int64_t l = 0; l < c.n_layer; ++l) sparsity.emplace_back(c.layer_sparse(l) ? c.sparsity_std_mul : 0.0f);
        w.set(p + "activation_sparsity_scale", GgufValue::array(GgufType::F32, sparsity));
    }
    if (c.arch == "nemotron_h" && c.moe()) {  // (as its converter writes them)
        w.set(p + "expert_shared_count", uint32_t(1));
        w.set(p + "expert_weights_norm", c.moe_norm_weights);
        w.set(p + "expert_weights_scale", c.moe_weights_scale);
        w.set(p + "expert_group_count", uint32_t(1));
    }
    if (c.arch == "granitehybrid" || c.arch == "nemotron_h" || c.arch == "falcon-h1" || c.arch == "mamba2") {
        // (no RoPE, as Granite 4.0 H's converted files say; nemotron_h has none whatever they say)
        if (c.arch == "granitehybrid" || c.arch == "nemotron_h") w.set(p + "rope.scaling.finetuned", false);
        w.set(p + "ssm.conv_kernel", uint32_t(c.ssm_conv));
        w.set(p + "ssm.state_size", uint32_t(c.ssm_head_k));
        w.set(p + "ssm.group_count", uint32_t(c.ssm_n_k_heads));
        w.set(p + "ssm.time_step_rank", uint32_t(c.ssm_n_v_heads));
        w.set(p + "ssm.inner_size", uint32_t(c.ssm_d_inner()));
    }
    if (c.arch == "granite" || c.arch == "granitehybrid") {
        w.set(p + "embedding_scale", c.embd_scale);
        w.set(p + "residual_scale", c.residual_scale);
        w.set(p + "attention.scale", c.attn_scale);
        w.set(p + "logit_scale", c.logit_scale);
    }
    if (c.arch == "command-r" || c.arch == "cohere2") w.set(p + "logit_scale", c.logit_mul);
    if (c.file_arch == "cohere2moe") {  // (as its converter writes them)
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "attention.sliding_window_pattern", GgufValue::array(GgufType::BOOL, local_kinds));
        w.set(p + "leading_dense_block_count", uint32_t(c.n_leading_dense));
        w.set(p + "expert_gating_func", uint32_t(c.moe_gating_sigmoid ? 2 : 1));
        w.set(p + "expert_weights_norm", c.moe_norm_weights);
        w.set(p + "expert_shared_count", uint32_t(c.n_expert_shared));
        w.set(p + "nextn_predict_layers", uint32_t(c.n_layer_nextn));
        w.set(p + "rope.scaling.type", "none");
    }
    if (c.file_arch == "granite_swa") {  // (as its converter writes them)
        std::vector<GgufValue> rope;
        for (int64_t l = 0; l < c.n_layer; ++l) rope.emplace_back(c.layer_has_rope(l));
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "attention.sliding_window_pattern", GgufValue::array(GgufType::BOOL, local_kinds));
        w.set(p + "attention.rope_pattern", GgufValue::array(GgufType::BOOL, rope));
    }
    if (c.arch == "cohere2" && c.file_arch != "cohere2moe") {
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "attention.sliding_window_pattern", uint32_t(c.swa_pattern));
    }
    if (c.arch == "olmo2" && c.sliding_window > 0) {  // (the pattern as its converter writes it)
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "attention.sliding_window_pattern", GgufValue::array(GgufType::BOOL, local_kinds));
    }
    if (c.arch == "exaone4" && c.sliding_window > 0) {
        w.set(p + "attention.sliding_window", uint32_t(c.sliding_window));
        w.set(p + "attention.sliding_window_pattern", uint32_t(c.swa_pattern));
    }
    if (c.arch == "mamba") {
        w.set(p + "ssm.conv_kernel", uint32_t(c.ssm_conv));
        w.set(p + "ssm.inner_size", uint32_t(c.ssm_d_inner()));
        w.set(p + "ssm.state_size", uint32_t(c.ssm_head_k));
        w.set(p + "ssm.time_step_rank", uint32_t(c.ssm_dt_rank));
        w.set(p + "ssm.dt_b_c_rms", c.ssm_dt_b_c_rms);
    }
    if (qwen35) {
        w.set(p + "ssm.conv_kernel", uint32_t(c.ssm_conv));
        w.set(p + "ssm.state_size", uint32_t(c.ssm_head_k));
        w.set(p + "ssm.group_count", uint32_t(c.ssm_n_k_heads));
        w.set(p + "ssm.time_step_rank", uint32_t(c.ssm_n_v_heads));
        w.set(p + "ssm.inner_size", uint32_t(c.ssm_d_inner()));
        w.set(p + "full_attention_interval", uint32_t(c.full_attn_interval));
    }
    if (qwen35 && !c.ssm_grouped) {  // (qwen3next: no sections)
        // Qwen3.5's sections (11, 11, 10 of 32 pairs) in proportion to n_rot / 2 pairs
        const int64_t pairs = c.n_rot / 2, s0 = (pairs * 11 + 31) / 32;
        w.set(p + "rope.dimension_sections",
              GgufValue::array(GgufType::I32, {GgufValue(int32_t(s0)), GgufValue(int32_t(s0)),
                                               GgufValue(int32_t(pairs - 2 * s0)), GgufValue(int32_t(0))}));
    }
    if (c.rope_sections[0] + c.rope_sections[1] + c.rope_sections[2] > 0 && c.arch != "qwen35") {
        std::vector<GgufValue> sections;
        for (int64_t x : c.rope_sections) sections.emplace_back(int32_t(x));
        w.set(p + "rope.dimension_sections", GgufValue::array(GgufType::I32, sections));
    }
    if (c.arch == "lfm2") w.set(p + "shortconv.l_cache", uint32_t(c.ssm_conv));
    if (c.ffn_act == ModelConfig::Activation::xielu) {  // (apertus: one value a layer)
        auto floats = [](const std::vector<float>& v) {
            std::vector<GgufValue> a;
            for (float x : v) a.emplace_back(x);
            return GgufValue::array(GgufType::F32, a);
        };
        w.set("xielu.alpha_n", floats(c.xielu_alpha_n));
        w.set("xielu.alpha_p", floats(c.xielu_alpha_p));
        w.set("xielu.beta", floats(c.xielu_beta));
        w.set("xielu.eps", floats(c.xielu_eps));
    }
    if (c.arch == "phi3") {
        w.set(p + "rope.scaling.original_context_length", uint32_t(c.yarn_n_ctx_orig));
        w.set(p + "rope.scaling.attn_factor", c.rope_mscale);
    }
    if (const char* tmpl = chat_template(c.gguf_arch())) w.set("tokenizer.chat_template", tmpl);
    // A synthetic SPM vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then filler pieces.
    std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
    std::vector<GgufValue> scores, types;
    for (int i = 0; i < 256; ++i) tokens.push_back(fmt::format("<0x{:02X}>", i));
    for (int64_t i = static_cast<int64_t>(tokens.size()); i < c.n_vocab; ++i) tokens.push_back(fmt::format("▁t{}", i));
    // The last pieces: the control tokens of the architecture's chat format (llama.cpp also looks some up by name).
    const std::vector<std::string> control = control_tokens(c.arch);
    const size_t first_control = tokens.size() - std::min(control.size(), tokens.size() - 259);
    for (size_t i = first_control; i < tokens.size(); ++i) tokens[i] = control[i - first_control];
    for (size_t i = 0; i < tokens.size(); ++i) {
        scores.emplace_back(i < 259 ? 0.0f : -static_cast<float>(i));
        types.emplace_back(int32_t(i == 0 ? 2 : i < 3 || i >= first_control ? 3 : i < 259 ? 6 : 1));
    }
    w.set("tokenizer.ggml.model", "llama");
    w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
    w.set("tokenizer.ggml.scores", GgufValue::array(GgufType::F32, std::move(scores)));
    w.set("tokenizer.ggml.token_type", GgufValue::array(GgufType::I32, std::move(types)));
    w.set("tokenizer.ggml.bos_token_id", uint32_t(1));
    w.set("tokenizer.ggml.eos_token_id", uint32_t(2));
    w.set("tokenizer.ggml.unknown_token_id", uint32_t(0));

    auto view = [&](const TensorView& t) {
        std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + (t.ne[2] > 1 ? 3 : t.ne[1] > 1 ? 2 : 1));
        w.add_tensor_view(t.name, t.type, ne, {t.data, t.n_bytes});
    };
    auto vec = [&](const NamedVector& v) {
        std::vector<int64_t> ne{v.n};
        if (v.rows > 1) ne.push_back(v.rows);
        w.add_tensor_view(v.name, GgmlType::F32, ne,
                          {reinterpret_cast<const uint8_t*>(v.values->data()), v.values->size() * sizeof(float)});
    };
    view(weights.tok_embd);
    if (!weights.output_tied) view(weights.output);
    if (weights.per_layer_tok_embd.data) {
        view(weights.per_layer_tok_embd);
        view(weights.per_layer_model_proj);
    }
    if (weights.altup_proj.data) {
        view(weights.altup_proj);
        view(weights.altup_unembd_proj);
    }
    for (const NamedVector& v : model_vectors(c, weights)) vec(v);
    for (int64_t i = 0; i < c.n_layer; ++i) {
        const LayerWeights& L = weights.layers[i];
        for (const TensorView* t : layer_file_matrices(L)) view(*t);
        for (const NamedVector& v : layer_vectors(c, L, i)) vec(v);
    }
    for (size_t j = 0; j < mtp_layers.size(); ++j) {
        const auto i = c.n_layer + static_cast<int64_t>(j);
        for (const TensorView* t : layer_file_matrices(mtp_layers[j])) view(*t);
        for (const NamedVector& v : layer_vectors(c, mtp_layers[j], i)) vec(v);
        view(mtp_matrices[j]);
    }
    for (const auto& [name, v] : mtp_vectors) vec({name, &v, static_cast<int64_t>(v.size()), 1});
    w.write(path);
}

}  // namespace quill
