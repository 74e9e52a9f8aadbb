// The CUDA backend: the same forward pass as the CPU backend (engine/cpu/cpu_backend.cpp, its oracle), with the
// weights in their GGUF block formats and the contiguous KV cache in device memory. cuda_backend.cpp holds the
// workspace, graphs and the forward pass; memory_plan.h the checks and sizes before the device is touched,
// device_weights.h the upload, profile.h QUILL_CUDA_PROFILE, tuning.h the developer switches, kernels.h the kernels.
// Host-only header: no CUDA includes, so the session code and the tests compile without the toolkit's headers.
#pragma once

#include "cuda/gemm_mode.h"
#include "cuda/memory_plan.h"
#include "cuda/tuning.h"
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
    // launched each call (the same kernels, so the same results bit for bit). Never for a mixture of experts, whose
    // forward reads each layer's routing on the host (cuda/moe.h).
    bool graphs = true;
    Tuning tuning;  // the developer switches (cuda/tuning.h; the session reads them with read_tuning)
};

// The largest decode batch replayed as a CUDA graph.
constexpr int64_t kMaxGraphTokens = 64;

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
