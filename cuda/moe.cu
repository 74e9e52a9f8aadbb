// The kernel of a mixture-of-experts FFN's own (cuda/moe.h): each token's expert outputs weighted and summed.
#include "cuda/check.h"
#include "cuda/moe.h"

#include <cstdint>

namespace quill::cuda {

namespace {

// A thread per element of x [n, d]: the token's k terms in its slots' order, rounded operations (no contraction
// into FMAs), so that a token's sum is the same bits in any batch.
__global__ void moe_combine_kernel(float* __restrict__ x, const float* __restrict__ y,
                                   const int32_t* __restrict__ slots, const float* __restrict__ w, int64_t n,
                                   int64_t k, int64_t d) {
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * d;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = idx / d, j = idx % d;
        float sum = 0.0f;
        for (int64_t i = 0; i < k; ++i)
            sum = __fadd_rn(sum, __fmul_rn(w[t * k + i], y[static_cast<int64_t>(slots[t * k + i]) * d + j]));
        x[idx] = __fadd_rn(x[idx], sum);
    }
}

}  // namespace

void moe_combine(float* x, const float* y, const int32_t* slots, const float* w, int64_t n, int64_t k, int64_t d,
                 cudaStream_t s) {
    if (n * d == 0) return;
    constexpr int kThreads = 256;
    const int64_t blocks = (n * d + kThreads - 1) / kThreads;
    moe_combine_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, s>>>(x, y, slots, w, n,
                                                                                                  k, d);
    check(cudaGetLastError(), "the expert sum kernel launch");
}

}  // namespace quill::cuda
