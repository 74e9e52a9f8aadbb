// The forward pass's kernels. Each computes the CPU backend's function on any shape (rows not a multiple of the
// tile, any head_dim up to 512, any GQA ratio). Decode: one warp per weight row, int8 dot products (dp4a) for Q4_0,
// Q4_1 and Q8_0 with the input quantized per block of 32 as on the CPU, float for the other types; attention one
// block per (token, head). Prompts: the products go through cuBLAS (cuda/gemm.h), attention through the flash
// kernel below. A decode step's time goes mostly to the int8 products, which stay short of the copy bandwidth;
// tests/bench/HISTORY.md has the device profiles, kernel by kernel.
#include "cuda/check.h"
#include "cuda/dequant.h"
#include "cuda/kernels.h"

#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace quill::cuda {

namespace {

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

// Eight consecutive elements k..k+7 of a plain float row (F16, BF16, F32) from 16-byte aligned loads.
template <GgmlType T>
__device__ __forceinline__ void load8(const uint8_t* row, int64_t k, float* v) {
    if constexpr (T == GgmlType::F32) {
        const float4 a = *reinterpret_cast<const float4*>(row + 4 * k);
        const float4 b = *reinterpret_cast<const float4*>(row + 4 * k + 16);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
        const uint4 u = *reinterpret_cast<const uint4*>(row + 2 * k);
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if constexpr (T == GgmlType::F16) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
                v[2 * i] = f.x, v[2 * i + 1] = f.y;
            } else {
                v[2 * i] = __uint_as_float(words[i] << 16);
                v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
            }
        }
    }
}

// ---- matmul: one warp per weight row, a tile of NT tokens per block row ----

constexpr int kMatmulWarps = 4;

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

// Brings [p, p + bytes) into L2, lane l taking its lines l, l + 32, ... (a hint: no data moves to the warp).
__device__ __forceinline__ void prefetch_l2(const uint8_t* p, int64_t bytes, int lane) {
    const auto at = reinterpret_cast<uintptr_t>(p);
    const uintptr_t first = at & ~uintptr_t{127}, end = at + bytes;
    for (uintptr_t a = first + 128 * lane; a < end; a += 128 * kWarp)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a));
}

// The matrix of a product set that global row `rg` falls in, and the row within it.
__device__ __forceinline__ int set_member(const ProductSet& ps, int64_t rg, int64_t& r) {
    const int i = rg < ps.row_end[0] ? 0 : rg < ps.row_end[1] ? 1 : 2;
    r = rg - (i == 0 ? 0 : ps.row_end[i - 1]);
    return i;
}

// Sums each token's lane partials over the warp and stores row r of tokens t0.. (y += when accumulate).
template <int NT>
__device__ __forceinline__ void store_row(float* acc, int nt, float* __restrict__ y, int64_t t0, int64_t rows,
                                          int64_t r, bool accumulate, int lane) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = warp_sum(acc[t]);
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t < nt) {
                float& out = y[(t0 + t) * rows + r];
                out = accumulate ? out + acc[t] : acc[t];
            }
        }
    }
}

// The float kernel. Block types decode a group of 32 in registers; plain floats (F16, BF16, F32) load eight
// elements a lane.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kMatmulWarps * kWarp)
    matmul_kernel(ProductSet ps, const float* __restrict__ x, int64_t n_tokens, bool accumulate) {
    const int lane = threadIdx.x % kWarp;
    const int64_t rg = static_cast<int64_t>(blockIdx.x) * kMatmulWarps + threadIdx.x / kWarp;
    if (rg >= ps.row_end[2]) return;  // the whole warp: no block-wide barrier follows
    int64_t r;
    const int member = set_member(ps, rg, r);
    const DeviceMatrix w = member == 0 ? ps.w[0] : member == 1 ? ps.w[1] : ps.w[2];
    float* const y = member == 0 ? ps.y[0] : member == 1 ? ps.y[1] : ps.y[2];
    const int64_t rows = w.rows, cols = w.cols;
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * NT;
    const int nt = static_cast<int>(n_tokens - t0 < NT ? n_tokens - t0 : NT);
    const uint8_t* wr = w.data + r * w.row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    if constexpr (is_block_type(T)) {
        // Lane l decodes groups l, l + 32, ... (32 elements each) and dots each with the NT token rows.
        const int64_t groups = cols / 32;
        for (int64_t g = lane; g < groups; g += kWarp) {
            float v[32];
            decode_w<T>(w, r, g, v);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < nt) {
                    const float4* xp = reinterpret_cast<const float4*>(x + (t0 + t) * cols + g * 32);
                    float s = 0.0f;
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const float4 a = xp[i];
                        s += v[4 * i] * a.x + v[4 * i + 1] * a.y + v[4 * i + 2] * a.z + v[4 * i + 3] * a.w;
                    }
                    acc[t] += s;
                }
            }
        }
    } else if (cols % 8 == 0 && w.row_bytes % 16 == 0) {
        // Plain floats, eight at a time: lane l takes elements 8 l.. of each 256, one 16-byte load (two for F32).
        for (int64_t k = 8 * lane; k < cols; k += 8 * kWarp) {
            float v[8];
            load8<T>(wr, k, v);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < nt) {
                    const float4* xp = reinterpret_cast<const float4*>(x + (t0 + t) * cols + k);
                    const float4 a = xp[0], b = xp[1];
                    acc[t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y +
                              v[6] * b.z + v[7] * b.w;
                }
            }
        }
    } else {
        // Plain floats, any cols: lanes take consecutive elements (coalesced).
        for (int64_t k = lane; k < cols; k += kWarp) {
            const float wv = decode_element<T>(wr, k);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < nt) acc[t] += wv * x[(t0 + t) * cols + k];
            }
        }
    }
    store_row<NT>(acc, nt, y, t0, rows, r, accumulate, lane);
}

// ---- int8 products: activations quantized per block of 32, dp4a against the weights' quants ----

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

// One warp per block of 32 (lane i: element i), blocks of all tokens back to back.
__global__ void quantize_q8_kernel(const float* __restrict__ x, int64_t n_blocks, int8_t* __restrict__ q,
                                   float2* __restrict__ ds) {
    pdl_start();  // a product launched after this one may start fetching its weights
    const int lane = threadIdx.x % kWarp;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
    for (int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; b < n_blocks;
         b += warps)
        quantize_lane(x[b * 32 + lane], b, lane, q, ds);
}

// The quants of block g of a row as int words (4 for Q4_0/Q4_1: byte j holds elements j and j + 16 in its low and
// high nibbles; 8 for Q8_0: byte j is element j), and its scales. Packed (srow not null): qrow and srow start the
// row in the quants and scales planes; else qrow starts the row's GGUF blocks.
template <GgmlType T>
__device__ __forceinline__ void load_q8_at(const uint8_t* qrow, const uint8_t* srow, int64_t g, int* wq, float& d,
                                           float& m) {
    constexpr int kWords = packed_quant_bytes(T) / 4;
    if (srow) {  // packed: 16-byte loads of the quants
        const int4* qp = reinterpret_cast<const int4*>(qrow + g * packed_quant_bytes(T));
#pragma unroll
        for (int i = 0; i < kWords / 4; ++i) {
            const int4 v = qp[i];
            wq[4 * i] = v.x, wq[4 * i + 1] = v.y, wq[4 * i + 2] = v.z, wq[4 * i + 3] = v.w;
        }
        const uint8_t* sp = srow + g * packed_scale_bytes(T);
        if constexpr (T == GgmlType::Q4_1) {
            const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(sp));
            d = dm.x, m = dm.y;
        } else {
            d = __half2float(*reinterpret_cast<const __half*>(sp));
            m = 0.0f;
        }
    } else {  // GGUF blocks: 2-byte aligned (Q4_1: 4-byte) fields
        const uint8_t* blk = qrow + g * (packed_quant_bytes(T) + packed_scale_bytes(T));
        const auto* h = reinterpret_cast<const uint16_t*>(blk);
        d = __half2float(__ushort_as_half(h[0]));
        m = T == GgmlType::Q4_1 ? __half2float(__ushort_as_half(h[1])) : 0.0f;
        const auto* qh = h + packed_scale_bytes(T) / 2;
#pragma unroll
        for (int i = 0; i < kWords; ++i)
            wq[i] = static_cast<int>(qh[2 * i] | (static_cast<uint32_t>(qh[2 * i + 1]) << 16));
    }
}

// Row r of w as load_q8_at takes it.
template <GgmlType T>
__device__ __forceinline__ void q8_row(const DeviceMatrix& w, int64_t r, const uint8_t*& qrow, const uint8_t*& srow) {
    if (w.scales) {
        const int64_t nb = w.cols / 32;
        qrow = w.data + r * nb * packed_quant_bytes(T);
        srow = w.scales + r * nb * packed_scale_bytes(T);
    } else {
        qrow = w.data + r * w.row_bytes;
        srow = nullptr;
    }
}

