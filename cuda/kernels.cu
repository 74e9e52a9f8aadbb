// The forward pass's kernels, correct first: each is the plainest version that computes the CPU backend's function
// on any shape (rows not a multiple of the tile, any head_dim up to 512, any GQA ratio). Speed is the next issue's:
// the matmul decodes weights in registers and is memory-bound for decode but re-reads the weights once per 8
// tokens in prefill (no tensor cores yet), and attention reads K one row per thread.
#include "cuda/check.h"
#include "cuda/dequant.h"
#include "cuda/kernels.h"

#include <cuda_fp16.h>

#include <climits>
#include <cmath>
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
        default: break;
    }
    throw_unsupported(t);
}

// ---- matmul: one warp per weight row, a tile of NT tokens per block row ----

constexpr int kMatmulWarps = 4;

template <GgmlType T, int NT>
__global__ void __launch_bounds__(kMatmulWarps * kWarp)
    matmul_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                  const float* __restrict__ x, int64_t n_tokens, float* __restrict__ y, bool accumulate) {
    const int lane = threadIdx.x % kWarp;
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kMatmulWarps + threadIdx.x / kWarp;
    if (r >= rows) return;  // the whole warp: no block-wide barrier follows
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * NT;
    const int nt = static_cast<int>(n_tokens - t0 < NT ? n_tokens - t0 : NT);
    const uint8_t* wr = w + r * row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    if constexpr (is_block_type(T)) {
        // Lane l decodes groups l, l + 32, ... (32 elements each) and dots each with the NT token rows.
        const int64_t groups = cols / 32;
        for (int64_t g = lane; g < groups; g += kWarp) {
            float v[32];
            decode_group32<T>(wr, g, v);
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
    } else {
        // Plain floats: lanes take consecutive elements (coalesced), and any cols works.
        for (int64_t k = lane; k < cols; k += kWarp) {
            const float wv = decode_element<T>(wr, k);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < nt) acc[t] += wv * x[(t0 + t) * cols + k];
            }
        }
    }
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

template <GgmlType T>
__global__ void embed_kernel(const uint8_t* __restrict__ emb, size_t row_bytes, int64_t cols,
                             const int32_t* __restrict__ tokens, float scale, float* __restrict__ x) {
    const int64_t t = blockIdx.x;
    const uint8_t* row = emb + static_cast<int64_t>(tokens[t]) * row_bytes;
    float* out = x + t * cols;
    if constexpr (is_block_type(T)) {
        for (int64_t g = threadIdx.x; g < cols / 32; g += blockDim.x) {
            float v[32];
            decode_group32<T>(row, g, v);
#pragma unroll
            for (int i = 0; i < 32; ++i) out[g * 32 + i] = v[i] * scale;
        }
    } else {
        for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) out[k] = decode_element<T>(row, k) * scale;
    }
}

