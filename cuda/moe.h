// A mixture-of-experts FFN on the CUDA backend (ModelConfig::moe(): qwen3moe, gpt-oss), as the CPU backend computes
// it (engine/cpu/moe.cpp): the router's product, the routing on the host (moe_routing.h, the router's bias added
// there: the forward call waits once a layer for the router's logits, so such a model's decode steps are not
// captured as graphs), each used expert's gate, up and down products over the rows of its tokens gathered (its
// weights read once per forward call, through the backend's product kernels), SwiGLU (or gpt-oss's clamped form with
// the experts' gate and up biases, cuda/moe_math.h), and each token's expert outputs (plus their down biases)
// weighted and summed in increasing expert order into the residual stream: a token's bits do not depend on the rest
// of its batch.
#pragma once

#include "cuda/buffer.h"
#include "cuda/kernels.h"
#include "cuda/moe_routing.h"
#include "engine/model/model_config.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

namespace quill::cuda {

// One layer's experts on the device: the router [n_expert rows, n_embd] and each expert's matrices, uploaded once
// (the file's 3-D tensors, an expert's matrix at a time).
struct DeviceExperts {
    DeviceMatrix router;
    std::vector<DeviceMatrix> gate, up, down;  // [n_expert]
    std::vector<float> router_bias;            // [n_expert] on the host (the routing's), empty: none
    // gpt-oss's expert biases on the device, [n_expert, n_ff_exp] for gate and up, [n_expert, n_embd] for down;
    // nullptr: none
    const float *gate_bias = nullptr, *up_bias = nullptr, *down_bias = nullptr;
};

// Device bytes of the experts' workspace for a forward call of n_tokens tokens (0 for a dense model).
size_t moe_workspace_bytes(const ModelConfig& c, int64_t n_tokens);

// x[t] += sum over i < k, in that order, of w[t, i] * (y[slots[t, i]] (+ b[owners[slots[t, i]]])), for t < n,
// rows of d floats; b [n_expert, d] the experts' down biases, nullptr: none.
void moe_combine(float* x, const float* y, const int32_t* slots, const float* w, int64_t n, int64_t k, int64_t d,
                 cudaStream_t s, const float* b = nullptr, const int32_t* owners = nullptr);

// gate[i] = swiglu_oai(gate[i] + b1[owners[i / f], i % f], up[i] + b3[owners[i / f], i % f], alpha, limit) for
// i < n f (cuda/moe_math.h): rows of f features, each of the expert owners[row] (biases nullptr: none).
void swiglu_oai_rows(float* gate, const float* up, const int32_t* owners, int64_t n, int64_t f, const float* b1,
                     const float* b3, float alpha, float limit, cudaStream_t s);

class MoeFfn {
public:
    using Product = std::pair<const DeviceMatrix*, float*>;
    // The backend's products: each matrix of the list times x [n_tokens rows] into its output, the first n_lead rows
    // being decode steps (they take the decode kernels).
    using Products = std::function<void(std::initializer_list<Product>, const float* x, int64_t n_tokens,
                                        int64_t n_lead)>;

    // x [n, n_embd] += the experts' FFN of xn (the normed input), the first n_lead tokens decode steps. Grows the
    // workspace when n is larger than before; synchronizes the stream once to read the router's logits.
    void forward(const ModelConfig& c, const DeviceExperts& E, const float* xn, float* x, int64_t n, int64_t n_lead,
                 const Products& products, cudaStream_t s);

private:
    void reserve(const ModelConfig& c, int64_t n, cudaStream_t s);
    int64_t cap_ = 0;
    DeviceBuffer floats_, ints_;
    PinnedBuffer host_;  // the router's logits, then the routing uploaded
    float *logits_ = nullptr, *xs_ = nullptr, *gate_ = nullptr, *up_ = nullptr, *down_ = nullptr;
    int32_t* routing_ = nullptr;  // rows [n k], slots [n k], weights [n k] (floats), owners [n k]
    ExpertGroups groups_;
};

}  // namespace quill::cuda
