// The model's weights in device memory, uploaded once: every matrix in its GGUF block format, with Q4_0, Q4_1 and
// Q8_0 split into a quants plane and a scales plane (the packed layout, cuda/dequant.h); the norm vectors and biases
// as floats; the RoPE inverse frequencies. A tied output matrix is the embedding, uploaded once.
#pragma once

#include "cuda/buffer.h"
#include "cuda/kernels.h"
#include "cuda/moe.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace quill::cuda {

// One layer's matrices and vectors on the device.
struct DeviceLayer {
    DeviceMatrix wq, wk, wv, wo, gate, up, down;  // gate, up, down: a dense FFN's
    DeviceExperts experts;                         // a mixture of experts' (ModelConfig::moe())
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    // nullptr when the model has none (LayerWeights)
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
    const float* sinks = nullptr;  // [n_head] gpt-oss's attention sinks (Heads::sinks), nullptr: none
    const float *q_norm = nullptr, *k_norm = nullptr, *attn_post_norm = nullptr, *ffn_post_norm = nullptr;
};

class DeviceWeights {
public:
    // Uploads on stream s through two pinned staging buffers, so that copying the next chunk out of the mapped file
    // overlaps the DMA of the previous one; returns once the copies are done. bytes: weight_bytes(config, weights),
    // the plan's (QUILL_CHECK: the upload takes exactly that). n_ctx: the positions per slot, which pick phi3's long or
    // short RoPE factors. Throws Error on a CUDA failure, named.
    DeviceWeights(const ModelConfig& config, const Weights& weights, size_t bytes, int64_t n_ctx, cudaStream_t s);

    std::vector<DeviceLayer> layers;
    DeviceMatrix tok_embd, output;
    const float* output_norm = nullptr;
    const double* inv_freq = nullptr;  // [2, n_rot / 2] RoPE inverse frequencies, global then local (two_ropes)

private:
    DeviceBuffer buffer_;     // every matrix and vector, each at a 256-byte boundary
    DeviceBuffer rope_freq_;  // inv_freq
};

}  // namespace quill::cuda