__global__ void rms_norm_kernel(const float* x, const float* __restrict__ w, float* y, int64_t d, float eps) {
    __shared__ float scratch[32];
    const float* xr = x + blockIdx.x * d;
    float* yr = y + blockIdx.x * d;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_reduce<false>(ss, scratch);
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * scale * w[i];  // each thread its own i
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

__global__ void rope_store_kernel(float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                  const float* __restrict__ cs, const int32_t* __restrict__ slots,
                                  const int32_t* __restrict__ pos, Heads h, LayerCache c) {
    const int64_t t = blockIdx.x;
    const int half = h.n_rot / 2;
    const float* cst = cs + t * half * 2;
    float* qt = q + t * h.n_head * h.head_dim;
    // Pair i of a head: dims (2i, 2i+1), or (i, i + half) with NEOX.
    const int stride = h.neox ? half : 1, step = h.neox ? 1 : 2;
    for (int idx = threadIdx.x; idx < h.n_head * half; idx += blockDim.x) {
        const int head = idx / half, i = idx % half;
        const float co = cst[2 * i], si = cst[2 * i + 1];
        float* p = qt + head * h.head_dim + step * i;
        const float x0 = p[0], x1 = p[stride];
        p[0] = x0 * co - x1 * si;
        p[stride] = x0 * si + x1 * co;
    }
    const int row = h.n_head_kv * h.head_dim;
    const float* kt = k + t * row;
    const float* vt = v + t * row;
    const size_t dst = static_cast<size_t>(slots[t]) * c.slot_stride + static_cast<size_t>(pos[t]) * row;
    for (int e = threadIdx.x; e < row; e += blockDim.x) {
        const int i = e % h.head_dim;
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

// One block of 128 threads per (token, head). Keys go by in chunks of 128, one per thread, with an online softmax:
// the running max m and sum l rescale the output accumulators (dims tid, tid + 128, ... of the head) per chunk.
constexpr int kAttnThreads = 128;
constexpr int kAttnMaxDimsPerThread = 4;  // head_dim <= 512

__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(const float* __restrict__ q, const int32_t* __restrict__ slots, const int32_t* __restrict__ pos,
                     Heads h, LayerCache c, float scale, int64_t window, float* __restrict__ out) {
    extern __shared__ float smem[];
    float* sq = smem;                   // [head_dim] the query, times scale
    float* sp = smem + h.head_dim;      // [128] this chunk's probabilities
    float* scratch = sp + kAttnThreads;  // [32] reductions
    const int64_t t = blockIdx.x;
    const int head = blockIdx.y;
    const int hd = h.head_dim;
    const int kv_head = head / (h.n_head / h.n_head_kv);
    const float* qh = q + (t * h.n_head + head) * hd;
    for (int i = threadIdx.x; i < hd; i += kAttnThreads) sq[i] = qh[i];
    __syncthreads();
    const int64_t n_kv = static_cast<int64_t>(pos[t]) + 1;
    const int64_t j0 = window > 0 && n_kv > window ? n_kv - window : 0;  // the first key of a sliding window
    const int64_t row = static_cast<int64_t>(h.n_head_kv) * hd;
    const size_t base = static_cast<size_t>(slots[t]) * c.slot_stride + static_cast<size_t>(kv_head) * hd;
    float m = -INFINITY, l = 0.0f;
    float o[kAttnMaxDimsPerThread];
#pragma unroll
    for (int i = 0; i < kAttnMaxDimsPerThread; ++i) o[i] = 0.0f;
    for (int64_t c0 = j0; c0 < n_kv; c0 += kAttnThreads) {
        const int64_t j = c0 + threadIdx.x;
        float s = -INFINITY;
        if (j < n_kv) {
            const size_t kr = base + static_cast<size_t>(j * row);
            float dot = 0.0f;
            for (int i = 0; i < hd; ++i) dot += sq[i] * load_kv(c.k, kr + i, c.f16);
            s = dot * scale;
        }
        const float chunk_max = block_reduce<true>(s, scratch);  // finite: key c0 is always in range
        const float new_m = fmaxf(m, chunk_max);
        const float f = expf(m - new_m);  // 0 on the first chunk (m = -inf)
        const float p = j < n_kv ? expf(s - new_m) : 0.0f;
        sp[threadIdx.x] = p;
        l = l * f + block_reduce<false>(p, scratch);  // its barriers also publish sp
        const int len = static_cast<int>(n_kv - c0 < kAttnThreads ? n_kv - c0 : kAttnThreads);
#pragma unroll
        for (int i = 0; i < kAttnMaxDimsPerThread; ++i) {
            const int d = threadIdx.x + i * kAttnThreads;
            if (d < hd) {
                float acc = o[i] * f;
                for (int jj = 0; jj < len; ++jj)
                    acc += sp[jj] * load_kv(c.v, base + static_cast<size_t>((c0 + jj) * row) + d, c.f16);
                o[i] = acc;
            }
        }
        m = new_m;
        __syncthreads();  // sp is rewritten by the next chunk
    }
    float* oh = out + (t * h.n_head + head) * hd;
#pragma unroll
    for (int i = 0; i < kAttnMaxDimsPerThread; ++i) {
        const int d = threadIdx.x + i * kAttnThreads;
        if (d < hd) oh[d] = o[i] / l;
    }
}

// gate = g sigmoid(z) up: z = g is SiLU, z = 2 sqrt(2/pi) (g + 0.044715 g^3) GELU's tanh form (0.5 g (1 + tanh(u))
// = g sigmoid(2u)).
template <bool kGelu>
__global__ void gated_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float g = gate[i];
        const float z = kGelu ? 1.5957691216057308f * (g + 0.044715f * g * g * g) : g;
        gate[i] = g / (1.0f + expf(-z)) * up[i];
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

}  // namespace

void matmul(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, bool accumulate, cudaStream_t s) {
    with_type(w.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::value;
        const unsigned row_blocks = static_cast<unsigned>((w.rows + kMatmulWarps - 1) / kMatmulWarps);
        if (n_tokens == 1) {
            matmul_kernel<T, 1><<<dim3(row_blocks, 1), kMatmulWarps * kWarp, 0, s>>>(
                w.data, w.row_bytes, w.rows, w.cols, x, n_tokens, y, accumulate);
        } else {
            constexpr int kTile = 8;
            const unsigned tiles = static_cast<unsigned>((n_tokens + kTile - 1) / kTile);
            matmul_kernel<T, kTile><<<dim3(row_blocks, tiles), kMatmulWarps * kWarp, 0, s>>>(
                w.data, w.row_bytes, w.rows, w.cols, x, n_tokens, y, accumulate);
        }
    });
    check(cudaGetLastError(), "the matmul kernel launch");
}

void embed(const DeviceMatrix& emb, const int32_t* tokens, int64_t n_tokens, float scale, float* x, cudaStream_t s) {
    with_type(emb.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::value;
        embed_kernel<T><<<static_cast<unsigned>(n_tokens), 128, 0, s>>>(emb.data, emb.row_bytes, emb.cols, tokens,
                                                                         scale, x);
    });
    check(cudaGetLastError(), "the embedding kernel launch");
}

