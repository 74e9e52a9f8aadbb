// RMSNorm (with the next products' input quantization and the previous layer's finiteness check fused in), the
// RoPE angles, and the rotation of Q and K with K and V stored in the cache.
#include "cuda/attn_math.h"
#include "cuda/common.cuh"

#include <cstdint>

namespace quill::cuda {

namespace {

// One block per row. With q: the row also quantized for matmul_q8 (d a multiple of 32). With flag: *flag =
// min(*flag, layer) when x holds inf or NaN (the previous layer's output check, fused). Rows of d <= 1024 K floats
// (d a multiple of 4, K <= 8) take the register form rms_norm_vec_kernel<K>: every thread loads its K float4s of x
// and w at once before any use (a decode step's norm is one block, and the strided loop waited on one load at a
// time), eight threads a block of 32 when quantizing. Other rows take the strided loop.
// Both forms give every row the same bits whatever the batch (the sum of squares' order depends on d alone).
constexpr int kNormThreads = 256;

// The quantization of 32 values held four a thread by eight consecutive lanes (lane % 8 == 0 first), block b:
// quantize_lane's arithmetic (cpu::generic::quantize_block's), the maximum and the sum over the eight lanes.
// Lanes outside the row (valid false, values 0) take part in the shuffles and write nothing.
__device__ __forceinline__ void quantize_quad(const float (&v)[4], int64_t b, int lane, bool valid,
                                              int8_t* __restrict__ q, float2* __restrict__ ds) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 1; o < 8; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = q8_scale(amax), inv = q8_inverse(d);
    int qi[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) qi[j] = q8_round(v[j], inv);
    if (valid)
        *reinterpret_cast<char4*>(q + b * 32 + 4 * (lane % 8)) = make_char4(
            static_cast<signed char>(qi[0]), static_cast<signed char>(qi[1]), static_cast<signed char>(qi[2]),
            static_cast<signed char>(qi[3]));
    int sum = qi[0] + qi[1] + qi[2] + qi[3];
#pragma unroll
    for (int o = 1; o < 8; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (valid && lane % 8 == 0) ds[b] = q8_record(d, sum);
}

template <int K>
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_vec_kernel(const float* x, const float* __restrict__ w, float* y, int64_t d, float eps,
                        int8_t* __restrict__ q, float2* __restrict__ ds, int32_t* flag, int32_t layer) {
    pdl_start();  // a product launched after this one may start fetching its weights
    __shared__ float scratch[32];
    const float4* xr = reinterpret_cast<const float4*>(x + blockIdx.x * d);
    const float4* wr = reinterpret_cast<const float4*>(w);
    float4* yr = reinterpret_cast<float4*>(y + blockIdx.x * d);
    const int64_t n4 = d / 4;
    float4 xv[K], wv[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
        xv[k] = j < n4 ? xr[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        wv[k] = j < n4 ? wr[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float ss = 0.0f;
    bool bad = false;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        ss += xv[k].x * xv[k].x + xv[k].y * xv[k].y + xv[k].z * xv[k].z + xv[k].w * xv[k].w;
        bad |= !isfinite(xv[k].x) || !isfinite(xv[k].y) || !isfinite(xv[k].z) || !isfinite(xv[k].w);
    }
    if (flag != nullptr && __syncthreads_or(bad) && threadIdx.x == 0) atomicMin(flag, layer);
    ss = block_reduce<false>(ss, scratch);
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    const int lane = threadIdx.x % kWarp;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
        const float v[4] = {xv[k].x * scale * wv[k].x, xv[k].y * scale * wv[k].y, xv[k].z * scale * wv[k].z,
                            xv[k].w * scale * wv[k].w};
        if (j < n4) yr[j] = make_float4(v[0], v[1], v[2], v[3]);
        // A block of 32 is eight float4s of eight consecutive lanes, all in the row or all past it (d a multiple
        // of 32); every lane of the block takes part (k * kNormThreads < n4 is the same for all).
        if (q != nullptr && static_cast<int64_t>(k) * kNormThreads < n4)
            quantize_quad(v, blockIdx.x * (d / 32) + j / 8, lane, j < n4, q, ds);
    }
}

__global__ void rms_norm_kernel(const float* x, const float* __restrict__ w, float* y, int64_t d, float eps,
                                int8_t* __restrict__ q, float2* __restrict__ ds, int32_t* flag, int32_t layer) {
    pdl_start();
    __shared__ float scratch[32];
    const float* xr = x + blockIdx.x * d;
    float* yr = y + blockIdx.x * d;
    float ss = 0.0f;
    bool bad = false;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        ss += xr[i] * xr[i];
        bad |= !isfinite(xr[i]);
    }
    if (flag != nullptr && __syncthreads_or(bad) && threadIdx.x == 0) atomicMin(flag, layer);
    ss = block_reduce<false>(ss, scratch);
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    if (q == nullptr) {
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * scale * w[i];  // each thread its own i
        return;
    }
    const int lane = threadIdx.x % kWarp, n_warps = blockDim.x / kWarp;
    const int64_t nb = d / 32;
    for (int64_t b = threadIdx.x / kWarp; b < nb; b += n_warps) {
        const int64_t i = 32 * b + lane;
        const float v = xr[i] * scale * w[i];
        yr[i] = v;
        quantize_lane(v, blockIdx.x * nb + b, lane, q, ds);
    }
}

__device__ __forceinline__ void store_kv(void* base, size_t i, float v, bool f16) {
    if (f16) static_cast<__half*>(base)[i] = __float2half_rn(v);
    else static_cast<float*>(base)[i] = v;
}

// One block per (token, head): blockIdx.y < n_head rotates that query head in place (and multiplies it by the
// token's attention temperature), the others rotate key head blockIdx.y - n_head and store it with its values in
// the slot's cache row at the token's position. (One block a token did it all with one dependent load at a time, a
// long wait in every decode step.) h.n_rot 0: nothing rotates.
__global__ void rope_store_kernel(float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                  const float* __restrict__ cs, const int32_t* __restrict__ slots,
                                  const int32_t* __restrict__ pos, Heads h, LayerCache c) {
    pdl_start();
    const int64_t t = blockIdx.x;
    const int half = h.n_rot / 2;
    const float* cst = cs + t * half * 2;
    // Pair i of a head: dims (2i, 2i+1), or (i, i + half) with NEOX.
    const int stride = h.neox ? half : 1, step = h.neox ? 1 : 2;
    if (static_cast<int>(blockIdx.y) < h.n_head) {
        float* qh = q + (t * h.n_head + blockIdx.y) * h.head_dim;
        // q = rope(q) * temp, the rotated value rounded to float before the product as on the CPU
        const float temp = query_temperature(pos[t], h.temp_scale, h.temp_floor);
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            const float co = cst[2 * i], si = cst[2 * i + 1];
            float* p = qh + step * i;
            const float x0 = p[0], x1 = p[stride];
            const float r0 = x0 * co - x1 * si, r1 = x0 * si + x1 * co;
            p[0] = r0 * temp;
            p[stride] = r1 * temp;
        }
        if (temp != 1.0f)  // the dims past the rotated ones (pairs cover dims 0 .. n_rot - 1 in either layout)
            for (int i = h.n_rot + threadIdx.x; i < h.head_dim; i += blockDim.x) qh[i] *= temp;
        return;
    }
    const int row = h.n_head_kv * h.head_dim;
    const int head_base = (static_cast<int>(blockIdx.y) - h.n_head) * h.head_dim;
    const float* kt = k + t * row;
    const float* vt = v + t * row;
    const size_t dst = static_cast<size_t>(slots[t]) * c.slot_stride + static_cast<size_t>(pos[t]) * row;
    for (int i = threadIdx.x; i < h.head_dim; i += blockDim.x) {
        const int e = head_base + i;
        float val = kt[e];
        if (i < h.n_rot) {
            // this element's pair, and whether it is the pair's first element
            const int pair = h.neox ? (i < half ? i : i - half) : i / 2;
            const bool first = h.neox ? i < half : (i & 1) == 0;
            const int e0 = e - i + step * pair;
            const float co = cst[2 * pair], si = cst[2 * pair + 1];
            const float x0 = kt[e0], x1 = kt[e0 + stride];
            val = first ? x0 * co - x1 * si : x0 * si + x1 * co;
        }
        store_kv(c.k, dst + e, val, c.f16);
        store_kv(c.v, dst + e, vt[e], c.f16);
    }
}

__global__ void rope_angles_kernel(const int32_t* __restrict__ pos, const double* __restrict__ inv_freq, int64_t half,
                                   int64_t n, double mscale, float* __restrict__ cs) {
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * half;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const double theta = static_cast<double>(pos[idx / half]) * inv_freq[idx % half];
        double sn, cn;
        sincos(theta, &sn, &cn);
        cs[2 * idx] = scaled_rope_term(cn, mscale);
        cs[2 * idx + 1] = scaled_rope_term(sn, mscale);
    }
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps, cudaStream_t s) {
    rms_norm_q8(x, w, y, n, d, eps, nullptr, nullptr, nullptr, 0, s);
}

