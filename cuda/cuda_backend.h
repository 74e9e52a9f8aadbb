// The CUDA backend: the same forward pass as the CPU backend (engine/cpu/cpu_backend.cpp, its oracle), with the
// weights in their GGUF block formats and the contiguous KV cache in device memory. Host-only header: no CUDA
// includes, so the session code and the tests compile without the toolkit's headers.
#pragma once

#include "cuda/gemm_mode.h"
#include "engine/model/weights.h"
#include "engine/runtime/backend.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace quill::cuda {

struct CudaBackendOptions {
    int64_t n_ctx = 0;    // positions per slot
    int64_t n_slots = 1;  // sequences in flight
    KvType kv_type = KvType::f16;
    int64_t plan_tokens = 512;  // tokens per forward call the workspace is planned for (it grows when a batch is larger)
    // Decode steps (every token asks for logits, at most kMaxGraphTokens of them) as CUDA graphs: captured once per
    // token count, replayed after that, reading tokens, slots and positions from device memory. Off: every kernel
    // launched each call (the same kernels, so the same results bit for bit).
    bool graphs = true;
    // Products of more than kMaxGraphTokens tokens (prefill) through cuBLAS in this mode (gemm_mode.h), when
    // cuBLAS loads; else, and with off, quill's matmul kernel.
    GemmMode gemm = GemmMode::tf32;
    // Q4_0, Q4_1 and Q8_0 matrices uploaded in the packed layout (cuda/dequant.h: 16-byte loads of the quants).
    bool packed_weights = true;
    // Q4_0, Q4_1 and Q8_0 products of fewer tokens (decode) as int8 dot products with the input quantized per block
    // of 32, as the CPU backend's kernels do (matmul_q8); off: the float kernel (the reference backend's function).
    bool int8_products = true;
    // Prompts of more than kMaxGraphTokens tokens attend in flash-attention tiles on the tensor cores (an f16 cache
    // and head_dim a multiple of 16 up to 128; kernels.h attention).
    bool flash_attention = true;
    // Fewer launches a decode step: Q, K and V (and gate and up) multiplied in one launch when alike, the int8
    // inputs quantized by the norm, the attention and the activation that write them, each layer's output checked by
    // the next layer's norm; and more than eight decode tokens multiplied four rows a warp (matmul_q8 rows_kernel).
    // The same arithmetic, bit for bit (tests/unit/cuda/test_cuda.cpp): 9 launches a layer instead of 17, and a
    // decode step's kernels are short enough that the gaps between them count. QUILL_CUDA_FUSE=0 turns it off.
    bool fused_kernels = true;
    // Decode products of these types (of Q4_0, Q4_1 and Q8_0), rows a multiple of 1024 wide in the packed layout,
    // streamed through shared memory with cp.async (kernels.h Q8Launch::stream), the same bits
    // (tests/unit/cuda/test_cuda.cpp). Q8_0 keeps the register kernel, which decoded it faster at every stage count
    // tried (kernels.cu). QUILL_CUDA_STREAM=0: none, =1: all three.
    std::vector<GgmlType> stream_types = {GgmlType::Q4_0, GgmlType::Q4_1};
    int stream_stages = 0;  // the streamed kernel's ring: 2, 3, 4, 6 or 8 stages (0: kernels.h kStreamStagesDefault)
    // The int8 decode products launched as programmatic dependents (sm_90 or later; ignored below): each fetches its
    // first weights while the kernel before it finishes (kernels.h Q8Launch::pdl).
    bool programmatic_launch = true;
    // The other kernels of a decode step's layers (the norms, RoPE + K/V store, attention, activation, the
    // activations' quantization) launched as programmatic dependents too (sm_90 or later): each kernel's blocks are
    // on the multiprocessors, waiting, when the kernel before it finishes, instead of launching then. For comparison:
    // QUILL_CUDA_PDL=products launches the products alone that way, QUILL_CUDA_PDL=0 none.
    bool programmatic_chain = true;
    // More than eight decode tokens (sequences decoding together) multiplied by int8 mma on the tensor cores (kernels.h
    // Q8Launch::mma; sm_80 or later, packed layout), the same bits as the dp4a kernels by construction and by its
    // test; faster than the dp4a kernels from 16 sequences on, and more so the more sequences. QUILL_CUDA_MMA=0 turns
    // it off.
    bool mma_products = true;
    // The mma kernel with the tokens' quants and scales staged in shared memory a round at a time (kernels.h
    // Q8Launch::mma_staged), written for what Nsight Compute found the direct one bound by (L1's gathers): the same
    // bits by construction and by its tests, which have not run on a GPU yet, so off. QUILL_CUDA_MMA=staged.
    bool mma_staged = false;
};