// A block's contribution to a token from the block's exact integer sum (sum over its 32 elements of the weight's
// quant, Q4_0/Q4_1 its unsigned nibble, times the token's int8). Rounded operations (no contraction into FMAs, which
// the compiler may form differently in each kernel that inlines this): every kernel gets the same bits for a block.
template <GgmlType T>
__device__ __forceinline__ float q8_block_value(int sum, float d, float m, const float2& ds) {
    const float fs = static_cast<float>(sum);
    if constexpr (T == GgmlType::Q4_0) return __fmul_rn(d, __fsub_rn(__fmul_rn(ds.x, fs), __fmul_rn(8.0f, ds.y)));
    else if constexpr (T == GgmlType::Q4_1) return __fadd_rn(__fmul_rn(__fmul_rn(d, ds.x), fs), __fmul_rn(m, ds.y));
    else return __fmul_rn(__fmul_rn(d, ds.x), fs);
}

// One block's contribution to one token: eight dp4a (32 int8 products) with the token's quantized block (a, b) and
// the scales: Q4_0 d (dx sum - 8 dx sum_q), Q4_1 d dx sum + m dx sum_q, Q8_0 d dx sum.
template <GgmlType T>
__device__ __forceinline__ float q8_block_dot(const int* wq, float d, float m, const int4& a, const int4& b,
                                              const float2& ds) {
    const int xa[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    int sum = 0;
    if constexpr (T == GgmlType::Q8_0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) sum = __dp4a(wq[i], xa[i], sum);
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sum = __dp4a(wq[i] & 0x0F0F0F0F, xa[i], sum);
            sum = __dp4a((wq[i] >> 4) & 0x0F0F0F0F, xa[4 + i], sum);
        }
    }
    return q8_block_value<T>(sum, d, m, ds);
}

// One warp per weight row; every token, NT at a time (the row's blocks stay in L1 between tiles). Lane l takes
// blocks l, l + 32, ... and sums them in that order (matmul_q8_rows_kernel and matmul_q8_stream_kernel too: the
// same bits). Loading four of a lane's blocks before using the first was no faster, so the loop stays plain.
// P: launched as a programmatic dependent, the warp brings its first blocks into L2 while the kernel before
// finishes.

template <GgmlType T, int NT, bool P>
__global__ void __launch_bounds__(kMatmulWarps * kWarp)
    matmul_q8_kernel(ProductSet ps, const int8_t* __restrict__ xq, const float2* __restrict__ xds,
                     int64_t n_tokens, bool accumulate) {
    constexpr int kWords = packed_quant_bytes(T) / 4;
    const int lane = threadIdx.x % kWarp;
    const int64_t rg = static_cast<int64_t>(blockIdx.x) * kMatmulWarps + threadIdx.x / kWarp;
    if (rg >= ps.row_end[2]) return;  // the whole warp: no block-wide barrier follows
    int64_t r;
    const int member = set_member(ps, rg, r);
    const DeviceMatrix w = member == 0 ? ps.w[0] : member == 1 ? ps.w[1] : ps.w[2];
    float* const y = member == 0 ? ps.y[0] : member == 1 ? ps.y[1] : ps.y[2];
    const int64_t rows = w.rows, cols = w.cols, nb = cols / 32;
    const uint8_t *qrow, *srow;
    q8_row<T>(w, r, qrow, srow);
    if constexpr (P) {
        // The lanes' first blocks (0..31: the whole of a row up to 1024 wide). The whole row of every warp on the
        // device at once (4.3 KB a Q8_0 row 4096 wide, 36 MB in all) is more than L2 keeps, and made Q8_0 decode
        // slower than no prefetch at all.
        const int64_t first = nb < kWarp ? nb : kWarp;
        prefetch_l2(qrow, w.scales ? first * packed_quant_bytes(T) : w.row_bytes * first / nb, lane);
        if (w.scales) prefetch_l2(srow, first * packed_scale_bytes(T), lane);
        pdl_start();  // the input (and y) from here on
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += NT) {
        const int nt = static_cast<int>(n_tokens - t0 < NT ? n_tokens - t0 : NT);
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
        for (int64_t g = lane; g < nb; g += kWarp) {
            int wq[kWords];
            float d, m;
            load_q8_at<T>(qrow, srow, g, wq, d, m);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < nt) {
                    const int4* xp = reinterpret_cast<const int4*>(xq + (t0 + t) * cols + g * 32);
                    acc[t] = __fadd_rn(acc[t], q8_block_dot<T>(wq, d, m, xp[0], xp[1], xds[(t0 + t) * nb + g]));
                }
            }
        }
        store_row<NT>(acc, nt, y, t0, rows, r, accumulate, lane);
    }
}

// More than eight tokens (sequences decoding together): a warp takes kRowsPerWarp rows, so that each token's
// quantized block, loaded once, serves them all (one row a warp reloads the input per row, and the input of many
// tokens no longer stays in L1). Each (row, token) sums its blocks in the order matmul_q8_kernel does, with the same
// operations: the same bits.
constexpr int kRowsPerWarp = 4;

template <GgmlType T, int NT>
__global__ void __launch_bounds__(kMatmulWarps * kWarp)
    matmul_q8_rows_kernel(ProductSet ps, const int8_t* __restrict__ xq, const float2* __restrict__ xds,
                          int64_t n_tokens, bool accumulate) {
    constexpr int kWords = packed_quant_bytes(T) / 4, R = kRowsPerWarp;
    const int lane = threadIdx.x % kWarp;
    const int64_t rg0 = (static_cast<int64_t>(blockIdx.x) * kMatmulWarps + threadIdx.x / kWarp) * R;
    if (rg0 >= ps.row_end[2]) return;  // the whole warp: no block-wide barrier follows
    const int64_t cols = ps.w[0].cols, nb = cols / 32;  // alike members: one width
    const uint8_t *qrow[R], *srow[R];
    float* yrow[R];  // the row's output column: token t at yrow[i][t * rows_of[i]]
    int64_t rows_of[R];
    bool ok[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        ok[i] = rg0 + i < ps.row_end[2];
        int64_t r = 0;
        const int member = ok[i] ? set_member(ps, rg0 + i, r) : 0;
        const DeviceMatrix w = member == 0 ? ps.w[0] : member == 1 ? ps.w[1] : ps.w[2];
        q8_row<T>(w, r, qrow[i], srow[i]);
        yrow[i] = (member == 0 ? ps.y[0] : member == 1 ? ps.y[1] : ps.y[2]) + r;
        rows_of[i] = w.rows;
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += NT) {
        const int nt = static_cast<int>(n_tokens - t0 < NT ? n_tokens - t0 : NT);
        float acc[R][NT];
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[i][t] = 0.0f;
        for (int64_t g = lane; g < nb; g += kWarp) {
            int wq[R][kWords];
            float d[R], m[R];
#pragma unroll
            for (int i = 0; i < R; ++i) {
                if (ok[i]) load_q8_at<T>(qrow[i], srow[i], g, wq[i], d[i], m[i]);
            }
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < nt) {
                    const int4* xp = reinterpret_cast<const int4*>(xq + (t0 + t) * cols + g * 32);
                    const int4 a = xp[0], b = xp[1];
                    const float2 ds = xds[(t0 + t) * nb + g];
#pragma unroll
                    for (int i = 0; i < R; ++i) {
                        if (ok[i]) acc[i][t] = __fadd_rn(acc[i][t], q8_block_dot<T>(wq[i], d[i], m[i], a, b, ds));
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < R; ++i) {
            if (ok[i]) store_row<NT>(acc[i], nt, yrow[i], t0, rows_of[i], 0, accumulate, lane);
        }
    }
}

// ---- many decode tokens on the tensor cores (int8 mma; packed Q4_0, Q4_1, Q8_0) ----
//
// The dp4a kernels above give (row, token) the sum of 32 lane partials, lane l adding its blocks l, l + 32, ... in
// order (q8_block_value of each block's integer sum), then the warp's butterfly (warp_sum). Here a block of 32 warps
// takes 16 rows and kMmaTokens tokens: warp c plays lane c, taking blocks c, c + 32, ... in order; each block's
// integer sums for 16 rows x 8 tokens come from one mma.m16n8k32 (exact int32, as dp4a's), then the same
// q8_block_value and additions; the 32 partials of a (row, token) meet in shared memory and are added in
// warp_sum's tree. The same bits as the one-token kernels, so a sequence's result does not depend on its batch.
// Its parity tests check that; it is faster than the dp4a kernels from 16 tokens on (CudaBackendOptions::mma_products).
constexpr int kMmaRows = 16, kMmaTokens = 32, kMmaWarps = kWarp;  // a warp in the place of each lane
constexpr size_t kMmaSmem = sizeof(float) * kMmaWarps * kMmaRows * kMmaTokens;  // the partials

// C = A (16 x 32 int8, row-major fragments a) B (32 x 8 int8, column fragments b), int32.
__device__ __forceinline__ void mma_s8_16832(const int a[4], const int b[2], int c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0), "r"(0), "r"(0), "r"(0));
#else
    c[0] = c[1] = c[2] = c[3] = 0;  // not reached: mma_takes asks for sm_80
