// Picking from the logits on the device: the greedy token of each row (argmax), each row's top-k candidates for the
// host's sampler, and the finiteness check of a layer's output.
#include "cuda/common.cuh"

#include <climits>
#include <cstdint>

namespace quill::cuda {

namespace {

// One block per row: each thread keeps the first maximum of its stride, then the block keeps the largest value
// and, among equal ones, the smallest index (std::max_element's choice).
constexpr int kArgmaxThreads = 1024;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_rows_kernel(const float* __restrict__ x, int64_t stride, int64_t n, int32_t* __restrict__ out) {
    __shared__ float sv[kArgmaxThreads / kWarp];
    __shared__ int32_t si[kArgmaxThreads / kWarp];
    const float* row = x + static_cast<int64_t>(blockIdx.x) * stride;
    float bv = -INFINITY;
    int32_t bi = INT_MAX;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = row[i];
        if (v > bv || bi == INT_MAX) {  // strictly larger: the first index of a maximum stays
            bv = v;
            bi = static_cast<int32_t>(i);
        }
    }
    auto better = [](float v, int32_t i, float w, int32_t j) { return w > v || (w == v && j < i); };
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) {
        const float w = __shfl_xor_sync(0xffffffffu, bv, o);
        const int32_t j = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(bv, bi, w, j)) bv = w, bi = j;
    }
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        const int n_warps = blockDim.x / kWarp;
        bv = lane < n_warps ? sv[lane] : -INFINITY;
        bi = lane < n_warps ? si[lane] : INT_MAX;
#pragma unroll
        for (int o = kWarp / 2; o > 0; o /= 2) {
            const float w = __shfl_xor_sync(0xffffffffu, bv, o);
            const int32_t j = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(bv, bi, w, j)) bv = w, bi = j;
        }
        if (lane == 0) out[blockIdx.x] = bi;
    }
}

// One block per row. The need-th largest value is found as a key (the float's bits mapped so that unsigned order is
// float order) by radix selection, eight bits at a time from the top: a histogram of the next digit among the
// keys that share the digits chosen so far, and the digit where the count from the top reaches what is still
// needed. Every key above it is a candidate (any order), and the equal keys of the lowest indices fill the rest:
// each thread takes a contiguous stretch of indices and a block-wide scan of their counts ranks them in index order.
constexpr int kTopThreads = 1024;

__device__ inline uint32_t order_key(float v) {
    const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);  // -0 and +0 are one logit (ties go by id)
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(kTopThreads)
    top_candidates_kernel(const float* __restrict__ x, int64_t stride, int64_t n, int64_t n_ids,
                          const int32_t* __restrict__ need, int32_t* __restrict__ ids, float* __restrict__ vals) {
    __shared__ uint32_t hist[256];
    __shared__ uint32_t s_prefix, s_remaining;
    __shared__ int32_t s_count;
    __shared__ int32_t warp_sums[kTopThreads / kWarp];
    const float* row = x + static_cast<int64_t>(blockIdx.x) * stride;
    int32_t* out_ids = ids + static_cast<int64_t>(blockIdx.x) * kMaxTopCandidates;
    float* out_vals = vals + static_cast<int64_t>(blockIdx.x) * kMaxTopCandidates;
    const auto k = static_cast<uint32_t>(min(static_cast<int64_t>(need[blockIdx.x]), n));
    auto value = [&](int64_t i) { return i < n_ids ? row[i] : -INFINITY; };
    uint32_t prefix = 0, mask = 0, remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const uint32_t key = order_key(value(i));
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint32_t above = 0;
            int b = 255;
            for (; b > 0 && above + hist[b] < remaining; --b) above += hist[b];
            s_prefix = prefix | (static_cast<uint32_t>(b) << shift);
            s_remaining = remaining - above;
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 255u << shift;
        __syncthreads();  // (hist is cleared again next pass)
    }
    // prefix: the need-th largest key; k - remaining keys lie above it, remaining equal ones are taken.
    if (threadIdx.x == 0) s_count = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = value(i);
        if (order_key(v) > prefix) {
            const int32_t at = atomicAdd(&s_count, 1);
            out_ids[at] = static_cast<int32_t>(i);
            out_vals[at] = v;
        }
    }
    const int64_t chunk = (n + blockDim.x - 1) / blockDim.x;
    const int64_t begin = min(n, threadIdx.x * chunk), end = min(n, begin + chunk);
    int32_t equal = 0;
    for (int64_t i = begin; i < end; ++i) equal += order_key(value(i)) == prefix ? 1 : 0;
    // exclusive scan of `equal` over the block, in thread order
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    int32_t incl = equal;
#pragma unroll
    for (int o = 1; o < kWarp; o *= 2) {
        const int32_t y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == kWarp - 1) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int n_warps = blockDim.x / kWarp;
        int32_t w = lane < n_warps ? warp_sums[lane] : 0;
#pragma unroll
        for (int o = 1; o < kWarp; o *= 2) {
            const int32_t y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        if (lane < n_warps) warp_sums[lane] = w;
    }
    __syncthreads();
    int32_t rank = incl - equal + (warp > 0 ? warp_sums[warp - 1] : 0);
    const auto first = static_cast<int32_t>(k - remaining);
    for (int64_t i = begin; i < end && rank < static_cast<int32_t>(remaining); ++i) {
        const float v = value(i);
        if (order_key(v) == prefix) {
            out_ids[first + rank] = static_cast<int32_t>(i);
            out_vals[first + rank] = v;
            ++rank;
        }
    }
}

__global__ void check_finite_kernel(const float* __restrict__ x, int64_t n, int32_t layer, int32_t* flag) {
    bool bad = false;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        bad |= !isfinite(x[i]);
    if (__any_sync(0xffffffffu, bad) && threadIdx.x % kWarp == 0) atomicMin(flag, layer);
}

}  // namespace

void top_candidates(const float* x, int64_t m, int64_t stride, int64_t n_row, int64_t n_ids, const int32_t* need,
                    int32_t* ids, float* vals, cudaStream_t s) {
    if (m == 0) return;
    top_candidates_kernel<<<static_cast<unsigned>(m), kTopThreads, 0, s>>>(x, stride, n_row, n_ids, need, ids, vals);
    check(cudaGetLastError(), "the top candidates kernel launch");
}

void argmax_rows(const float* x, int64_t m, int64_t stride, int64_t n, int32_t* out, cudaStream_t s) {
    argmax_rows_kernel<<<static_cast<unsigned>(m), kArgmaxThreads, 0, s>>>(x, stride, n, out);
    check(cudaGetLastError(), "the argmax kernel launch");
}

void check_finite(const float* x, int64_t n, int32_t layer, int32_t* flag, cudaStream_t s) {
    check_finite_kernel<<<grid_for(n, 256, 1024), 256, 0, s>>>(x, n, layer, flag);
    check(cudaGetLastError(), "the finiteness check kernel launch");
}

}  // namespace quill::cuda
