// What every kernel file of cuda/ shares: warp and block reductions, the dispatch over weight types, a group of 32
// weights decoded in either layout, programmatic dependent launch, the activations' int8 quantization (the CPU
// backend's), and on the host the grid math and the checked launch. Included by the .cu files only.
#pragma once

#include "cuda/check.h"
#include "cuda/dequant.h"
#include "cuda/kernels.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace quill::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The sum (or max) of v over the block, returned to every thread. blockDim.x is a multiple of 32; `scratch` holds
// 32 floats of shared memory and may be reused by the next call (the first barrier protects it).
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
    v = kMax ? warp_max(v) : warp_sum(v);
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int n_warps = blockDim.x / kWarp;
    float r = lane < n_warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
    return kMax ? warp_max(r) : warp_sum(r);
}

// Calls f(std::integral_constant<GgmlType, T>) for the runtime type t (one of the types cuda_supports).
template <class F>
void with_type(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::F32: f(std::integral_constant<GgmlType, GgmlType::F32>{}); return;
        case GgmlType::F16: f(std::integral_constant<GgmlType, GgmlType::F16>{}); return;
        case GgmlType::BF16: f(std::integral_constant<GgmlType, GgmlType::BF16>{}); return;
        case GgmlType::Q4_0: f(std::integral_constant<GgmlType, GgmlType::Q4_0>{}); return;
        case GgmlType::Q4_1: f(std::integral_constant<GgmlType, GgmlType::Q4_1>{}); return;
        case GgmlType::Q5_0: f(std::integral_constant<GgmlType, GgmlType::Q5_0>{}); return;
        case GgmlType::Q5_1: f(std::integral_constant<GgmlType, GgmlType::Q5_1>{}); return;
        case GgmlType::Q8_0: f(std::integral_constant<GgmlType, GgmlType::Q8_0>{}); return;
        case GgmlType::Q2_K: f(std::integral_constant<GgmlType, GgmlType::Q2_K>{}); return;
        case GgmlType::Q3_K: f(std::integral_constant<GgmlType, GgmlType::Q3_K>{}); return;
        case GgmlType::Q4_K: f(std::integral_constant<GgmlType, GgmlType::Q4_K>{}); return;
        case GgmlType::Q5_K: f(std::integral_constant<GgmlType, GgmlType::Q5_K>{}); return;
        case GgmlType::Q6_K: f(std::integral_constant<GgmlType, GgmlType::Q6_K>{}); return;
        case GgmlType::IQ4_NL: f(std::integral_constant<GgmlType, GgmlType::IQ4_NL>{}); return;
        case GgmlType::IQ4_XS: f(std::integral_constant<GgmlType, GgmlType::IQ4_XS>{}); return;
        case GgmlType::MXFP4: f(std::integral_constant<GgmlType, GgmlType::MXFP4>{}); return;
        default: break;
    }
    throw_unsupported(t);
}

// Elements [32 g, 32 g + 32) of row r of w, in either layout (DeviceMatrix).
template <GgmlType T>
__device__ __forceinline__ void decode_w(const DeviceMatrix& w, int64_t r, int64_t g, float* v) {
    if constexpr (packed_quant_bytes(T) > 0) {
        if (w.scales) {
            const int64_t b = r * (w.cols / 32) + g;
            decode_packed32<T>(w.data + b * packed_quant_bytes(T), w.scales + b * packed_scale_bytes(T), v);
            return;
        }
    }
    decode_group32<T>(w.data + r * w.row_bytes, g, v);
}

// ---- programmatic dependent launch ----

// Programmatic dependent launch (sm_90): a kernel launched with the attribute may start while the kernel before it
// in the stream still runs; pdl_wait() returns once that kernel has finished and its writes are visible (at once
// when launched without the attribute). pdl_trigger() in the kernel before lets the dependent start launching then
// (without it: when every block has exited). Both are no-ops below sm_90.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// The start of a kernel of a decode step's chain: once the kernel before has finished, the next may launch (its
// blocks wait at their own pdl_wait). Triggering only after the wait keeps one kernel launched ahead, not the whole
// chain's blocks holding the multiprocessors.
__device__ __forceinline__ void pdl_start() {
    pdl_wait();
    pdl_trigger();
}

// ---- activations quantized per block of 32 for the int8 products ----

// Lane i's value v of block b (32 values, one a lane of a warp) quantized into q[b * 32 + i] and the block's
// (scale, scale * sum of q) into ds[b]: cpu::generic::quantize_block's arithmetic, the scale rounded to fp16.
// A block's scale d from its largest magnitude, 1 / d (0 for an all-zero block), and one value's quant.
__device__ __forceinline__ float q8_scale(float amax) { return amax / 127.0f; }
__device__ __forceinline__ float q8_inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }
__device__ __forceinline__ int q8_round(float v, float inv) {
    const float y = v * inv;
    const float clamped = y >= 127.0f ? 127.0f : y <= -127.0f ? -127.0f : y == y ? y : 0.0f;
    return static_cast<int>(roundf(clamped));
}
// The block's (scale rounded to fp16, scale * sum of its quants).
__device__ __forceinline__ float2 q8_record(float d, int sum) {
    const float scale = __half2float(__float2half_rn(d));
    return make_float2(scale, scale * static_cast<float>(sum));
}

__device__ __forceinline__ void quantize_lane(float v, int64_t b, int lane, int8_t* __restrict__ q,
                                              float2* __restrict__ ds) {
    const float amax = warp_max(fabsf(v));  // fmaxf drops NaN, as std::max does on the CPU
    const float d = q8_scale(amax);
    const int qi = q8_round(v, q8_inverse(d));
    q[b * 32 + lane] = static_cast<int8_t>(qi);
    int sum = qi;
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) ds[b] = q8_record(d, sum);
}

// ---- host side: grid math, launches, device attributes ----

inline unsigned grid_for(int64_t n, int threads, unsigned cap = 4096) {
    const int64_t blocks = (n + threads - 1) / threads;
    return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

// kernel<<<grid, block, smem, s>>>(args...), as a programmatic dependent of the kernel before it when pdl (and the
// device is sm_90 or later: the attribute is left off below); `what` names the launch in its error.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, bool pdl, const char* what,
            Args&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = pdl && pdl_supported() ? 1 : 0;
    check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), what);
}

// An attribute of the current device.
inline int device_attribute(cudaDeviceAttr a) {
    int device = 0, v = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&v, a, device), "cudaDeviceGetAttribute");
    return v;
}

inline int device_major() {  // the compute capability's major version (asked once)
    static const int major = device_attribute(cudaDevAttrComputeCapabilityMajor);
    return major;
}

}  // namespace quill::cuda