void rms_norm_q8(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps, int8_t* q, float* ds,
                 int32_t* flag, int32_t layer, cudaStream_t s, bool pdl) {
    if (q != nullptr && d % 32 != 0) check(cudaErrorInvalidValue, "rms_norm_q8 (a row not a multiple of 32)");
    auto* ds2 = reinterpret_cast<float2*>(ds);
    const auto grid = static_cast<unsigned>(n);
    const bool aligned = d % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(y) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
    const int64_t per_thread = (d / 4 + kNormThreads - 1) / kNormThreads;
    auto kernel = aligned && per_thread <= 1   ? rms_norm_vec_kernel<1>
                  : aligned && per_thread <= 2 ? rms_norm_vec_kernel<2>
                  : aligned && per_thread <= 4 ? rms_norm_vec_kernel<4>
                  : aligned && per_thread <= 8 ? rms_norm_vec_kernel<8>
                                               : rms_norm_kernel;
    launch(kernel, grid, kNormThreads, 0, s, pdl, "the RMSNorm kernel launch", x, w, y, d, eps, q, ds2, flag, layer);
}

void rope_angles(const int32_t* pos, const double* inv_freq, int64_t half, int64_t n, double mscale, float* cs,
                 cudaStream_t s) {
    rope_angles_kernel<<<grid_for(n * half, 256), 256, 0, s>>>(pos, inv_freq, half, n, mscale, cs);
    check(cudaGetLastError(), "the RoPE angle kernel launch");
}

void rope_store(float* q, const float* k, const float* v, const float* cs, const int32_t* slots,
                const int32_t* pos, int64_t n, const Heads& heads, const LayerCache& cache, cudaStream_t s, bool pdl) {
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(heads.n_head + heads.n_head_kv));
    launch(rope_store_kernel, grid, 128, 0, s, pdl, "the RoPE + KV store kernel launch", q, k, v, cs, slots, pos,
           heads, cache);
}

}  // namespace quill::cuda