#endif
}

// warp_sum's result, lane 0's, for the lane values part(0..31): (part(i) + part(i + 16)), then the sums 8, 4, 2 and
// 1 apart.
template <class Part>
__device__ __forceinline__ float butterfly_sum(Part part) {
    float v[kWarp / 2];
#pragma unroll
    for (int i = 0; i < kWarp / 2; ++i) v[i] = part(i) + part(i + kWarp / 2);
#pragma unroll
    for (int o = kWarp / 4; o > 0; o /= 2) {
#pragma unroll
        for (int i = 0; i < o; ++i) v[i] = v[i] + v[i + o];
    }
    return v[0];
}

// A lane of warp c of an mma kernel's block: its place in the fragments (grp: a row of A and C, a token of B; tig:
// the column group), the block's first token and row, its two rows of the block's 16, grp and grp + 8 (a row past
// the set multiplies zeros: have false), and its partial sums, tile j's (row grp + 8 (k / 2), token 2 tig + k % 2).
struct MmaLane {
    int c, grp, tig;
    int64_t t0, rg0;
    const uint8_t *qrow[2], *srow[2];
    bool have[2];
    float acc[kMmaTokens / 8][4];
};

template <GgmlType T>
__device__ __forceinline__ MmaLane mma_lane(const ProductSet& ps) {
    MmaLane ml;
    const int lane = threadIdx.x % kWarp;
    ml.c = threadIdx.x / kWarp, ml.grp = lane / 4, ml.tig = lane % 4;
    ml.t0 = static_cast<int64_t>(blockIdx.x) * kMmaTokens, ml.rg0 = static_cast<int64_t>(blockIdx.y) * kMmaRows;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int64_t rg = ml.rg0 + ml.grp + 8 * i;
        ml.have[i] = rg < ps.row_end[2];
        int64_t r = 0;
        const int member = ml.have[i] ? set_member(ps, rg, r) : 0;
        const DeviceMatrix& w = member == 0 ? ps.w[0] : member == 1 ? ps.w[1] : ps.w[2];
        q8_row<T>(w, r, ml.qrow[i], ml.srow[i]);
    }
#pragma unroll
    for (int j = 0; j < kMmaTokens / 8; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) ml.acc[j][k] = 0.0f;
    return ml;
}

// Block g's A fragment (a0, a2: row grp; a1, a3: row grp + 8) and the two rows' scales (and Q4_1 minimums).
template <GgmlType T>
__device__ __forceinline__ void mma_a_fragment(const uint8_t* const (&qrow)[2], const uint8_t* const (&srow)[2],
                                               const bool (&have)[2], int64_t g, int tig, int (&a)[4], float (&d)[2],
                                               float (&m)[2]) {
    constexpr int QB = packed_quant_bytes(T), SB = packed_scale_bytes(T);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        int lo = 0, hi = 0;
        d[i] = m[i] = 0.0f;
        if (have[i]) {
            const int* q = reinterpret_cast<const int*>(qrow[i] + g * QB);
            const uint8_t* sp = srow[i] + g * SB;
            if constexpr (T == GgmlType::Q8_0) {
                lo = q[tig], hi = q[4 + tig];
            } else {
                const int word = q[tig];
                lo = word & 0x0F0F0F0F, hi = (word >> 4) & 0x0F0F0F0F;
            }
            if constexpr (T == GgmlType::Q4_1) {
                const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(sp));
                d[i] = dm.x, m[i] = dm.y;
            } else {
                d[i] = __half2float(*reinterpret_cast<const __half*>(sp));
            }
        }
        a[i] = lo, a[2 + i] = hi;
    }
}

// The mma kernels' end: warp c's partials (ml.acc) into shared memory, then each (row, token) of the block's 16 x
// kMmaTokens: its 32 partials added in warp_sum's order and stored (y += when accumulate). partials: kMmaWarps *
// kMmaRows * kMmaTokens floats, free for it.
__device__ __forceinline__ void mma_finish(const MmaLane& ml, float* partials, const ProductSet& ps,
                                           int64_t n_tokens, bool accumulate) {
    float* mine = partials + ml.c * (kMmaRows * kMmaTokens);
#pragma unroll
    for (int j = 0; j < kMmaTokens / 8; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k)
            mine[(ml.grp + 8 * (k / 2)) * kMmaTokens + 8 * j + 2 * ml.tig + k % 2] = ml.acc[j][k];
    __syncthreads();
    for (int p = threadIdx.x; p < kMmaRows * kMmaTokens; p += blockDim.x) {
        const int64_t rg = ml.rg0 + p / kMmaTokens, t = ml.t0 + p % kMmaTokens;
        if (rg >= ps.row_end[2] || t >= n_tokens) continue;
        const float sum = butterfly_sum([&](int i) { return partials[i * (kMmaRows * kMmaTokens) + p]; });
        int64_t r;
        const int member = set_member(ps, rg, r);
        float* const y = member == 0 ? ps.y[0] : member == 1 ? ps.y[1] : ps.y[2];
        const int64_t rows = member == 0 ? ps.w[0].rows : member == 1 ? ps.w[1].rows : ps.w[2].rows;
        float& out = y[t * rows + r];
        out = accumulate ? out + sum : sum;
    }
}

template <GgmlType T>
__global__ void __launch_bounds__(kMmaWarps * kWarp)
    matmul_q8_mma_kernel(ProductSet ps, const int8_t* __restrict__ xq, const float2* __restrict__ xds,
                         int64_t n_tokens, bool accumulate) {
    constexpr int kTiles = kMmaTokens / 8;
    extern __shared__ float mma_partials[];  // [kMmaWarps][kMmaRows * kMmaTokens]: warp c's partials, (row, token)
    MmaLane ml = mma_lane<T>(ps);
    const int grp = ml.grp, tig = ml.tig;
    const int64_t t0 = ml.t0, cols = ps.w[0].cols, nb = cols / 32;  // alike members: one width
    for (int64_t g = ml.c; g < nb; g += kMmaWarps) {
        int a[4];
        float d[2], m[2];
        mma_a_fragment<T>(ml.qrow, ml.srow, ml.have, g, tig, a, d, m);
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
            const int64_t tb = t0 + 8 * j + grp;  // this lane's token in the B fragment
            int b[2] = {0, 0};
            if (tb < n_tokens) {
                const int* x = reinterpret_cast<const int*>(xq + tb * cols + g * 32);
                b[0] = x[tig], b[1] = x[4 + tig];
            }
            int sum[4];
            mma_s8_16832(a, b, sum);
#pragma unroll
            for (int k = 0; k < 4; ++k) {  // (row grp + 8 (k / 2), token 2 tig + k % 2)
                const int64_t t = t0 + 8 * j + 2 * tig + k % 2;
                const float2 ds = t < n_tokens ? xds[t * nb + g] : make_float2(0.0f, 0.0f);
                ml.acc[j][k] = __fadd_rn(ml.acc[j][k], q8_block_value<T>(sum[k], d[k / 2], m[k / 2], ds));
            }
        }
    }
    mma_finish(ml, mma_partials, ps, n_tokens, accumulate);
}

// ---- decode products streamed through shared memory (Q4_0, Q4_1, Q8_0 in the packed layout, cols % 1024 == 0) ----
//
// The register kernels above hold the bytes on their way in registers, and registers cap the warps a
// multiprocessor runs, and a decode step's products stayed well short of the copy bandwidth (a four-rows-a-warp
// form with more loads a warp ran slower still, its 128 registers a thread cutting the resident warps to 16). Here
// each warp streams its rows' chunks (a block a lane: 32 blocks, 576 bytes of Q4_0) into a ring of S stages in
// shared memory with cp.async, which holds no registers while the bytes are on their way, so S - 1 chunks a warp
// stay in flight, and the grid is persistent (a warp takes rows gw, gw + W, ... of the product set). Each lane sums
// its blocks l, l + 32, ... of a row in order and the warp adds the lanes as matmul_q8_kernel does, with the same
// operations: the same bits (tests/test_cuda.cpp, every S).
// A warp steps its (row, chunk) as counters: found by 64-bit divisions, they kept the multiprocessors busy issuing
// instructions and the DRAM far from busy. Of the ring's stage counts tried (2, 3, 4, 8), 3 ran fastest
// (kStreamStagesDefault), and Q8_0 ran faster on the register kernel at every count, so only Q4_0 and Q4_1 stream
// (CudaBackendOptions::stream_types). Fewer chunks in flight ran faster, so bytes in flight are not what limits it;
// why is not measured (the shared memory the ring takes from the L1 that holds the input is one candidate). The
// measurements, run by run: tests/bench/HISTORY.md.
// S: the ring's stages (Q8Launch::stream_stages).

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const auto at = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(at), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <GgmlType T>
__host__ __device__ constexpr int stream_stage_bytes() {
    return kWarp * (packed_quant_bytes(T) + packed_scale_bytes(T));
}