// The largest decode batch replayed as a CUDA graph.
constexpr int64_t kMaxGraphTokens = 64;

// Device memory the backend takes, and what the device had free before it took it.
struct MemoryPlan {
    std::string device;  // the device's name (cudaDeviceProp::name)
    size_t total = 0, free = 0;
    size_t weights = 0, kv = 0, workspace = 0;  // workspace includes the GEMM's scratch
    size_t needed() const;  // weights + kv + workspace + a margin for the runtime
    // "weights 4.3 GiB, KV cache 1.0 GiB, workspace 0.2 GiB of 139.8 GiB (138.9 GiB free)"
    std::string describe() const;
};

// FileError naming the first tensor whose type has no CUDA kernel (the embedding included).
void check_weights(const Weights& weights);
// check_weights, and FileError for shapes the CUDA kernels do not take (head_dim above 512, an odd rope dimension).
void check_model(const ModelConfig& config, const Weights& weights);

// Device bytes of weights as uploaded, and of the workspace for a batch of n_tokens asking for n_logits rows.
size_t weight_bytes(const Weights& weights);
size_t workspace_bytes(const ModelConfig& config, int64_t n_tokens, int64_t n_logits);
// The GEMM's scratch for these weights in this mode, for a forward call of n_tokens tokens.
size_t gemm_workspace_bytes(const Weights& weights, GemmMode mode, int64_t n_tokens);

// The plan on device 0, which must exist. UsageError when it does not fit in the free memory, saying how much it
// needs and the largest context that would fit (or that the weights alone do not fit).
MemoryPlan plan_memory(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options);

// The largest context (positions per slot) whose plan fits device 0's free memory; 0 when none does.
int64_t largest_context(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options);

class CudaBackend final : public Backend {
public:
    // config and weights must outlive the backend. Checks the weight types and the plan before allocating, then
    // uploads the weights. Throws FileError (a weight type without a kernel), UsageError (does not fit) or Error
    // (a CUDA failure, named).
    CudaBackend(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options);
    ~CudaBackend() override;

    std::string_view name() const override { return "cuda"; }
    const ModelConfig& config() const override { return config_; }
    const KvCacheShape& kv_shape() const override { return kv_shape_; }
    // The device, the memory plan and the prefill's GEMM mode (and why cuBLAS is off, when it is).
    BackendInfo describe() const override;
    void forward(const Batch& batch, std::span<float> logits) override;
    // Rows whose samplers are all plain greedy (Sampler::plain_greedy) are picked on the device, and only their ids
    // come back. Otherwise, when every sampler bounds the candidates it needs (Sampler::top_needed), the device
    // selects them (top_candidates) and only they come back for the host to sample from (Sampler::sample_top, the
    // CPU's tokens and draws); else the logits come back and sample on the host.
    void forward_sample(const Batch& batch, std::span<Sampler* const> samplers, int64_t n_token_ids,
                        std::span<int32_t> tokens) override;
    // One device-to-device copy per layer for K and for V, on the backend's stream (ordered before the next
    // forward pass).
    bool can_copy_kv() const override { return true; }
    void copy_kv(int32_t src, int32_t dst, int64_t begin, int64_t end) override;
    // Measured once (5 copies of 256 MiB, the fastest), then remembered.
    double copy_bandwidth_gbs() override;
    // Measured once: the fastest of 5 products of two 8192 x 8192 matrices through the prefill's GEMM path in its
    // mode (weights stored as that mode multiplies them; F32 inputs, converted to F16 in f16 mode; inputs filled
    // with a nonzero pattern, not zeros); 0 without cuBLAS or on any failure.
    double matmul_rate_tflops() override;

    const MemoryPlan& plan() const { return plan_; }
    // The mode prefill products run in: the option, or off when cuBLAS could not be loaded (gemm_unavailable says
    // why).
    GemmMode gemm_mode() const;
    const std::string& gemm_unavailable() const;

    // Decode graphs captured so far (for the tests).
    size_t n_graphs() const;

private:
    void enqueue_forward(int64_t n, int64_t m);  // every kernel of one forward call, on the backend's stream
    void launch(const Batch& batch);             // uploads the batch and enqueues its forward pass (or graph)
    void raise_flag(int32_t bad_layer) const;    // the error for a non-finite layer output (INT_MAX: none)
    void forward_sample_candidates(const Batch& batch, std::span<Sampler* const> samplers, int64_t n_token_ids,
                                   std::span<int32_t> tokens);
    struct Impl;
    const ModelConfig& config_;
    const Weights& weights_;
    KvCacheShape kv_shape_;
    bool graphs_;
    double copy_gbs_ = 0.0;
    double gemm_tflops_ = -1.0;  // not measured yet
    MemoryPlan plan_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace quill::cuda
