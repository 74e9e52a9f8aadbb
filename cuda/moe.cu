// The kernels of a mixture-of-experts FFN's own (cuda/moe.h): each token's expert outputs weighted and summed;
// gpt-oss's clamped SwiGLU with the experts' biases.
#include "cuda/check.h"
#include "cuda/moe.h"
#include "cuda/moe_math.h"

#include <cstdint>

namespace quill::cuda {

namespace {

// A thread per element of x [n, d]: the token's k terms in its slots' order, rounded operations (no contraction
// into FMAs), so that a token's sum is the same bits in any batch.
__global__ void moe_combine_kernel(float* __restrict__ x, const float* __restrict__ y,
                                   const int32_t* __restrict__ slots, const float* __restrict__ w, int64_t n,
                                   int64_t k, int64_t d, const float* __restrict__ b,
                                   const int32_t* __restrict__ owners) {
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * d;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = idx / d, j = idx % d;
        float sum = 0.0f;
        for (int64_t i = 0; i < k; ++i) {
            const int64_t slot = slots[t * k + i];
            float yj = y[slot * d + j];
            if (b != nullptr) yj = __fadd_rn(yj, b[static_cast<int64_t>(owners[slot]) * d + j]);
            sum = __fadd_rn(sum, __fmul_rn(w[t * k + i], yj));
        }
        x[idx] = __fadd_rn(x[idx], sum);
    }
}

__global__ void swiglu_oai_kernel(float* __restrict__ gate, const float* __restrict__ up,
                                  const int32_t* __restrict__ owners, int64_t n, int64_t f,
                                  const float* __restrict__ b1, const float* __restrict__ b3, float alpha,
                                  float limit) {
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * f;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t at = static_cast<int64_t>(owners[idx / f]) * f + idx % f;
        const float g = b1 != nullptr ? __fadd_rn(gate[idx], b1[at]) : gate[idx];
        const float u = b3 != nullptr ? __fadd_rn(up[idx], b3[at]) : up[idx];
        gate[idx] = swiglu_oai(g, u, alpha, limit);
    }
}

constexpr int kThreads = 256;

unsigned grid_of(int64_t elems) {
    const int64_t blocks = (elems + kThreads - 1) / kThreads;
    return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

}  // namespace

void swiglu_oai_rows(float* gate, const float* up, const int32_t* owners, int64_t n, int64_t f, const float* b1,
                     const float* b3, float alpha, float limit, cudaStream_t s) {
    if (n * f == 0) return;
    swiglu_oai_kernel<<<grid_of(n * f), kThreads, 0, s>>>(gate, up, owners, n, f, b1, b3, alpha, limit);
    check(cudaGetLastError(), "the clamped SwiGLU kernel launch");
}

void moe_combine(float* x, const float* y, const int32_t* slots, const float* w, int64_t n, int64_t k, int64_t d,
                 cudaStream_t s, const float* b, const int32_t* owners) {
    if (n * d == 0) return;
    moe_combine_kernel<<<grid_of(n * d), kThreads, 0, s>>>(x, y, slots, w, n, k, d, b, owners);
    check(cudaGetLastError(), "the expert sum kernel launch");
}

}  // namespace quill::cuda