template <GgmlType T, int NT, int S>
__global__ void __launch_bounds__(kMatmulWarps * kWarp)
    matmul_q8_stream_kernel(ProductSet ps, const int8_t* __restrict__ xq, const float2* __restrict__ xds,
                            int64_t n_tokens, bool accumulate) {
    constexpr int QB = packed_quant_bytes(T), SB = packed_scale_bytes(T), kWords = QB / 4;
    constexpr int kStage = stream_stage_bytes<T>();
    extern __shared__ int4 stream_smem[];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    uint8_t* ring = reinterpret_cast<uint8_t*>(stream_smem) + warp * S * kStage;
    const int64_t n_warps = static_cast<int64_t>(gridDim.x) * kMatmulWarps;
    const int64_t gw = static_cast<int64_t>(blockIdx.x) * kMatmulWarps + warp;
    const int64_t total = ps.row_end[2];
    const int64_t cols = ps.w[0].cols, nb = cols / 32;  // alike members: one width
    const int chunks = static_cast<int>(nb / kWarp);
    // The issue side walks this warp's (row, chunk) sequence with counters (no division: the previous form's
    // three 64-bit divisions a chunk were most of its instructions). is_q / is_s: this lane's next copy sources.
    int64_t is_row = gw;
    int is_c = 0, is_stage = 0;
    const uint8_t *is_q = nullptr, *is_s = nullptr;
    auto point = [&](int64_t rg) {  // the sources of row rg's chunk 0
        int64_t r;
        const int member = set_member(ps, rg, r);
        const DeviceMatrix& w = member == 0 ? ps.w[0] : member == 1 ? ps.w[1] : ps.w[2];
        is_q = w.data + (r * nb + lane) * QB;
        is_s = w.scales + r * nb * SB + 16 * lane;
    };
    if (is_row < total) point(is_row);
    // The next chunk into stage is_stage: lane l copies block l's quants, lanes 0.. the 32 blocks' scales. One
    // commit a call, empty past the end, so that wait_group counts the same for every warp.
    auto issue = [&]() {
        if (is_row < total) {
            uint8_t* st = ring + is_stage * kStage;
#pragma unroll
            for (int i = 0; i < QB / 16; ++i) cp_async16(st + lane * QB + 16 * i, is_q + 16 * i);
            if (lane < kWarp * SB / 16) cp_async16(st + kWarp * QB + 16 * lane, is_s);
            is_q += kWarp * QB, is_s += kWarp * SB;
            if (++is_c == chunks) {
                is_c = 0, is_row += n_warps;
                if (is_row < total) point(is_row);
            }
        }
        is_stage = is_stage + 1 == S ? 0 : is_stage + 1;
        cp_async_commit();
    };
    for (int k = 0; k < S - 1; ++k) issue();  // weights only: before the kernel before has finished
    pdl_start();  // the input (and y) from here on
    const int nt = static_cast<int>(n_tokens);
    int stage = 0;
    for (int64_t rg = gw; rg < total; rg += n_warps) {
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
        const int8_t* xa = xq + 32 * lane;  // token 0's block g = c * 32 + lane
        const float2* xd = xds + lane;
        for (int c = 0; c < chunks; ++c) {
            cp_async_wait<S - 2>();  // this chunk has landed (this lane's copies) ...
            __syncwarp();            // ... and every lane's; the previous stage is read by all
            issue();                 // into the previous stage
            const uint8_t* st = ring + stage * kStage;
            stage = stage + 1 == S ? 0 : stage + 1;
            int wq[kWords];
            float d, m;
            load_q8_at<T>(st, st + kWarp * QB, lane, wq, d, m);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < nt) {
                    const int4* xp = reinterpret_cast<const int4*>(xa + t * cols);
                    acc[t] = __fadd_rn(acc[t], q8_block_dot<T>(wq, d, m, xp[0], xp[1], xd[t * nb]));
                }
            }
            xa += kWarp * 32, xd += kWarp;
        }
        int64_t r;
        const int member = set_member(ps, rg, r);
        float* const y = member == 0 ? ps.y[0] : member == 1 ? ps.y[1] : ps.y[2];
        const int64_t rows = member == 0 ? ps.w[0].rows : member == 1 ? ps.w[1].rows : ps.w[2].rows;
        store_row<NT>(acc, nt, y, 0, rows, r, accumulate, lane);
    }
    cp_async_wait<0>();
}

// ---- many decode tokens on the tensor cores, the tokens staged in shared memory ----
//
// matmul_q8_mma_kernel's arithmetic (the same fragments, q8_block_value and additions in the same order: the same
// bits), with its token side read differently. Nsight Compute (tests/bench/HISTORY.md, CUDA run 16) found that
// kernel bound by L1, not DRAM: each lane gathers its tokens' 4-byte quant words and 8-byte scale pairs
// straight from global memory, eight to sixteen cache lines a warp-wide load: about 28 L1 wavefronts an mma by count
// (not measured). Here the block copies each round's token side (the 32 blocks c = 0..31 of the round, one a warp,
// for its kMmaTokens tokens) into shared memory with cp.async, 16 contiguous bytes a thread, the next round in flight
// while this one is multiplied; a warp then reads a B fragment as two 128-byte rows and a tile's scale pairs as one
// 16-byte load a lane, with no bank conflicts: about 7 wavefronts an mma by the same count. Written with its parity
// tests; not yet run on a GPU (Q8Launch::mma_staged, off). ptxas: 56-64 registers (the launch bound's 64), Q4_1
// spilling 8 bytes.
struct MmaStage {                       // one round's token side
    int lo[kMmaWarps][kMmaTokens][4];  // block c of the round, token t: quant words 0..3
    int hi[kMmaWarps][kMmaTokens][4];  // words 4..7
    float2 ds[kMmaWarps][kMmaTokens];  // the block's (d, d * sum)
};
constexpr size_t kMmaStagedSmem = 2 * sizeof(MmaStage) > kMmaSmem ? 2 * sizeof(MmaStage) : kMmaSmem;

// Round `round`'s token side (blocks g = 32 round + c < nb, tokens t0 + t < n_tokens; zeros past n_tokens) into st:
// the copies issued by the whole block, consecutive threads taking consecutive bytes of a token's row.
__device__ __forceinline__ void mma_stage(MmaStage& st, const int8_t* __restrict__ xq, const float2* __restrict__ xds,
                                          int64_t round, int64_t t0, int64_t n_tokens, int64_t nb) {
    const int64_t cols = nb * 32, g0 = round * kMmaWarps;
    for (int k = threadIdx.x; k < kMmaTokens * kMmaWarps * 2; k += blockDim.x) {
        const int half = k % 2, c = (k / 2) % kMmaWarps, t = k / (2 * kMmaWarps);
        if (g0 + c >= nb) continue;
        int* dst = half == 0 ? st.lo[c][t] : st.hi[c][t];
        if (t0 + t < n_tokens) cp_async16(dst, xq + (t0 + t) * cols + (g0 + c) * 32 + 16 * half);
        else dst[0] = dst[1] = dst[2] = dst[3] = 0;
    }
    for (int k = threadIdx.x; k < kMmaTokens * kMmaWarps; k += blockDim.x) {
        const int c = k % kMmaWarps, t = k / kMmaWarps;
        if (g0 + c >= nb) continue;
        if (t0 + t < n_tokens) {
            const auto at = static_cast<unsigned>(__cvta_generic_to_shared(&st.ds[c][t]));
            asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(at), "l"(xds + (t0 + t) * nb + g0 + c)
                         : "memory");
        } else {
            st.ds[c][t] = make_float2(0.0f, 0.0f);
        }
    }
}

