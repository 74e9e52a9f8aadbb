#include "cuda/memory_plan.h"

#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/dequant.h"
#include "cuda/gemm.h"
#include "cuda/moe.h"
#include "engine/error.h"
#include "engine/model/layer_matrices.h"
#include "engine/model/weight_vectors.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <vector>

namespace quill::cuda {

namespace {

constexpr size_t kRuntimeMargin = size_t{256} << 20;  // cuBLAS-free, but the runtime and fragmentation take some

double gib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

template <class F>
void for_each_matrix(const Weights& w, F&& f) {
    f(w.tok_embd);
    for (const LayerWeights& L : w.layers)
        for (const TensorView* t : layer_matrices(L)) f(*t);
    f(w.output);
}

// Every float vector the device holds: each layer's (layer_vectors) and the output norm.
template <class F>
void for_each_vector(const ModelConfig& c, const Weights& w, F&& f) {
    for (size_t l = 0; l < w.layers.size(); ++l)
        for (const NamedVector& v : layer_vectors(c, w.layers[l], static_cast<int64_t>(l))) f(*v.values);
    f(w.output_norm);
}

}  // namespace

// Blocks of 32 in the widest matmul input of a token.
int64_t q8_blocks(const ModelConfig& c) {
    return (std::max({c.n_embd, c.n_embd_q(), c.n_ff, c.n_ff_exp}) + 31) / 32;
}

int64_t workspace_tokens_floats(const ModelConfig& c) {
    // x, xn [n_embd]; q, att [n_embd_q]; k, v [n_embd_kv]; gate, up [n_ff]; rope cos/sin, and the local layers'
    // [n_rot each]; an input quantized for matmul_q8: int8 values and a (d, d * sum) pair per block of 32
    return 2 * c.n_embd + 2 * c.n_embd_q() + 2 * c.n_embd_kv() + 2 * c.n_ff + 2 * c.n_rot + q8_blocks(c) * 10;
}

size_t MemoryPlan::needed() const { return weights + kv + workspace + kRuntimeMargin; }

std::string MemoryPlan::describe() const {
    return fmt::format("weights {:.2f} GiB, KV cache {:.2f} GiB, workspace {:.2f} GiB of {:.1f} GiB ({:.1f} GiB free)",
                       gib(weights), gib(kv), gib(workspace), gib(total), gib(free));
}

void check_model(const ModelConfig& config, const Weights& weights) {
    // gemma4's per-layer attention geometry, V norm and layer output scale have no kernels (the CPU backend runs it).
    if (config.arch == "gemma4")
        throw FileError("the CUDA backend cannot run gemma4 (Gemma 4) models (the CPU backend can: --device cpu)");
    // gemma3n's AltUp streams, Laurel branch and sparse gates have no kernels.
    if (config.altup())
        throw FileError("the CUDA backend cannot run gemma3n (Gemma 3n) models (the CPU backend can: --device cpu)");
    // hunyuan's Q/K norms after RoPE and the ungated ReLU² (arcee) and xIELU (apertus) FFNs have no kernels.
    if (config.qk_norm_after_rope || (!config.ffn_gated() && config.layer_blocks.empty()))
        throw FileError(fmt::format("the CUDA backend cannot run {} models (Q/K norms after RoPE, an ungated ReLU² or "
                                    "xIELU FFN); --device cpu runs it", config.gguf_arch()));
    // Architectures the CUDA forward has not been checked on (no GPU in their sessions): glm4, ernie4_5, seed_oss,
    // gemma, exaone-moe, and the settings without kernels here, granite's residual and logit scales and olmo2's and
    // exaone4's blocks without input norms.
    if (config.arch == "glm4" || config.arch == "granite" || config.arch == "olmo2" || config.arch == "exaone4" ||
        config.arch == "ernie4_5" || config.arch == "seed_oss" || config.arch == "gemma" ||
        config.file_arch == "exaone-moe")
        throw FileError(fmt::format("the CUDA backend cannot run {} models; --device cpu runs it",
                                    config.gguf_arch()));
    // deepseek2's Multi-head Latent Attention (a latent cache, absorbed key and value matrices) has no kernels.
    if (config.mla())
        throw FileError(fmt::format("the CUDA backend cannot run {} models (Multi-head Latent Attention); --device cpu "
                                    "runs it", config.gguf_arch()));
    // Cohere's LayerNorm and parallel attention and FFN (command-r, cohere2) have no kernels.
    if (config.layer_norm || config.parallel_blocks)
        throw FileError(fmt::format("the CUDA backend cannot run {} models (LayerNorm, attention and FFN in "
                                    "parallel); --device cpu runs it", config.gguf_arch()));
    // llama4's chunked attention, Q/K norms after RoPE, temperature on the layers without RoPE and experts weighted on
    // their input have no kernels.
    if (config.attn_chunk > 0 || config.qk_l2_norm || config.attn_temp_nope_only || config.moe_weight_input)
        throw FileError(fmt::format("the CUDA backend cannot run {} models (chunked attention, experts weighted on "
                                    "their input); --device cpu runs it", config.gguf_arch()));
    // qwen35's gated delta nets, granitehybrid's Mamba-2 layers and lfm2's short convs (a recurrent state per
    // sequence) and qwen35's gated queries have no kernels.
    if (config.recurrent() || config.attn_out_gate)
        throw FileError(fmt::format("the CUDA backend cannot run {} models (recurrent {} layers); --device cpu runs it",
                                    config.gguf_arch(),
                                    config.mamba2()                      ? "Mamba-2"
                                    : config.mamba1()                    ? "Mamba-1"
                                    : !config.short_conv_layers.empty() ? "short convolution"
                                                                         : "gated delta net"));
    // step35's local layers of their own head counts in a pattern of any kind and its clamped SwiGLU have no kernels.
    if (config.n_head_local > 0 || !config.local_layers.empty() || !config.swiglu_clamp_exp.empty() ||
        !config.swiglu_clamp_shexp.empty())
        throw FileError(fmt::format("the CUDA backend cannot run {} models (local layers of their own head counts, a "
                                    "clamped SwiGLU); --device cpu runs it", config.gguf_arch()));
    // afmoe's gate on the attention's output, a projection of its own, has no kernel.
    if (config.attn_gate_proj)
        throw FileError(fmt::format("the CUDA backend cannot run {} models (a gated attention output); --device cpu "
                                    "runs it", config.gguf_arch()));
    // DeepSeek-V3-style routing (glm4moe; lfm2moe, refused above) and leading dense layers have no kernels.
    if (config.moe_gating_sigmoid || config.moe_selection_bias || config.moe_weights_scale != 1.0f ||
        config.n_leading_dense > 0)
        throw FileError(fmt::format("the CUDA backend cannot run {} models (sigmoid expert routing with a selection "
                                    "bias, leading dense layers); --device cpu runs it", config.gguf_arch()));
    // The shared expert beside the routed ones (qwen2moe; qwen35moe, refused above) has no kernels.
    if (config.moe_shared_expert)
        throw FileError(fmt::format("the CUDA backend cannot run {} models (a shared expert beside the routed ones); "
                                    "--device cpu runs it", config.arch));
    // Q/K norms over the whole projection (olmoe; olmo2 refused above by name) and experts weighted by their
    // shares of the softmax over all of them, not renormalized (olmoe), have no kernels.
    if (config.qk_norm_whole || (config.moe() && !config.moe_norm_weights))
        throw FileError(fmt::format("the CUDA backend cannot run {} models (Q/K norms over the whole projection, "
                                    "experts' weights not renormalized); --device cpu runs it", config.gguf_arch()));
    // The clamped SwiGLU (swiglu-oai) is gpt-oss's experts'; a dense FFN of it has no kernel (nor a CPU path).
    if (config.ffn_act == ModelConfig::Activation::swiglu_oai && !config.moe())
        throw FileError(fmt::format("the CUDA backend cannot run {}'s dense clamped SwiGLU (swiglu-oai)", config.arch));
    // A mixture of experts as qwen3moe and gpt-oss have it (cuda/moe.h): SwiGLU experts (gpt-oss's clamped, with
    // router and expert biases), their inputs and outputs rows of a multiple of 4 floats (the products read them as
    // float4); what other architectures add to theirs has no kernel.
    const bool moe_act = config.arch == "qwen3moe" ? config.ffn_act == ModelConfig::Activation::silu
                                                    : config.arch == "gpt-oss" &&
                                                          config.ffn_act == ModelConfig::Activation::swiglu_oai;
    if (config.moe() && (!moe_act || config.n_embd % 4 != 0 || config.n_ff_exp % 4 != 0))
        throw FileError(fmt::format("the CUDA backend cannot run {}'s mixture of experts ({} experts of {} features "
                                    "over {}: it runs qwen3moe's and gpt-oss's, with widths a multiple of 4)",
                                    config.arch, config.n_expert, config.n_ff_exp, config.n_embd));
    check_weights(weights);
    // Every architecture setting of ModelConfig has its kernel (forward); the kernels' shape limits remain.
    if (config.head_dim > 512 || config.n_rot > config.head_dim || config.n_rot % 2 != 0 ||
        config.n_head % config.n_head_kv != 0)
        throw FileError(fmt::format("the CUDA backend needs head_dim <= 512, an even rope dimension <= head_dim and "
                                    "n_head a multiple of n_head_kv (got {}, {}, {} and {})",
                                    config.head_dim, config.n_rot, config.n_head, config.n_head_kv));
}

void check_weights(const Weights& weights) {
    for_each_matrix(weights, [](const TensorView& t) {
        if (!cuda_supports(t.type))
            throw FileError(fmt::format("tensor '{}' has type {}, which the CUDA backend cannot multiply (types with "
                                        "CUDA kernels: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K "
                                        "iq4_nl iq4_xs mxfp4){}",
                                        t.name, type_name(t.type),
                                        type_traits(t.type).can_dequantize ? "; --device cpu runs it" : ""));
    });
}

size_t weight_bytes(const ModelConfig& config, const Weights& weights) {
    size_t n = 0;
    std::map<const uint8_t*, bool> seen;  // a tied output matrix is the embedding: uploaded once
    for_each_matrix(weights, [&](const TensorView& t) {
        if (seen.emplace(t.data, true).second) n += align_up(t.n_bytes);
    });
    for_each_vector(config, weights, [&](const std::vector<float>& v) { n += align_up(v.size() * sizeof(float)); });
    return n;
}

size_t workspace_bytes(const ModelConfig& config, int64_t n_tokens, int64_t n_logits) {
    const size_t floats = static_cast<size_t>(n_tokens * workspace_tokens_floats(config) + n_logits * config.n_vocab);
    const size_t ints = static_cast<size_t>(3 * n_tokens + n_logits + 1);
    return align_up(floats * sizeof(float)) * 1 + align_up(ints * sizeof(int32_t)) + 16 * kAlign +
           moe_workspace_bytes(config, n_tokens);
}

size_t gemm_workspace_bytes(const Weights& weights, GemmMode mode, int64_t n_tokens) {
    int64_t max_elems = 0, max_cols = 0;
    for_each_matrix(weights, [&](const TensorView& t) {
        max_elems = std::max(max_elems, t.ne[0] * t.n_rows());
        max_cols = std::max(max_cols, t.ne[0]);
    });
    return gemm_scratch_bytes(mode, max_elems, max_cols, n_tokens);
}

namespace {

size_t kv_bytes(const ModelConfig& c, const CudaBackendOptions& o, int64_t n_ctx) {
    KvCacheShape s{c.n_layer, o.n_slots, n_ctx, c.n_head_kv, c.head_dim, o.kv_type};
    return s.bytes();
}

MemoryPlan plan_for(const ModelConfig& c, const Weights& w, const CudaBackendOptions& o) {
    MemoryPlan p;
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    p.device = prop.name;
    check(cudaMemGetInfo(&p.free, &p.total), "cudaMemGetInfo");
    p.weights = weight_bytes(c, w);
    p.kv = kv_bytes(c, o, o.n_ctx);
    p.workspace =
        workspace_bytes(c, o.plan_tokens, o.plan_tokens) + gemm_workspace_bytes(w, o.tuning.gemm, o.plan_tokens);
    return p;
}

}  // namespace

int64_t largest_context(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options) {
    MemoryPlan p = plan_for(config, weights, options);
    const size_t fixed = p.weights + p.workspace + kRuntimeMargin;
    if (fixed >= p.free) return 0;
    return static_cast<int64_t>((p.free - fixed) / std::max<size_t>(1, kv_bytes(config, options, 1)));
}

MemoryPlan plan_memory(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options) {
    MemoryPlan p = plan_for(config, weights, options);
    if (p.needed() <= p.free) return p;
    const size_t fixed = p.weights + p.workspace + kRuntimeMargin;
    if (fixed >= p.free)
        throw UsageError(fmt::format("the model does not fit on {}: its weights take {:.2f} GiB and the workspace "
                                     "{:.2f} GiB, and {:.2f} GiB are free",
                                     p.device, gib(p.weights), gib(p.workspace), gib(p.free)));
    const int64_t fits = static_cast<int64_t>((p.free - fixed) / std::max<size_t>(1, kv_bytes(config, options, 1)));
    throw UsageError(fmt::format("a context of {} positions ({} sequences) does not fit on {}: it needs {} and {:.2f} "
                                 "GiB are free; the largest context that fits is {} (--ctx)",
                                 options.n_ctx, options.n_slots, p.device, p.describe(), gib(p.free), fits));
}

}  // namespace quill::cuda
