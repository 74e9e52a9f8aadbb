// The products of decode: one warp per weight row. The float kernel (every weight type); for Q4_0, Q4_1 and Q8_0
// int8 dot products (dp4a) with the input quantized per block of 32 as on the CPU: one row a warp, four rows a warp
// for more than eight tokens, and the weights streamed through shared memory (cp.async) for up to eight. Many
// decode tokens take the tensor cores (matmul_mma.cu), prompts cuBLAS (cuda/gemm.h). A decode step's time goes
// mostly to the int8 products, which stay short of the copy bandwidth; tests/bench/HISTORY.md has the device
// profiles, kernel by kernel.
#include "cuda/matmul.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace quill::cuda {

namespace {

// ---- matmul: one warp per weight row, a tile of NT tokens per block row ----

constexpr int kMatmulWarps = 4;

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

// Brings [p, p + bytes) into L2, lane l taking its lines l, l + 32, ... (a hint: no data moves to the warp).
__device__ __forceinline__ void prefetch_l2(const uint8_t* p, int64_t bytes, int lane) {
    const auto at = reinterpret_cast<uintptr_t>(p);
    const uintptr_t first = at & ~uintptr_t{127}, end = at + bytes;
    for (uintptr_t a = first + 128 * lane; a < end; a += 128 * kWarp)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a));
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

// ---- decode products streamed through shared memory (Q4_0, Q4_1, Q8_0 in the packed layout, cols % 1024 == 0) ----
//
// The register kernels above hold the bytes on their way in registers, and registers cap the warps a
// multiprocessor runs, and a decode step's products stayed well short of the copy bandwidth (a four-rows-a-warp
// form with more loads a warp ran slower still, its 128 registers a thread cutting the resident warps to 16). Here
// each warp streams its rows' chunks (a block a lane: 32 blocks, 576 bytes of Q4_0) into a ring of S stages in
// shared memory with cp.async, which holds no registers while the bytes are on their way, so S - 1 chunks a warp
// stay in flight, and the grid is persistent (a warp takes rows gw, gw + W, ... of the product set). Each lane sums
// its blocks l, l + 32, ... of a row in order and the warp adds the lanes as matmul_q8_kernel does, with the same
// operations: the same bits (tests/unit/cuda/test_cuda.cpp, every S).
// A warp steps its (row, chunk) as counters: found by 64-bit divisions, they kept the multiprocessors busy issuing
// instructions and the DRAM far from busy. Of the ring's stage counts tried (2, 3, 4, 8), 3 ran fastest
// (kStreamStagesDefault), and Q8_0 ran faster on the register kernel at every count, so only Q4_0 and Q4_1 stream
// (Tuning::stream_types). Fewer chunks in flight ran faster, so bytes in flight are not what limits it;
// why is not measured (the shared memory the ring takes from the L1 that holds the input is one candidate). The
// measurements, run by run: tests/bench/HISTORY.md.
// S: the ring's stages (Q8Launch::stream_stages).

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

// ---- launchers' helpers ----

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

void prepare_stream_products(int stages) {
    multiprocessors();
    with_stages(stages > 0 ? stages : kStreamStagesDefault, [](auto st) {
        prepare_stream<GgmlType::Q4_0, decltype(st)::value>();
        prepare_stream<GgmlType::Q4_1, decltype(st)::value>();
        prepare_stream<GgmlType::Q8_0, decltype(st)::value>();
    });
}

bool pdl_supported() { return device_major() >= 9; }

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
        matmul_q8_mma(ps, q, xds, n_tokens, accumulate, s, how.mma_staged);
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

}  // namespace quill::cuda