template <GgmlType T>
__global__ void __launch_bounds__(kMmaWarps * kWarp)
    matmul_q8_mma_staged_kernel(ProductSet ps, const int8_t* __restrict__ xq, const float2* __restrict__ xds,
                                int64_t n_tokens, bool accumulate) {
    constexpr int kTiles = kMmaTokens / 8;
    extern __shared__ int4 mma_staged_smem[];  // two MmaStage, then (after the last round) the partials
    MmaStage* stages = reinterpret_cast<MmaStage*>(mma_staged_smem);
    MmaLane ml = mma_lane<T>(ps);
    const int c = ml.c, grp = ml.grp, tig = ml.tig;
    const int64_t t0 = ml.t0, nb = ps.w[0].cols / 32, rounds = (nb + kMmaWarps - 1) / kMmaWarps;
    mma_stage(stages[0], xq, xds, 0, t0, n_tokens, nb);
    cp_async_commit();
    for (int64_t round = 0; round < rounds; ++round) {
        const int64_t g = round * kMmaWarps + c;  // this warp's block of the round
        int a[4] = {0, 0, 0, 0};
        float d[2] = {0.0f, 0.0f}, m[2] = {0.0f, 0.0f};
        if (g < nb) mma_a_fragment<T>(ml.qrow, ml.srow, ml.have, g, tig, a, d, m);  // in flight while it lands
        if (round + 1 < rounds) mma_stage(stages[(round + 1) % 2], xq, xds, round + 1, t0, n_tokens, nb);
        cp_async_commit();  // (empty past the last round: one group a round for the wait's count)
        cp_async_wait<1>();
        __syncthreads();  // the round's copies and zeros, every thread's
        if (g < nb) {
            const MmaStage& st = stages[round % 2];
#pragma unroll
            for (int j = 0; j < kTiles; ++j) {
                const int b[2] = {st.lo[c][8 * j + grp][tig], st.hi[c][8 * j + grp][tig]};
                int sum[4];
                mma_s8_16832(a, b, sum);
                const float4 ds2 = *reinterpret_cast<const float4*>(&st.ds[c][8 * j + 2 * tig]);
#pragma unroll
                for (int k = 0; k < 4; ++k) {  // (row grp + 8 (k / 2), token 2 tig + k % 2)
                    const float2 ds = k % 2 == 0 ? make_float2(ds2.x, ds2.y) : make_float2(ds2.z, ds2.w);
                    ml.acc[j][k] = __fadd_rn(ml.acc[j][k], q8_block_value<T>(sum[k], d[k / 2], m[k / 2], ds));
                }
            }
        }
        __syncthreads();  // every warp done with this stage before round + 2 is copied into it
    }
    cp_async_wait<0>();
    mma_finish(ml, reinterpret_cast<float*>(mma_staged_smem), ps, n_tokens, accumulate);
}

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

__global__ void rope_angles_kernel(const int32_t* __restrict__ pos, const double* __restrict__ inv_freq, int64_t half,
                                   int64_t n, float* __restrict__ cs) {
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * half;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const double theta = static_cast<double>(pos[idx / half]) * inv_freq[idx % half];
        double sn, cn;
        sincos(theta, &sn, &cn);
        cs[2 * idx] = static_cast<float>(cn);
        cs[2 * idx + 1] = static_cast<float>(sn);
    }
}

__device__ __forceinline__ float load_kv(const void* base, size_t i, bool f16) {
    return f16 ? __half2float(static_cast<const __half*>(base)[i]) : static_cast<const float*>(base)[i];
}

__device__ __forceinline__ void store_kv(void* base, size_t i, float v, bool f16) {
    if (f16) static_cast<__half*>(base)[i] = __float2half_rn(v);
    else static_cast<float*>(base)[i] = v;
}

// One block per (token, head): blockIdx.y < n_head rotates that query head in place, the others rotate key head
// blockIdx.y - n_head and store it with its values in the slot's cache row at the token's position. (One block a
// token did it all with one dependent load at a time, a long wait in every decode step.)
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
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            const float co = cst[2 * i], si = cst[2 * i + 1];
            float* p = qh + step * i;
            const float x0 = p[0], x1 = p[stride];
            p[0] = x0 * co - x1 * si;
            p[stride] = x0 * si + x1 * co;
        }
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

// One block of 4 warps per (token, head). Keys go by in chunks of 128 with an online softmax: the running max m and
// sum l rescale the output accumulators per chunk. Scores: warp w takes the chunk's keys w, w + 4, ..., four at a
// time, its lanes the dims (lane, lane + 32, ...) of each, summed over the warp; P V: warp w the same keys, four at
// a time, each lane its dims; the four warps' partial outputs are added at the end. (One key a thread and one
// dependent load at a time were slow even at short contexts.)
constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / kWarp;
constexpr int kAttnChunk = 128;
constexpr int kAttnKeysAtOnce = 4;
constexpr int kAttnMaxDimsPerLane = 16;  // head_dim <= 512

// The rows of flash_attention_kernel: row rho is (token rho / G, head kv_head G + rho % G), G = n_head / n_head_kv,
// in tiles of kFaRows rows; a tile's keys are those of the slot of its first row's token.
constexpr int kFaRows = 64;

// Shared memory of attention_kernel, in floats.
__host__ __device__ constexpr size_t attention_smem_floats(int head_dim) {
    return static_cast<size_t>(head_dim) * (1 + kAttnWarps) + kAttnChunk + 32;
}

// With only_others, a (token, head) whose row's tile has the same slot returns at once: flash_attention_kernel did
// it.
__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(const float* __restrict__ q, const int32_t* __restrict__ slots, const int32_t* __restrict__ pos,
                     Heads h, LayerCache c, float scale, int64_t window, float* __restrict__ out, bool only_others,
                     int8_t* __restrict__ out_q, float2* __restrict__ out_ds) {
    pdl_start();  // a product launched after this one may start fetching its weights
    extern __shared__ float smem[];
    const int hd = h.head_dim;
    float* sq = smem;                 // [head_dim] the query
    float* so = sq + hd;              // [kAttnWarps, head_dim] the warps' partial outputs, at the end
    float* sp = so + kAttnWarps * hd;  // [kAttnChunk] this chunk's scores, then probabilities
    float* scratch = sp + kAttnChunk;  // [32] reductions
    const int64_t t = blockIdx.x;
    const int head = blockIdx.y;
    const int group = h.n_head / h.n_head_kv;
    const int kv_head = head / group;
    if (only_others) {
        const int64_t rho = t * group + head % group;
        if (slots[t] == slots[rho / kFaRows * kFaRows / group]) return;
    }
    const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
    const float* qh = q + (t * h.n_head + head) * hd;
    for (int i = tid; i < hd; i += kAttnThreads) sq[i] = qh[i];
    __syncthreads();
    const int64_t n_kv = static_cast<int64_t>(pos[t]) + 1;
    const int64_t j0 = window > 0 && n_kv > window ? n_kv - window : 0;  // the first key of a sliding window
    const int64_t row = static_cast<int64_t>(h.n_head_kv) * hd;
    const size_t base = static_cast<size_t>(slots[t]) * c.slot_stride + static_cast<size_t>(kv_head) * hd;
    float m = -INFINITY, l = 0.0f;
    float o[kAttnMaxDimsPerLane];  // dims lane + 32 i of this warp's keys
#pragma unroll
    for (int i = 0; i < kAttnMaxDimsPerLane; ++i) o[i] = 0.0f;
    for (int64_t c0 = j0; c0 < n_kv; c0 += kAttnChunk) {
        const int len = static_cast<int>(n_kv - c0 < kAttnChunk ? n_kv - c0 : kAttnChunk);
        for (int u0 = warp; u0 < len; u0 += kAttnWarps * kAttnKeysAtOnce) {
            float dot[kAttnKeysAtOnce];
#pragma unroll
            for (int k = 0; k < kAttnKeysAtOnce; ++k) {
                const int jj = u0 + k * kAttnWarps;
                dot[k] = 0.0f;
                if (jj < len) {
                    const size_t kr = base + static_cast<size_t>((c0 + jj) * row);
#pragma unroll
                    for (int i = 0; i < kAttnMaxDimsPerLane; ++i) {
                        const int e = lane + i * kWarp;
                        if (e < hd) dot[k] += sq[e] * load_kv(c.k, kr + e, c.f16);
                    }
                }
            }
#pragma unroll
            for (int k = 0; k < kAttnKeysAtOnce; ++k) {
                const float sum = warp_sum(dot[k]);
                const int jj = u0 + k * kAttnWarps;
                if (lane == 0 && jj < len) sp[jj] = sum * scale;
            }
        }
        __syncthreads();
        const float sc = tid < len ? sp[tid] : -INFINITY;
        const float chunk_max = block_reduce<true>(sc, scratch);  // finite: key c0 is always in range
        const float new_m = fmaxf(m, chunk_max);
        const float f = expf(m - new_m);  // 0 on the first chunk (m = -inf)
        const float p = tid < len ? expf(sc - new_m) : 0.0f;
        sp[tid] = p;
        l = l * f + block_reduce<false>(p, scratch);  // its barriers also publish sp
#pragma unroll
        for (int i = 0; i < kAttnMaxDimsPerLane; ++i) o[i] *= f;
        for (int u0 = warp; u0 < len; u0 += kAttnWarps * kAttnKeysAtOnce) {
#pragma unroll
            for (int k = 0; k < kAttnKeysAtOnce; ++k) {
                const int jj = u0 + k * kAttnWarps;
                if (jj < len) {
                    const float pj = sp[jj];
                    const size_t vr = base + static_cast<size_t>((c0 + jj) * row);
#pragma unroll
                    for (int i = 0; i < kAttnMaxDimsPerLane; ++i) {
                        const int e = lane + i * kWarp;
                        if (e < hd) o[i] += pj * load_kv(c.v, vr + e, c.f16);
                    }
                }
            }
        }
        m = new_m;
        __syncthreads();  // sp is rewritten by the next chunk
    }
#pragma unroll
    for (int i = 0; i < kAttnMaxDimsPerLane; ++i) {
        const int e = lane + i * kWarp;
        if (e < hd) so[warp * hd + e] = o[i];
    }
    __syncthreads();
    float* oh = out + (t * h.n_head + head) * hd;
    for (int e = tid; e < hd; e += kAttnThreads) {
        float v = so[e];
        for (int w = 1; w < kAttnWarps; ++w) v += so[w * hd + e];
        v = v / l;
        oh[e] = v;
        // Quantized for the output projection: a warp's 32 dims are one block (head_dim a multiple of 32, so that
        // e < hd holds for the whole warp).
        if (out_q != nullptr) quantize_lane(v, ((t * h.n_head + head) * hd + e) / 32, e % 32, out_q, out_ds);
    }
}

