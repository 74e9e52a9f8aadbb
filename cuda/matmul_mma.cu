// The int8 products of many decode tokens (sequences decoding together) on the tensor cores: mma.m16n8k32 on
// packed Q4_0, Q4_1 and Q8_0 weights, the same bits as the dp4a kernels of matmul.cu; and its form with the tokens
// staged in shared memory (not yet run on a GPU: Q8Launch::mma_staged).
#include "cuda/matmul.cuh"

#include <cstdint>
#include <type_traits>

namespace quill::cuda {

namespace {

// ---- many decode tokens on the tensor cores (int8 mma; packed Q4_0, Q4_1, Q8_0) ----
//
// The dp4a kernels above give (row, token) the sum of 32 lane partials, lane l adding its blocks l, l + 32, ... in
// order (q8_block_value of each block's integer sum), then the warp's butterfly (warp_sum). Here a block of 32 warps
// takes 16 rows and kMmaTokens tokens: warp c plays lane c, taking blocks c, c + 32, ... in order; each block's
// integer sums for 16 rows x 8 tokens come from one mma.m16n8k32 (exact int32, as dp4a's), then the same
// q8_block_value and additions; the 32 partials of a (row, token) meet in shared memory and are added in
// warp_sum's tree. The same bits as the one-token kernels, so a sequence's result does not depend on its batch.
// Its parity tests check that; it is faster than the dp4a kernels from 16 tokens on (Tuning::mma_products).
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

// ---- launchers' helpers ----

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

bool device_sm80() { return device_major() >= 8; }

}  // namespace

void prepare_mma_products() {
    if (!device_sm80()) return;
    mma_ready<GgmlType::Q4_0>();
    mma_ready<GgmlType::Q4_1>();
    mma_ready<GgmlType::Q8_0>();
}

bool mma_takes(const ProductSet& ps, int64_t n_tokens) {
    return uses_q8(ps.w[0].type) && ps.w[0].scales != nullptr && n_tokens > 8 && device_sm80();
}

void matmul_q8_mma(const ProductSet& ps, const int8_t* q, const float2* xds, int64_t n_tokens, bool accumulate,
                   cudaStream_t s, bool staged) {
    const dim3 grid(static_cast<unsigned>((n_tokens + kMmaTokens - 1) / kMmaTokens),
                    static_cast<unsigned>((ps.row_end[2] + kMmaRows - 1) / kMmaRows));
    with_int8_type(ps.w[0].type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::value;
        mma_ready<T>();
        if (staged)
            matmul_q8_mma_staged_kernel<T><<<grid, kMmaWarps * kWarp, kMmaStagedSmem, s>>>(ps, q, xds, n_tokens,
                                                                                        accumulate);
        else
            matmul_q8_mma_kernel<T><<<grid, kMmaWarps * kWarp, kMmaSmem, s>>>(ps, q, xds, n_tokens, accumulate);
    });
    check(cudaGetLastError(), "the int8 mma matmul kernel launch");
}

}  // namespace quill::cuda
