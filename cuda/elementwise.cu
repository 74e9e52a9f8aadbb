// The kernels a thread an element (or a group of 32): weight rows decoded (the GEMM's slices, the embedding), the
// F16 conversion, the gated activation (with the down product's input quantization fused in), bias and residual
// adds, logit soft-capping and the gather of the logit rows.
#include "cuda/common.cuh"

#include <cstdint>
#include <type_traits>

namespace quill::cuda {

namespace {

// One thread per group of 32 elements (block types) or per element (plain floats) of rows [r0, r1).
template <GgmlType T, class Out>
__global__ void dequantize_kernel(DeviceMatrix w, int64_t r0, int64_t n_rows, Out* __restrict__ out) {
    const int64_t cols = w.cols;
    const int64_t per_row = is_block_type(T) ? cols / 32 : cols;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n_rows * per_row;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = idx / per_row, i = idx % per_row;
        const uint8_t* row = w.data + (r0 + r) * w.row_bytes;
        Out* o = out + r * cols;
        if constexpr (is_block_type(T)) {
            float v[32];
            decode_w<T>(w, r0 + r, i, v);
#pragma unroll
            for (int j = 0; j < 32; ++j) {
                if constexpr (std::is_same_v<Out, float>) o[32 * i + j] = v[j];
                else o[32 * i + j] = __float2half_rn(v[j]);
            }
        } else {
            const float v = decode_element<T>(row, i);
            if constexpr (std::is_same_v<Out, float>) o[i] = v;
            else o[i] = __float2half_rn(v);
        }
    }
}

__global__ void float_to_f16_kernel(const float* __restrict__ x, int64_t n, __half* __restrict__ out) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        out[i] = __float2half_rn(x[i]);
}

template <GgmlType T>
__global__ void embed_kernel(DeviceMatrix emb, const int32_t* __restrict__ tokens, float scale,
                             float* __restrict__ x) {
    const int64_t t = blockIdx.x, cols = emb.cols;
    const uint8_t* row = emb.data + static_cast<int64_t>(tokens[t]) * emb.row_bytes;
    float* out = x + t * cols;
    if constexpr (is_block_type(T)) {
        for (int64_t g = threadIdx.x; g < cols / 32; g += blockDim.x) {
            float v[32];
            decode_w<T>(emb, tokens[t], g, v);
#pragma unroll
            for (int i = 0; i < 32; ++i) out[g * 32 + i] = v[i] * scale;
        }
    } else {
        for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) out[k] = decode_element<T>(row, k) * scale;
    }
}

// gate = g sigmoid(z) up: z = g is SiLU, z = 2 sqrt(2/pi) (g + 0.044715 g^3) GELU's tanh form (0.5 g (1 + tanh(u))
// = g sigmoid(2u)).
template <bool kGelu>
__device__ __forceinline__ float gated(float g, float u) {
    const float z = kGelu ? 1.5957691216057308f * (g + 0.044715f * g * g * g) : g;
    return g / (1.0f + expf(-z)) * u;
}

template <bool kGelu>
__global__ void gated_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        gate[i] = gated<kGelu>(gate[i], up[i]);
}

// The same, a warp per block of 32 (n a multiple of 32), each block also quantized for matmul_q8.
template <bool kGelu>
__global__ void gated_q8_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n_blocks,
                                int8_t* __restrict__ q, float2* __restrict__ ds) {
    pdl_start();  // a product launched after this one may start fetching its weights
    const int lane = threadIdx.x % kWarp;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
    for (int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; b < n_blocks;
         b += warps) {
        const int64_t i = 32 * b + lane;
        const float v = gated<kGelu>(gate[i], up[i]);
        gate[i] = v;
        quantize_lane(v, b, lane, q, ds);
    }
}

__global__ void add_rows_kernel(float* __restrict__ x, const float* __restrict__ b, int64_t d) {
    float* xr = x + static_cast<int64_t>(blockIdx.x) * d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) xr[i] += b[i];
}

__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x[i] += y[i];
}

__global__ void softcap_kernel(float* __restrict__ x, int64_t n, float cap) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

__global__ void gather_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int64_t d,
                                   float* __restrict__ y) {
    const float* src = x + static_cast<int64_t>(rows[blockIdx.x]) * d;
    float* dst = y + static_cast<int64_t>(blockIdx.x) * d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

void dequantize_rows(const DeviceMatrix& w, int64_t r0, int64_t r1, bool to_f16, void* out, cudaStream_t s) {
    with_type(w.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::value;
        const int64_t work = (r1 - r0) * (is_block_type(T) ? w.cols / 32 : w.cols);
        const unsigned grid = grid_for(work, 256, 1u << 16);
        if (to_f16)
            dequantize_kernel<T, __half><<<grid, 256, 0, s>>>(w, r0, r1 - r0, static_cast<__half*>(out));
        else
            dequantize_kernel<T, float><<<grid, 256, 0, s>>>(w, r0, r1 - r0, static_cast<float*>(out));
    });
    check(cudaGetLastError(), "the dequantize kernel launch");
}

void float_to_f16(const float* x, int64_t n, void* out, cudaStream_t s) {
    float_to_f16_kernel<<<grid_for(n, 256, 1u << 16), 256, 0, s>>>(x, n, static_cast<__half*>(out));
    check(cudaGetLastError(), "the F16 conversion kernel launch");
}

void embed(const DeviceMatrix& emb, const int32_t* tokens, int64_t n_tokens, float scale, float* x, cudaStream_t s) {
    with_type(emb.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::value;
        embed_kernel<T><<<static_cast<unsigned>(n_tokens), 128, 0, s>>>(emb, tokens, scale, x);
    });
    check(cudaGetLastError(), "the embedding kernel launch");
}

void gated_activation(float* gate, const float* up, int64_t n, bool gelu, cudaStream_t s) {
    if (gelu) gated_kernel<true><<<grid_for(n, 256), 256, 0, s>>>(gate, up, n);
    else gated_kernel<false><<<grid_for(n, 256), 256, 0, s>>>(gate, up, n);
    check(cudaGetLastError(), "the SwiGLU/GeGLU kernel launch");
}

void gated_activation_q8(float* gate, const float* up, int64_t n, bool gelu, int8_t* q, float* ds, cudaStream_t s,
                         bool pdl) {
    if (n % 32 != 0) check(cudaErrorInvalidValue, "gated_activation_q8 (not a multiple of 32)");
    const int64_t blocks = n / 32;
    launch(gelu ? gated_q8_kernel<true> : gated_q8_kernel<false>, grid_for(blocks * kWarp, 256, 1u << 16), 256, 0, s,
           pdl, "the SwiGLU/GeGLU kernel launch", gate, up, blocks, q, reinterpret_cast<float2*>(ds));
}

void add_rows(float* x, const float* b, int64_t n, int64_t d, cudaStream_t s) {
    add_rows_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(x, b, d);
    check(cudaGetLastError(), "the bias kernel launch");
}

void add(float* x, const float* y, int64_t n, cudaStream_t s) {
    add_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, y, n);
    check(cudaGetLastError(), "the residual add kernel launch");
}

void softcap(float* x, int64_t n, float cap, cudaStream_t s) {
    softcap_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, cap);
    check(cudaGetLastError(), "the logit soft-capping kernel launch");
}

void gather_rows(const float* x, const int32_t* rows, int64_t m, int64_t d, float* y, cudaStream_t s) {
    gather_rows_kernel<<<static_cast<unsigned>(m), 256, 0, s>>>(x, rows, d, y);
    check(cudaGetLastError(), "the row gather kernel launch");
}

}  // namespace quill::cuda