// ---- flash attention for prompts: tensor cores (WMMA, f16 in, float sums), an f16 cache, head_dim <= 128 ----
//
// A block takes kFaRows query rows (4 warps of 16) sharing one KV head (GQA: a token's G heads are G rows), and the
// keys of its slot in chunks of kFaKeys: each warp multiplies its 16 queries with the chunk's keys (S = Q K^T), keeps
// each row's running max and sum (online softmax), rounds the probabilities to f16 and adds P V to its output rows.
// The scores never leave shared memory, and each key and value is read once per tile instead of once per query.
// The query is rounded to f16 and the probabilities too, as the reference backend does with an f16 cache.
constexpr int kFaKeys = 64;
constexpr int kFaWarps = 4;
constexpr int kFaMaxDim = 128;

struct FaLayout {  // shared memory, each part at a 128-byte boundary; strides padded against bank conflicts
    int ldq, ldk, lds, ldp, ldo;
    size_t q, k, v, s, p, o, m, l, meta, bytes;
    __host__ __device__ explicit FaLayout(int d) {
        ldq = ldk = d + 8;  // halves
        lds = kFaKeys + 4;  // floats
        ldp = kFaKeys + 8;  // halves
        ldo = d + 4;        // floats
        size_t at = 0;
        auto take = [&](size_t bytes) {
            const size_t here = at;
            at = (at + bytes + 127) / 128 * 128;
            return here;
        };
        q = take(sizeof(__half) * kFaRows * ldq);
        k = take(sizeof(__half) * kFaKeys * ldk);
        v = take(sizeof(__half) * kFaKeys * ldk);
        s = take(sizeof(float) * kFaRows * lds);
        p = take(sizeof(__half) * kFaRows * ldp);
        o = take(sizeof(float) * kFaRows * ldo);
        m = take(sizeof(float) * kFaRows);
        l = take(sizeof(float) * kFaRows);
        meta = take(sizeof(int) * (2 * kFaRows + 2));
        bytes = at;
    }
};

__global__ void __launch_bounds__(kFaWarps * kWarp)
    flash_attention_kernel(const float* __restrict__ q, const int32_t* __restrict__ slots,
                           const int32_t* __restrict__ pos, int64_t n, Heads h, LayerCache c, float scale,
                           int64_t window, float* __restrict__ out) {
    using namespace nvcuda;
    extern __shared__ float4 fa_smem[];  // float4: 16-byte aligned; FaLayout aligns the parts to 128
    unsigned char* smem = reinterpret_cast<unsigned char*>(fa_smem);
    const int d_head = h.head_dim, group = h.n_head / h.n_head_kv, kv_head = blockIdx.y;
    const FaLayout L(d_head);
    __half* sq = reinterpret_cast<__half*>(smem + L.q);
    __half* sk = reinterpret_cast<__half*>(smem + L.k);
    __half* sv = reinterpret_cast<__half*>(smem + L.v);
    float* ss = reinterpret_cast<float*>(smem + L.s);
    __half* sp = reinterpret_cast<__half*>(smem + L.p);
    float* so = reinterpret_cast<float*>(smem + L.o);
    float* sm = reinterpret_cast<float*>(smem + L.m);
    float* sl = reinterpret_cast<float*>(smem + L.l);
    int* last = reinterpret_cast<int*>(smem + L.meta);  // [kFaRows] the row's last key (its position), -1: none
    int* first = last + kFaRows;                         // [kFaRows] its first key (sliding window)
    // The tile's key range. No static shared memory in this kernel: the dynamic part then starts at the shared
    // window's base, aligned for WMMA's 32-byte loads.
    int& s_kmin = first[kFaRows];
    int& s_kmax = first[kFaRows + 1];
    const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kFaRows, n_rows = n * group;
    const int slot = slots[row0 / group];
    if (tid == 0) s_kmin = INT_MAX, s_kmax = -1;
    __syncthreads();
    for (int i = tid; i < kFaRows; i += blockDim.x) {
        const int64_t rho = row0 + i;
        int p_last = -1, p_first = 0;
        if (rho < n_rows && slots[rho / group] == slot) {
            p_last = pos[rho / group];
            p_first = window > 0 && p_last + 1 > window ? static_cast<int>(p_last + 1 - window) : 0;
            atomicMin(&s_kmin, p_first);
            atomicMax(&s_kmax, p_last);
        }
        last[i] = p_last;
        first[i] = p_first;
        sm[i] = -INFINITY;
        sl[i] = 0.0f;
    }
    // The queries as f16 (rows of another slot or past the batch: zeros), the outputs zero.
    for (int idx = tid; idx < kFaRows * d_head; idx += blockDim.x) {
        const int i = idx / d_head, e = idx % d_head;
        const int64_t rho = row0 + i;
        float v = 0.0f;
        if (rho < n_rows) {
            const int64_t t = rho / group;
            const int head = kv_head * group + static_cast<int>(rho % group);
            v = q[(t * h.n_head + head) * d_head + e];
        }
        sq[i * L.ldq + e] = __float2half_rn(v);
        so[i * L.ldo + e] = 0.0f;
    }
    __syncthreads();
    const int64_t row_elems = static_cast<int64_t>(h.n_head_kv) * d_head;
    const size_t base = static_cast<size_t>(slot) * c.slot_stride + static_cast<size_t>(kv_head) * d_head;
    const auto* kc = static_cast<const __half*>(c.k);
    const auto* vc = static_cast<const __half*>(c.v);
    const int kmin = s_kmin, kmax = s_kmax;
    for (int k0 = kmin; k0 <= kmax; k0 += kFaKeys) {
        // The chunk's keys and values, eight halves (16 bytes) at a time; past kmax zeros (P is 0 there, and 0
        // times a stale value could be NaN).
        const int per_row = d_head / 8;
        for (int idx = tid; idx < kFaKeys * per_row; idx += blockDim.x) {
            const int j = idx / per_row, e = 8 * (idx % per_row);
            uint4 kk = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (k0 + j <= kmax) {
                const size_t at = base + static_cast<size_t>(k0 + j) * row_elems + e;
                kk = *reinterpret_cast<const uint4*>(kc + at);
                vv = *reinterpret_cast<const uint4*>(vc + at);
            }
            *reinterpret_cast<uint4*>(sk + j * L.ldk + e) = kk;
            *reinterpret_cast<uint4*>(sv + j * L.ldk + e) = vv;
        }
        __syncthreads();
        // S = Q K^T for this warp's 16 rows
        const int r0 = warp * 16;
        for (int kt = 0; kt < kFaKeys / 16; ++kt) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int dk = 0; dk < d_head / 16; ++dk) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                wmma::load_matrix_sync(a, sq + r0 * L.ldq + dk * 16, L.ldq);
                wmma::load_matrix_sync(b, sk + kt * 16 * L.ldk + dk * 16, L.ldk);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(ss + r0 * L.lds + kt * 16, acc, L.lds, wmma::mem_row_major);
        }
        __syncwarp();
        // Online softmax: two lanes a row, 32 keys each.
        {
            const int r = r0 + lane / 2, j_begin = (lane % 2) * (kFaKeys / 2);
            const int p_last = last[r], p_first = first[r];
            float cmax = -INFINITY;
            for (int j = j_begin; j < j_begin + kFaKeys / 2; ++j) {
                const int key = k0 + j;
                if (key >= p_first && key <= p_last) cmax = fmaxf(cmax, ss[r * L.lds + j] * scale);
            }
            cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, 1));
            const float m_old = sm[r];
            const float m_new = fmaxf(m_old, cmax);
            const bool none = m_new == -INFINITY;  // no key of this row so far
            const float factor = none ? 1.0f : expf(m_old - m_new);
            float psum = 0.0f;
            for (int j = j_begin; j < j_begin + kFaKeys / 2; ++j) {
                const int key = k0 + j;
                __half pj = __float2half_rn(0.0f);
                if (!none && key >= p_first && key <= p_last) {
                    pj = __float2half_rn(expf(ss[r * L.lds + j] * scale - m_new));
                    psum += __half2float(pj);
                }
                sp[r * L.ldp + j] = pj;
            }
            psum += __shfl_xor_sync(0xffffffffu, psum, 1);
            for (int e = (lane % 2) * (d_head / 2); e < (lane % 2 + 1) * (d_head / 2); ++e) so[r * L.ldo + e] *= factor;
            __syncwarp();
            if (lane % 2 == 0) {
                sl[r] = sl[r] * factor + psum;
                sm[r] = m_new;
            }
        }
        __syncwarp();
        // O += P V
        for (int dt = 0; dt < d_head / 16; ++dt) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, so + r0 * L.ldo + dt * 16, L.ldo, wmma::mem_row_major);
            for (int kk = 0; kk < kFaKeys / 16; ++kk) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
                wmma::load_matrix_sync(a, sp + r0 * L.ldp + kk * 16, L.ldp);
                wmma::load_matrix_sync(b, sv + kk * 16 * L.ldk + dt * 16, L.ldk);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(so + r0 * L.ldo + dt * 16, acc, L.ldo, wmma::mem_row_major);
        }
        __syncthreads();  // the next chunk overwrites K and V
    }
    for (int idx = tid; idx < kFaRows * d_head; idx += blockDim.x) {
        const int i = idx / d_head, e = idx % d_head;
        const int64_t rho = row0 + i;
        if (rho >= n_rows || last[i] < 0) continue;  // another slot's row: attention_kernel's
        const int64_t t = rho / group;
        const int head = kv_head * group + static_cast<int>(rho % group);
        out[(t * h.n_head + head) * d_head + e] = so[i * L.ldo + e] / sl[i];
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

unsigned grid_for(int64_t n, int threads, unsigned cap = 4096) {
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

}  // namespace

ProductSet product_set(const DeviceMatrix& w, float* y) {
    ProductSet ps;
    ps.w[0] = w;
    ps.y[0] = y;
    ps.row_end[0] = ps.row_end[1] = ps.row_end[2] = w.rows;
    ps.count = 1;
    return ps;
}

bool can_share_launch(const DeviceMatrix& a, const DeviceMatrix& b) {
    return a.type == b.type && a.cols == b.cols && (a.scales == nullptr) == (b.scales == nullptr);
}

void ProductSet::add(const DeviceMatrix& m, float* out) {
    if (count == 3 || (count > 0 && !can_share_launch(w[0], m)))
        throw_internal("a product set takes up to three alike matrices");
    w[count] = m;
    y[count] = out;
    const int64_t end = (count == 0 ? 0 : row_end[count - 1]) + m.rows;
    for (int i = count; i < 3; ++i) row_end[i] = end;
    ++count;
}

void matmul(const ProductSet& ps, const float* x, int64_t n_tokens, bool accumulate, cudaStream_t s) {
    with_type(ps.w[0].type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::value;
        const unsigned row_blocks = static_cast<unsigned>((ps.row_end[2] + kMatmulWarps - 1) / kMatmulWarps);
        if (n_tokens == 1) {
            matmul_kernel<T, 1><<<dim3(row_blocks, 1), kMatmulWarps * kWarp, 0, s>>>(ps, x, n_tokens, accumulate);
        } else {
            constexpr int kTile = 8;
            const unsigned tiles = static_cast<unsigned>((n_tokens + kTile - 1) / kTile);
            matmul_kernel<T, kTile><<<dim3(row_blocks, tiles), kMatmulWarps * kWarp, 0, s>>>(ps, x, n_tokens,
                                                                                           accumulate);
        }
    });
    check(cudaGetLastError(), "the matmul kernel launch");
}