void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps, cudaStream_t s) {
    rms_norm_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(x, w, y, d, eps);
    check(cudaGetLastError(), "the RMSNorm kernel launch");
}

void rope_angles(const int32_t* pos, const double* inv_freq, int64_t half, int64_t n, float* cs, cudaStream_t s) {
    rope_angles_kernel<<<grid_for(n * half, 256), 256, 0, s>>>(pos, inv_freq, half, n, cs);
    check(cudaGetLastError(), "the RoPE angle kernel launch");
}

void rope_store(float* q, const float* k, const float* v, const float* cs, const int32_t* slots,
                const int32_t* pos, int64_t n, const Heads& heads, const LayerCache& cache, cudaStream_t s) {
    rope_store_kernel<<<static_cast<unsigned>(n), 128, 0, s>>>(q, k, v, cs, slots, pos, heads, cache);
    check(cudaGetLastError(), "the RoPE + KV store kernel launch");
}

void attention(const float* q, const int32_t* slots, const int32_t* pos, int64_t n, const Heads& heads,
               const LayerCache& cache, float scale, int64_t window, float* out, cudaStream_t s) {
    if (heads.head_dim > kAttnThreads * kAttnMaxDimsPerThread) {
        check(cudaErrorInvalidValue, "attention (head_dim above 512)");
    }
    const size_t smem = (static_cast<size_t>(heads.head_dim) + kAttnThreads + 32) * sizeof(float);
    attention_kernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(heads.n_head)), kAttnThreads, smem, s>>>(
        q, slots, pos, heads, cache, scale, window, out);
    check(cudaGetLastError(), "the attention kernel launch");
}

void gated_activation(float* gate, const float* up, int64_t n, bool gelu, cudaStream_t s) {
    if (gelu) gated_kernel<true><<<grid_for(n, 256), 256, 0, s>>>(gate, up, n);
    else gated_kernel<false><<<grid_for(n, 256), 256, 0, s>>>(gate, up, n);
    check(cudaGetLastError(), "the SwiGLU/GeGLU kernel launch");
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
