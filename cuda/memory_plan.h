// Whether a model suits the CUDA backend and how its device memory is planned: the checks the session runs before
// touching the device, the bytes of weights, KV cache and workspace, and the largest context that fits. Host-only
// header: no CUDA includes.
#pragma once

#include "cuda/gemm_mode.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace quill::cuda {

struct CudaBackendOptions;  // cuda/cuda_backend.h

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
// check_weights, and FileError for what the CUDA kernels do not take: a mixture of experts other than qwen3moe's,
// shapes (head_dim above 512, an odd rope dimension), the settings check_model names.
void check_model(const ModelConfig& config, const Weights& weights);

// Device bytes of weights as DeviceWeights uploads them (every matrix, a mixture's experts included, and every vector
// of layer_vectors), and of the workspace for a batch of n_tokens asking for n_logits rows (the experts' included).
size_t weight_bytes(const ModelConfig& config, const Weights& weights);
size_t workspace_bytes(const ModelConfig& config, int64_t n_tokens, int64_t n_logits);
// The GEMM's scratch for these weights in this mode, for a forward call of n_tokens tokens.
size_t gemm_workspace_bytes(const Weights& weights, GemmMode mode, int64_t n_tokens);

// The plan on device 0, which must exist. UsageError when it does not fit in the free memory, saying how much it
// needs and the largest context that would fit (or that the weights alone do not fit).
MemoryPlan plan_memory(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options);

// The largest context (positions per slot) whose plan fits device 0's free memory; 0 when none does.
int64_t largest_context(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options);

// Every array of the device's weights and workspace starts at a multiple of kAlign bytes (the kernels read
// activations as float4 and weights in 16-byte loads).
constexpr size_t kAlign = 256;
inline size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Blocks of 32 in the widest matmul input of a token.
int64_t q8_blocks(const ModelConfig& c);
// Floats of the workspace a token takes (the arrays of CudaBackend's workspace, one token's row of each).
int64_t workspace_tokens_floats(const ModelConfig& c);

}  // namespace quill::cuda
