// What the product kernels of matmul.cu (float, dp4a, streamed) and matmul_mma.cu (int8 mma) share: the rows of a
// product set, a weight row's int8 blocks and their dot with a quantized input block (the same operations in every
// kernel, so the same bits), cp.async, and the dispatch over the int8 types. Included by those two files only.
#pragma once

#include "cuda/common.cuh"

#include <cstdint>
#include <type_traits>

namespace quill::cuda {

// The matrix of a product set that global row `rg` falls in, and the row within it.
__device__ __forceinline__ int set_member(const ProductSet& ps, int64_t rg, int64_t& r) {
    const int i = rg < ps.row_end[0] ? 0 : rg < ps.row_end[1] ? 1 : 2;
    r = rg - (i == 0 ? 0 : ps.row_end[i - 1]);
    return i;
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


// Copies of 16 bytes from global to shared memory that hold no registers on their way (sm_80), and their groups.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const auto at = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(at), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// f(std::integral_constant<GgmlType, T>) for the int8 product types Q4_0, Q4_1 and Q8_0 (t one of them: uses_q8).
template <class F>
void with_int8_type(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::Q4_0: f(std::integral_constant<GgmlType, GgmlType::Q4_0>{}); break;
        case GgmlType::Q4_1: f(std::integral_constant<GgmlType, GgmlType::Q4_1>{}); break;
        default: f(std::integral_constant<GgmlType, GgmlType::Q8_0>{}); break;
    }
}

// The int8 products of more than eight tokens on the tensor cores (matmul_q8 with Q8Launch::mma when mma_takes;
// staged: Q8Launch::mma_staged), in matmul_mma.cu.
void matmul_q8_mma(const ProductSet& ps, const int8_t* q, const float2* xds, int64_t n_tokens, bool accumulate,
                   cudaStream_t s, bool staged);

}  // namespace quill::cuda