void matmul(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, bool accumulate, cudaStream_t s) {
    matmul(product_set(w, y), x, n_tokens, accumulate, s);
}

void quantize_q8(const float* x, int64_t n, int64_t cols, int8_t* q, float* ds, cudaStream_t s, bool pdl) {
    const int64_t blocks = n * (cols / 32);
    launch(quantize_q8_kernel, grid_for(blocks * kWarp, 256, 1u << 16), 256, 0, s, pdl,
           "the activation quantization kernel launch", x, blocks, q, reinterpret_cast<float2*>(ds));
}

namespace {

// Blocks of matmul_q8_stream_kernel<T, NT, S> that fit a multiprocessor at once (asked once).
template <GgmlType T, int NT, int S>
int stream_blocks_per_sm() {
    static const int blocks = [] {
        int n = 0;
        check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, matmul_q8_stream_kernel<T, NT, S>,
                                                            kMatmulWarps * kWarp,
                                                            kMatmulWarps * S * stream_stage_bytes<T>()),
              "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
        return std::max(n, 1);
    }();
    return blocks;
}

// An attribute of the current device.
int device_attribute(cudaDeviceAttr a) {
    int device = 0, v = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&v, a, device), "cudaDeviceGetAttribute");
    return v;
}

int multiprocessors() {  // asked once
    static const int n = std::max(device_attribute(cudaDevAttrMultiProcessorCount), 1);
    return n;
}

// f(std::integral_constant<int, S>) for the ring's stages the streamed kernel is built for (2, 3, 4, 6, 8).
template <class F>
void with_stages(int stages, F&& f) {
    switch (stages) {
        case 2: f(std::integral_constant<int, 2>{}); break;
        case 3: f(std::integral_constant<int, 3>{}); break;
        case 4: f(std::integral_constant<int, 4>{}); break;
        case 6: f(std::integral_constant<int, 6>{}); break;
        case 8: f(std::integral_constant<int, 8>{}); break;
        default: check(cudaErrorInvalidValue, "matmul_q8 (the streamed kernel takes 2, 3, 4, 6 or 8 stages)");
    }
}

template <GgmlType T, int S>
void prepare_stream() {
    stream_blocks_per_sm<T, 1, S>();
    stream_blocks_per_sm<T, 4, S>();
    stream_blocks_per_sm<T, 8, S>();
}

}  // namespace

void prepare_stream_products(int stages) {
    multiprocessors();
    with_stages(stages > 0 ? stages : kStreamStagesDefault, [](auto st) {
        prepare_stream<GgmlType::Q4_0, decltype(st)::value>();
        prepare_stream<GgmlType::Q4_1, decltype(st)::value>();
        prepare_stream<GgmlType::Q8_0, decltype(st)::value>();
    });
}

namespace {

// f(std::integral_constant<GgmlType, T>) for the int8 product types Q4_0, Q4_1 and Q8_0 (t one of them: uses_q8).
template <class F>
void with_int8_type(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::Q4_0: f(std::integral_constant<GgmlType, GgmlType::Q4_0>{}); break;
        case GgmlType::Q4_1: f(std::integral_constant<GgmlType, GgmlType::Q4_1>{}); break;
        default: f(std::integral_constant<GgmlType, GgmlType::Q8_0>{}); break;
    }
}

// The mma kernels' shared memory (more than 48 KB is asked for first), once a type.
template <GgmlType T>
void mma_ready() {
    static const bool ready = [] {
        check(cudaFuncSetAttribute(matmul_q8_mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(kMmaSmem)),
              "cudaFuncSetAttribute (the int8 mma kernel)");
        check(cudaFuncSetAttribute(matmul_q8_mma_staged_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(kMmaStagedSmem)),
              "cudaFuncSetAttribute (the staged int8 mma kernel)");
        return true;
    }();
    (void)ready;
}

int device_major() {  // the compute capability's major version (asked once)
    static const int major = device_attribute(cudaDevAttrComputeCapabilityMajor);
    return major;
}

bool device_sm80() { return device_major() >= 8; }

}  // namespace

bool pdl_supported() { return device_major() >= 9; }

void prepare_mma_products() {
    if (!device_sm80()) return;
    mma_ready<GgmlType::Q4_0>();
    mma_ready<GgmlType::Q4_1>();
    mma_ready<GgmlType::Q8_0>();
}

