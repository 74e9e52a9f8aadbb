// Attention over the KV cache: one block per (token, head) for decode (keys in chunks, an online softmax), and
// flash-attention tiles on the tensor cores (WMMA) for prompts with an f16 cache.
#include "cuda/attn_math.h"
#include "cuda/common.cuh"

#include <mma.h>

#include <climits>
#include <cstdint>

namespace quill::cuda {

namespace {

__device__ __forceinline__ float load_kv(const void* base, size_t i, bool f16) {
    return f16 ? __half2float(static_cast<const __half*>(base)[i]) : static_cast<const float*>(base)[i];
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
    // A sink starts the softmax as a key of score sinks[head] and no value: e^0 in the sum, its score the max.
    float m = h.sinks != nullptr ? h.sinks[head] : -INFINITY, l = h.sinks != nullptr ? 1.0f : 0.0f;
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
                if (lane == 0 && jj < len)
                    sp[jj] = h.softcap > 0.0f ? capped_score(sum * scale, h.softcap) : sum * scale;
            }
        }
        __syncthreads();
        const float sc = tid < len ? sp[tid] : -INFINITY;
        const float chunk_max = block_reduce<true>(sc, scratch);  // finite: key c0 is always in range
        const float new_m = fmaxf(m, chunk_max);
        const float f = expf(m - new_m);  // 0 on the first chunk without a sink (m = -inf)
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
        // a sink: the row's softmax starts at its score, e^0 in the sum (no value), as attention_kernel's
        const bool sink = h.sinks != nullptr && p_last >= 0;
        sm[i] = sink ? h.sinks[kv_head * group + static_cast<int>(rho % group)] : -INFINITY;
        sl[i] = sink ? 1.0f : 0.0f;
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
        // Online softmax: two lanes a row, 32 keys each; each lane first turns its scores into scaled (and
        // soft-capped) ones in place.
        {
            const int r = r0 + lane / 2, j_begin = (lane % 2) * (kFaKeys / 2);
            const int p_last = last[r], p_first = first[r];
            float cmax = -INFINITY;
            for (int j = j_begin; j < j_begin + kFaKeys / 2; ++j) {
                const int key = k0 + j;
                if (key >= p_first && key <= p_last) {
                    float& sj = ss[r * L.lds + j];
                    sj = h.softcap > 0.0f ? capped_score(sj * scale, h.softcap) : sj * scale;
                    cmax = fmaxf(cmax, sj);
                }
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
                    pj = __float2half_rn(expf(ss[r * L.lds + j] - m_new));
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

}  // namespace

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

}  // namespace quill::cuda