bool mma_takes(const ProductSet& ps, int64_t n_tokens) {
    return uses_q8(ps.w[0].type) && ps.w[0].scales != nullptr && n_tokens > 8 && device_sm80();
}

bool stream_takes(const ProductSet& ps, int64_t n_tokens) {
    return uses_q8(ps.w[0].type) && ps.w[0].scales != nullptr && ps.w[0].cols % (32 * kWarp) == 0 &&
           n_tokens >= 1 && n_tokens <= 8;
}

void matmul_q8(const ProductSet& ps, const int8_t* q, const float* ds, int64_t n_tokens, bool accumulate,
               cudaStream_t s, const Q8Launch& how) {
    const unsigned row_blocks = static_cast<unsigned>((ps.row_end[2] + kMatmulWarps - 1) / kMatmulWarps);
    const auto* xds = reinterpret_cast<const float2*>(ds);
    if (how.stream && stream_takes(ps, n_tokens)) {
        auto go_stream = [&](auto tag, auto nt, auto st) {
            constexpr GgmlType T = decltype(tag)::value;
            constexpr int NT = decltype(nt)::value, S = decltype(st)::value;
            const int64_t fit = static_cast<int64_t>(stream_blocks_per_sm<T, NT, S>()) * multiprocessors();
            const auto grid = static_cast<unsigned>(std::max<int64_t>(
                1, std::min<int64_t>(how.stream_blocks > 0 ? how.stream_blocks : fit, row_blocks)));
            launch(matmul_q8_stream_kernel<T, NT, S>, grid, kMatmulWarps * kWarp,
                   kMatmulWarps * S * stream_stage_bytes<T>(), s, how.pdl, "the streamed int8 matmul kernel launch",
                   ps, q, xds, n_tokens, accumulate);
        };
        with_stages(how.stream_stages > 0 ? how.stream_stages : kStreamStagesDefault, [&](auto st) {
            with_int8_type(ps.w[0].type, [&](auto tag) {
                if (n_tokens == 1) go_stream(tag, std::integral_constant<int, 1>{}, st);
                else if (n_tokens <= 4) go_stream(tag, std::integral_constant<int, 4>{}, st);
                else go_stream(tag, std::integral_constant<int, 8>{}, st);
            });
        });
        check(cudaGetLastError(), "the streamed int8 matmul kernel launch");
        return;
    }
    if (how.mma && mma_takes(ps, n_tokens)) {
        const dim3 grid(static_cast<unsigned>((n_tokens + kMmaTokens - 1) / kMmaTokens),
                        static_cast<unsigned>((ps.row_end[2] + kMmaRows - 1) / kMmaRows));
        with_int8_type(ps.w[0].type, [&](auto tag) {
            constexpr GgmlType T = decltype(tag)::value;
            mma_ready<T>();
            if (how.mma_staged)
                matmul_q8_mma_staged_kernel<T><<<grid, kMmaWarps * kWarp, kMmaStagedSmem, s>>>(ps, q, xds, n_tokens,
                                                                                            accumulate);
            else
                matmul_q8_mma_kernel<T><<<grid, kMmaWarps * kWarp, kMmaSmem, s>>>(ps, q, xds, n_tokens, accumulate);
        });
        check(cudaGetLastError(), "the int8 mma matmul kernel launch");
        return;
    }
    auto go = [&](auto tag, auto nt) {
        constexpr GgmlType T = decltype(tag)::value;
        constexpr int NT = decltype(nt)::value;
        // As a programmatic dependent: the kernel that brings its first blocks into L2 before it waits.
        if (how.pdl && pdl_supported())
            launch(matmul_q8_kernel<T, NT, true>, row_blocks, kMatmulWarps * kWarp, 0, s, true,
                   "the int8 matmul kernel launch", ps, q, xds, n_tokens, accumulate);
        else
            matmul_q8_kernel<T, NT, false><<<row_blocks, kMatmulWarps * kWarp, 0, s>>>(ps, q, xds, n_tokens,
                                                                                    accumulate);
    };
    auto by_tokens = [&](auto tag) {
        if (n_tokens == 1) {
            go(tag, std::integral_constant<int, 1>{});
        } else if (n_tokens <= 4) {
            go(tag, std::integral_constant<int, 4>{});
        } else if (n_tokens <= 8 || !how.rows_kernel) {
            go(tag, std::integral_constant<int, 8>{});
        } else {
            constexpr GgmlType T = decltype(tag)::value;
            const auto warps = static_cast<unsigned>((ps.row_end[2] + kRowsPerWarp - 1) / kRowsPerWarp);
            matmul_q8_rows_kernel<T, 8><<<(warps + kMatmulWarps - 1) / kMatmulWarps, kMatmulWarps * kWarp, 0, s>>>(
                ps, q, xds, n_tokens, accumulate);
        }
    };
    switch (ps.w[0].type) {
        case GgmlType::Q4_0: by_tokens(std::integral_constant<GgmlType, GgmlType::Q4_0>{}); break;
        case GgmlType::Q4_1: by_tokens(std::integral_constant<GgmlType, GgmlType::Q4_1>{}); break;
        case GgmlType::Q8_0: by_tokens(std::integral_constant<GgmlType, GgmlType::Q8_0>{}); break;
        default: check(cudaErrorInvalidValue, "matmul_q8 (a weight type without int8 products)");
    }
    check(cudaGetLastError(), "the int8 matmul kernel launch");
}

void matmul_q8(const DeviceMatrix& w, const int8_t* q, const float* ds, int64_t n_tokens, float* y, bool accumulate,
               cudaStream_t s, const Q8Launch& how) {
    matmul_q8(product_set(w, y), q, ds, n_tokens, accumulate, s, how);
}

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

void rope_angles(const int32_t* pos, const double* inv_freq, int64_t half, int64_t n, float* cs, cudaStream_t s) {
    rope_angles_kernel<<<grid_for(n * half, 256), 256, 0, s>>>(pos, inv_freq, half, n, cs);
    check(cudaGetLastError(), "the RoPE angle kernel launch");
}

void rope_store(float* q, const float* k, const float* v, const float* cs, const int32_t* slots,
                const int32_t* pos, int64_t n, const Heads& heads, const LayerCache& cache, cudaStream_t s, bool pdl) {
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(heads.n_head + heads.n_head_kv));
    launch(rope_store_kernel, grid, 128, 0, s, pdl, "the RoPE + KV store kernel launch", q, k, v, cs, slots, pos,
           heads, cache);
}

bool flash_attention_takes(const Heads& heads, const LayerCache& cache) {
    return cache.f16 && heads.head_dim % 16 == 0 && heads.head_dim <= kFaMaxDim;
}

void attention(const float* q, const int32_t* slots, const int32_t* pos, int64_t n, const Heads& heads,
               const LayerCache& cache, float scale, int64_t window, float* out, cudaStream_t s, bool flash,
               int8_t* q_out, float* ds_out, bool pdl) {
    if (heads.head_dim > kWarp * kAttnMaxDimsPerLane) {
        check(cudaErrorInvalidValue, "attention (head_dim above 512)");
    }
    flash = flash && flash_attention_takes(heads, cache);
    if (flash) {
        const FaLayout layout(heads.head_dim);
        static bool opted_in = false;  // shared memory beyond 48 KiB must be asked for, once
        if (!opted_in) {
            check(cudaFuncSetAttribute(flash_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(FaLayout(kFaMaxDim).bytes)),
                  "cudaFuncSetAttribute (flash attention shared memory)");
            opted_in = true;
        }
        const int64_t rows = n * (heads.n_head / heads.n_head_kv);
        flash_attention_kernel<<<dim3(static_cast<unsigned>((rows + kFaRows - 1) / kFaRows),
                                      static_cast<unsigned>(heads.n_head_kv)),
                                 kFaWarps * kWarp, layout.bytes, s>>>(q, slots, pos, n, heads, cache, scale, window,
                                                                      out);
        check(cudaGetLastError(), "the flash attention kernel launch");
    }
    // Every (token, head) without flash attention; with it, those whose tile belongs to another slot.
    if (q_out != nullptr && (flash || heads.head_dim % 32 != 0))
        check(cudaErrorInvalidValue, "attention (quantized output: not with flash, head_dim a multiple of 32)");
    const size_t smem = attention_smem_floats(heads.head_dim) * sizeof(float);
    launch(attention_kernel, dim3(static_cast<unsigned>(n), static_cast<unsigned>(heads.n_head)), kAttnThreads, smem,
           s, pdl, "the attention kernel launch", q, slots, pos, heads, cache, scale, window, out, flash, q_out,
           reinterpret_cast<float2*>(ds_out));
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
