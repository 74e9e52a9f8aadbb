// Internal to the CPU matmul: the kernel interface each instruction-set file implements, the int8 activation
// format the quantized kernels share, and small decoding helpers used by every ISA.
//
// Every quantized weight type is multiplied in one "unified" form. A 32-element weight block (a Q4_0 block, a
// Q4_K sub-block, two Q6_K sub-blocks...) is read as unsigned bytes u with
//     w_i = ws_h * (u_i - c) + wm        (h = i / 16, the 16-element half of the block)
// where c is a per-type integer offset (8 for Q4_0, 16 for Q5_0, 128 for Q8_0 read as unsigned, 32 for Q6_K, 0 for
// the types with a float minimum), ws_h the scale of the half and wm a float minimum (Q4_1, Q5_1, Q4_K, Q5_K). With
// an activation block a = da * qa (int8 qa):
//     sum_i w_i a_i = da * sum_h ws_h * sum_{i in h} u_i qa_i  +  (wm - c ws) * (da * sum_i qa_i)
// (per half when the halves' scales differ). The first term runs as u8 x s8 integer dot products (AVX-512 VNNI
// vpdpbusd, AVX2 vpmaddubsw + vpmaddwd); the second needs only ds = da * sum(qa) per block, a float term.
// Kernels that reuse a decoded row tile for many tokens instead flip the roles: signed weights u - c against
// unsigned activations qa + 128, with the 128 * sum(u - c) this adds subtracted per block in the integer domain.
#pragma once

#include <array>
#include <cstdint>
#include <iterator>
#include <cstring>

#include "engine/cpu/matmul.h"
#include "engine/format/quant.h"

#if defined(__FMA__)  // the AVX2 and AVX-512 kernel files
#include <immintrin.h>
#endif

namespace quill::cpu {

// Activations quantized to int8 blocks of 32 (see Activations::Cache). Row t of qs starts at qs + t * qs_stride;
// its block scales at d + t * blk_stride. Rows are zero-padded to qs_stride, a multiple of 64.
struct QuantizedActs {
    int8_t* qs = nullptr;     // [n_tokens, qs_stride]: int8 values
    float* d = nullptr;       // [n_tokens, blk_stride]: block scale da
    float* ds = nullptr;      // [n_tokens, blk_stride]: da * sum of the block's 32 values
    float* ds16 = nullptr;    // [n_tokens, 2 * blk_stride]: da * sum of each 16-element half of a block
    int32_t* isum = nullptr;  // [n_tokens, blk_stride]: sum of the block's 32 int8 values
    uint8_t* qs_u = nullptr;  // [n_tokens, qs_stride]: qs + 128 as unsigned bytes (only for n_tokens > 1)
    // The row-major arrays above are null where only the AMX kernels read the activations (the tile layout alone:
    // Activations::begin_int8), and the AVX-512 quantizer then writes the tile layout only.
    // From kAmxMinTokens tokens on AVX-512 (and AMX): qs, d, ds and isum in groups of 16 tokens (the last group
    // padded with zeros), so that a group's block b is one contiguous A tile: tile_qs [n_groups, nb, 16, 32],
    // and tile_d, tile_ds and tile_isum [n_groups, 2, nb, 8], nb = n_in / 32: the scales of a group's tokens 0-7
    // and 8-15 in lines of their own, so that two threads quantize the two halves of a group without their
    // writes meeting in a cache line (tile_scale_entry). The sixteen-row VNNI tiles read eight tokens' block from
    // one address there (the token-major rows take a register per token and array).
    int8_t* tile_qs = nullptr;
    float* tile_d = nullptr;
    float* tile_ds = nullptr;
    int32_t* tile_isum = nullptr;
    // From kLaneTokens tokens on AVX2: each whole group of eight tokens' blocks as the lane kernels read them,
    // lanes[g * nb + b] for group g's block b (LaneActs), written by the quantization, so that the kernels of every
    // matrix and thread sharing the input do not transpose it again.
    struct LaneActs* lanes = nullptr;
    int64_t n_tokens = 0, n_in = 0;
    int64_t qs_stride = 0, blk_stride = 0;
};

// Tokens per group of the lane layout (QuantizedActs::lanes) and the least that has one.
constexpr int64_t kLaneTokens = 8;
// Block b of eight tokens j: qs[k] holds bytes 4k .. 4k + 3 of each token's block in its 32-bit lane j, then each
// token's scale d, d * sum and sum of the block's values.
struct alignas(32) LaneActs {
    int8_t qs[8][32];
    float d[8], ds[8];
    int32_t isum[8];
};
static_assert(sizeof(LaneActs) == 352);

// Activations as AMX-BF16 B tiles, for the F16 and BF16 weight kernels with AMX (float_rows_amx): each value split
// into `parts` bf16 terms whose sum is exact (three for a float: BF16 weights; two for the value rounded to fp16: F16
// weights). Term p of 32-block b (zeros past n_in) of token group g (width tokens; the last group's missing tokens
// are zeros) is the tile at tiles + ((g * nb + b) * parts + p) * 32 * width: row k holds elements 2k and 2k + 1 of
// every token of the group, as TDPBF16PS reads its second operand.
struct PairActs {
    const uint16_t* tiles = nullptr;
    int64_t n_groups = 0, nb = 0;  // nb = ceil(n_in / 32)
    int parts = 0, width = 0;      // width = min(16, n_tokens)
};

// Everything a kernel needs for one weight matrix: it computes y[t, r] for every token t and rows [r0, r1).
struct KernelArgs {
    const WeightMatrix* w = nullptr;
    const float* x = nullptr;          // [n_tokens, n_in]: float activations (float and fallback kernels)
    const QuantizedActs* q = nullptr;  // int8 activations (quantized kernels)
    const PairActs* pairs = nullptr;   // bf16 tiles (Kernel::pair_acts)
    int64_t n_tokens = 0;
    float* y = nullptr;  // [n_tokens, w->n_out]
};

// scratch: this thread's scratch_floats(n_in, n_tokens) floats, 64-byte aligned.
using RowKernel = void (*)(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch);

// A kernel and the activation form it reads.
struct Kernel {
    RowKernel fn = nullptr;
    bool int8_acts = false;
    bool pair_acts = false;  // PairActs of the input (rounded to fp16 for F16 weights)
    // From kAmxMinTokens tokens on, where the int8 activations have the tile layout, it reads that alone (the AMX
    // kernels), so their row-major form need not be written (Activations::begin_int8).
    bool tiles_alone = false;
};

// How many Isa values there are (WeightMatrix::kernels holds a Kernel for each).
inline constexpr int kIsaCount = static_cast<int>(std::size(kAllIsas));
// The kernel the products pick for w on each Isa, indexed by its value: what WeightStore resolves once per matrix.
std::array<Kernel, kIsaCount> resolve_kernels(const WeightMatrix& w);

// Rows a kernel prefers to be handed together (the AVX-512 sixteen-row tiles; the eight- and four-row kernels take
// two and four); work is split in multiples of this.
constexpr int64_t kRowTile = 16;
// Token groups of the AMX kernels' activations (QuantizedActs::tile_qs), and from how many tokens they run.
constexpr int64_t kAmxGroup = 16;
constexpr int64_t kAmxMinTokens = 8;
// Where token t's block b lies in the tile layout's values: tile_qs + 32 * entry.
inline int64_t tile_entry(const QuantizedActs& q, int64_t t, int64_t b) {
    return (t / kAmxGroup * (q.n_in / 32) + b) * kAmxGroup + t % kAmxGroup;
}
// Tokens in a line of the tile layout's scales: half a group.
constexpr int64_t kTileScaleTokens = 8;
// Where token t's block b lies in the tile layout's scales: tile_d[entry], tile_ds[entry], tile_isum[entry]. Token
// t's half group keeps block b's scales at 8 * b of its own [nb, 8].
inline int64_t tile_scale_entry(const QuantizedActs& q, int64_t t, int64_t b) {
    return (t / kTileScaleTokens * (q.n_in / 32) + b) * kTileScaleTokens + t % kTileScaleTokens;
}
// Floats of per-thread scratch for buffering the outputs of a block of rows (see OutputBlock).
constexpr int64_t kOutputBlockFloats = 16384;
// Per-thread scratch a kernel may use: room for the float minima of a row tile, [kRowTile, n_in / 16 + 16], then
// for a row tile decoded for reuse (up to 3 bytes per weight of four rows, 40 bytes per 32 weights of sixteen; or
// two bf16 terms of each weight of sixteen rows, whole 32-blocks, and a tile of results), then an output block (at
// least kRowTile rows), plus slack for alignment.
constexpr int64_t scratch_floats(int64_t n_in, int64_t n_tokens) {
    const int64_t output_block = kOutputBlockFloats > kRowTile * n_tokens ? kOutputBlockFloats : kRowTile * n_tokens;
    return kRowTile * (n_in / 16 + 16) + kRowTile * n_in + 1024 + output_block + 128;
}

// Quantizes one block of 32 exactly as quantize_row's Q8_0 does: q = round(x / d), half away from zero, with
// d = max|x| / 127 (returned unrounded); sums[h] = the sum of q over the 16-element half h.
using QuantizeBlock = float (*)(const float* x, int8_t* q, int32_t* sums);

// Weight type ids a kernel table covers (GgmlType values below it).
constexpr uint32_t kKernelTypes = 40;
// One instruction set's kernels, indexed by weight type (fn nullptr where it has none): over the file's rows; over
// PackedWeights (packed_amx: with AMX tile multiplies for prefill); the AMX kernels over the file's rows. Each ISA
// folder makes its table once (its table.cpp), each concern file adding its kernels; matmul.cpp's select_kernel
// picks from the tables. Plain arrays: the ISA files use no std:: containers (see the helpers below).
struct KernelTable {
    Kernel rows[kKernelTypes];
    Kernel packed[kKernelTypes];
    Kernel packed_amx[kKernelTypes];
    Kernel amx[kKernelTypes];
};
static_assert(static_cast<uint32_t>(GgmlType::MXFP4) < kKernelTypes);

namespace generic {
const KernelTable& kernel_table();
float quantize_block(const float* x, int8_t* q, int32_t* sums);
// Writes q.lanes (non-null) for tokens [t0, t1) of whole groups of eight (t0 a multiple of eight) and blocks
// [b0, b1) from q's int8 form.
void lay_out_lanes(const QuantizedActs& q, int64_t t0, int64_t t1, int64_t b0, int64_t b1);
// The dequantize-then-float-dot path for any type dequantize_row handles.
Kernel fallback_kernel();
// Contribution of one 32-block `b` of weight row `row` (a 32-block type) to token t: the ISA kernels that step
// 64 elements at a time use it for a trailing odd block.
float block_dot(GgmlType type, const void* row, int64_t b, const QuantizedActs& q, int64_t t);
// Writes tiles [tile0, tile1) of w's PackedWeights form to out (the whole packed buffer), a value at a time: the
// layout avx512::pack_tiles writes with its transposes (IQ4_NL's records are Q4_0's), for machines without AVX-512
// (and for every family the Q5_0 and Q5_1 records: Q4_0's values, then each row's qh word with its bits reordered,
// bit 8i + k the fifth bit of element 4k + i). Q4_K, Q5_K and IQ4_XS tiles are two eight-row halves, each its rows' super-blocks in order, each
// super-block's four-byte groups in order, the eight rows' side by side: bytes o .. o + 3 of row r at 8 o + 4 r (for
// each 16-byte chunk the four vectors the AVX2 kernels' transpose of eight rows makes of it). Q6_K tiles are four
// quads of four rows (kQ6QuadBytes), Q3_K and Q2_K tiles two eight-row halves of kQ3SuperBytes and kQ2SuperBytes
// super-blocks. This is the
// layout the AVX-512 families read, and the AVX2 kernels but for the types of pack_avx2_tiles.
void pack_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1);
// Writes tiles [tile0, tile1) of the layouts the AVX2 kernels alone read: Q6_K's eight-row halves
// (kQ6EightSuperBytes); false for the other types, whose AVX2 layout is pack_tiles'.
bool pack_avx2_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1);
}  // namespace generic
namespace avx2 {
// rows and packed (PackedWeights of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, Q3_K and Q2_K, the
// last two also for the AVX-512 families, which have no Q3_K or Q2_K kernels of their own); empty in a
// build without AVX2.
// Call only where the CPU has AVX2.
const KernelTable& kernel_table();
float quantize_block(const float* x, int8_t* q, int32_t* sums);  // the generic one in a build without AVX2
// quantize_activations' and quantize_activation_blocks' work with quantize_block's results (the same bytes and
// floats), eight blocks at a time; false in a build without AVX2.
bool quantize_rows(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out);
bool quantize_blocks(const float* x, int64_t n_in, int64_t t0, int64_t t1, int64_t b0, int64_t b1,
                     const QuantizedActs& out);
void lay_out_lanes(const QuantizedActs& q, int64_t t0, int64_t t1, int64_t b0, int64_t b1);  // generic's, in vectors
}
namespace avx512 {
// rows, packed and packed_amx, and amx (empty where the compiler could not build the AMX kernels); empty in a build
// without AVX-512. Call only where the CPU has AVX-512.
const KernelTable& kernel_table();
// quantize_activations' work with the same results (the same bytes and floats), sixteen blocks at a time; false
// when the build has no AVX-512.
bool quantize_rows(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out);
// quantize_activation_blocks' work the same way.
bool quantize_blocks(const float* x, int64_t n_in, int64_t t0, int64_t t1, int64_t b0, int64_t b1,
                     const QuantizedActs& out);
// Greedy sampling's search of logits x in one pass: *first the first index of the largest of x[0, n_search) (NaN
// never the largest, -0 equal to +0, as first_max), *finite whether all of x[0, n) are finite (n_search <= n);
// false when the build has no AVX-512.
bool greedy_search(const float* x, int64_t n_search, int64_t n, int64_t* first, bool* finite);
// False when the compiler could not build the AMX kernels.
bool amx_built();
// Writes tiles [tile0, tile1) of w's PackedWeights form to out (the whole packed buffer); false when the build has
// no AVX-512.
bool pack_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1);
// Writes token groups [g0, g1) of the PairActs of x [n_tokens, n_in] (shape given by `shape`, fp16-rounded first
// when f16) to `tiles`; false when the build has no AMX kernels.
bool pair_tiles(const float* x, int64_t n_tokens, int64_t n_in, bool f16, const PairActs& shape, uint16_t* tiles,
                int64_t g0, int64_t g1);
}

// Bytes of one record of PackedWeights (a 32-block of sixteen rows: the values in lanes, for Q5_0 and Q5_1 then the
// sixteen rows' 32-bit qh words, then sixteen fp16 scales and, for Q4_1 and Q5_1, sixteen fp16 minima); 0 for a type
// without a packed form. Q4_K, Q5_K, IQ4_XS and Q6_K keep a super-block's bytes, re-laid out (generic::pack_tiles,
// read by the AVX2 and the AVX-512 kernels), so their records are nominal: a 32nd of sixteen rows' super-blocks.
constexpr int64_t packed_record_bytes(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_K:
            return 16 * 144 / 8;
        case GgmlType::Q5_K:
            return 16 * 176 / 8;
        case GgmlType::IQ4_XS:
            return 16 * 136 / 8;
        case GgmlType::Q6_K:
            return 16 * 210 / 8;
        case GgmlType::Q3_K:  // kQ3SuperBytes: 114 bytes a row's super-block
            return 16 * 114 / 8;
        case GgmlType::Q2_K:
            return 16 * 84 / 8;
        case GgmlType::Q4_0:
        case GgmlType::IQ4_NL:  // Q4_0's records: its nibbles (looked up in the levels by the kernels) and its d
            return 16 * 16 + 32;
        case GgmlType::Q4_1:
            return 16 * 16 + 64;
        case GgmlType::Q5_0:
            return 16 * 16 + 64 + 32;
        case GgmlType::Q5_1:
            return 16 * 16 + 64 + 64;
        case GgmlType::Q8_0:
            return 16 * 32 + 32;
        default:
            return 0;
    }
}

// For tests: replaces the avx512 family's kernels over the file's rows with table's (nullptr restores the built-in
// ones), and makes isa_available(Isa::avx512) true on a CPU with AVX2, so that tests/support/avx512_emulated.cpp (the
// AVX-512 kernel files built on SIMDe's portable AVX-512) runs the AVX-512 kernels' code on machines without
// AVX-512. best_isa() keeps to what the hardware has.
void set_avx512_kernels(const KernelTable* table);

// Packed Q6_K (generic::pack_tiles): each sixteen-row tile is four quads of four rows (rows 4i .. 4i + 3 of the tile,
// the quads one after the other), each quad its super-blocks in order, each super-block of the quad kQ6QuadBytes:
// for each 128-element half h, the four 16-byte chunks c of ql[64 h ..] and then the two of qh[32 h ..], each as 64
// bytes holding the chunk of row r at 16 r (the vectors the four-row kernels load from four rows: lane r, row r);
// then the quad's scales (row r's sixteen at 16 r) and its four fp16 d.
constexpr int64_t kQ6HalfBytes = 6 * 64;                     // a half's ql and qh chunks
constexpr int64_t kQ6ScalesAt = 2 * kQ6HalfBytes;            // [4][16] int8
constexpr int64_t kQ6DAt = kQ6ScalesAt + 64;                 // [4] fp16
constexpr int64_t kQ6QuadBytes = kQ6DAt + 8;                 // four rows' super-blocks
static_assert(kQ6QuadBytes == 4 * static_cast<int64_t>(sizeof(BlockQ6_K)));

// Packed Q6_K for the AVX2 kernels (generic::pack_avx2_tiles): each sixteen-row tile is two eight-row halves, each its
// rows' super-blocks in order, each super-block of the half kQ6EightSuperBytes: for each 32-block j, six 32-byte
// vectors X0..X5 whose byte 4 r + i holds, for row r, the 6-bit values u_k (q + 32) of the block's elements 4 k + i,
// k = 0..7: X_k = u_k | (two bits of u6 or u7) << 6, u6's bits 0-1, 2-3, 4-5 in X0, X1, X2 and u7's in X3, X4, X5
// (u0..u5 a mask each, u6 and u7 three shifts and masks); then the sixteen signed scales as [16][8] (row r's scale i
// at 8 i + r) and the eight rows' fp16 d.
constexpr int64_t kQ6EightBlockBytes = 6 * 32;                      // a 32-block's X0..X5
constexpr int64_t kQ6EightScalesAt = 8 * kQ6EightBlockBytes;        // [16][8] int8
constexpr int64_t kQ6EightDAt = kQ6EightScalesAt + 128;             // [8] fp16
constexpr int64_t kQ6EightSuperBytes = kQ6EightDAt + 16;            // eight rows' super-blocks
static_assert(kQ6EightSuperBytes == 8 * static_cast<int64_t>(sizeof(BlockQ6_K)));

// Packed Q3_K (generic::pack_tiles; read by the AVX2 kernel on every x86 ISA): each sixteen-row tile is two eight-row
// halves, each its rows' super-blocks in order, each super-block of the half kQ3SuperBytes: for each 32-block j,
// three 32-byte vectors X0, X1, X2 whose byte 4 r + i holds, for row r, the 3-bit values u_k (the two bits of qs plus
// 4 for the hmask bit) of the block's elements 4 k + i, k = 0..7: X0 = u0 | u1 << 3 | (u2 & 3) << 6,
// X1 = u3 | u4 << 3 | (u5 & 3) << 6, X2 = u6 | u7 << 3 | (u2 >> 2) << 6 | (u5 >> 2) << 7 (each u_k a mask, or a
// shift and a mask, or two of each away); then the sixteen signed scales (q3_k_scale) as [16][8] (row r's scale i at
// 8 i + r) and the eight rows' fp16 d.
constexpr int64_t kQ3BlockBytes = 3 * 32;                 // a 32-block's X0, X1, X2
constexpr int64_t kQ3ScalesAt = 8 * kQ3BlockBytes;        // [16][8] int8
constexpr int64_t kQ3DAt = kQ3ScalesAt + 128;             // [8] fp16
constexpr int64_t kQ3SuperBytes = kQ3DAt + 16;            // eight rows' super-blocks
static_assert(kQ3SuperBytes == 8 * 114 && 114 == sizeof(BlockQ3_K) + 4);

// Packed Q2_K (generic::pack_tiles; read by the AVX2 kernel on every x86 ISA): each sixteen-row tile is two eight-row
// halves, each its rows' super-blocks in order, each super-block of the half kQ2SuperBytes: for each 32-block j, two
// 32-byte vectors X0, X1 whose byte 4 r + i holds, for row r, the 2-bit values u_k of the block's elements 4 k + i:
// X0 = u0 | u1 << 2 | u2 << 4 | u3 << 6, X1 = u4 | u5 << 2 | u6 << 4 | u7 << 6; then the sixteen scale bytes as the
// file has them (sc in the low nibble, m in the high) as [16][8] (row r's byte i at 8 i + r), the eight rows' fp16 d
// and their fp16 dmin.
constexpr int64_t kQ2BlockBytes = 2 * 32;               // a 32-block's X0, X1
constexpr int64_t kQ2ScalesAt = 8 * kQ2BlockBytes;      // [16][8] bytes
constexpr int64_t kQ2DAt = kQ2ScalesAt + 128;           // [8] fp16
constexpr int64_t kQ2DminAt = kQ2DAt + 16;              // [8] fp16
constexpr int64_t kQ2SuperBytes = kQ2DminAt + 16;       // eight rows' super-blocks
static_assert(kQ2SuperBytes == 8 * static_cast<int64_t>(sizeof(BlockQ2_K)));

// Quantizes token rows [t0, t1) of x [n_tokens, n_in] into the buffers behind `out` (its strides set; qs_u may be
// null), and into the tile layout when out.tile_qs is set (its padding tokens are not written). Kernels only read
// through a QuantizedActs.
void quantize_activations(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out,
                          QuantizeBlock quantize_block);
// Blocks [b0, b1) of those rows only: what quantize_activations writes for them, without the rows' padding.
void quantize_activation_blocks(const float* x, int64_t n_in, int64_t t0, int64_t t1, int64_t b0, int64_t b1,
                                const QuantizedActs& out, QuantizeBlock quantize_block);

// ---- helpers shared by the kernel files ----
// These have internal linkage on purpose: the ISA files are compiled with -mavx2 / -mavx512*, and an inline
// function with external linkage would be merged across files, so the baseline files could end up running a copy
// compiled for AVX-512. For the same reason the ISA files use no std:: containers and no fmt.
namespace {

// Blocks [b0, b0 + n) of token t into the tile layout's scales: their d, ds and isum, in block order.
inline void write_tile_scales(const QuantizedActs& out, int64_t t, int64_t b0, int n, const float* d, const float* ds,
                              const int32_t* isum) {
    for (int i = 0; i < n; ++i) {
        const int64_t e = tile_scale_entry(out, t, b0 + i);
        out.tile_d[e] = d[i];
        out.tile_ds[e] = ds[i];
        out.tile_isum[e] = isum[i];
    }
}

// Token t's row padding in `out`: zero values past its nb blocks (0x80 in the unsigned copy), zero scales and sums.
inline void write_row_padding(const QuantizedActs& out, int64_t t, int64_t nb) {
    if (out.qs == nullptr) return;  // (the tile layout alone: its padding is zero_tile_padding's)
    for (int64_t i = 32 * nb; i < out.qs_stride; ++i) {
        out.qs[t * out.qs_stride + i] = 0;
        if (out.qs_u != nullptr) out.qs_u[t * out.qs_stride + i] = 0x80;
    }
    for (int64_t b = nb; b < out.blk_stride; ++b) {
        const int64_t at = t * out.blk_stride + b;
        out.d[at] = out.ds[at] = out.ds16[2 * at] = out.ds16[2 * at + 1] = 0.0f;
        out.isum[at] = 0;
    }
}

// An ISA's quantize_rows from its quantize_blocks: every block of tokens [t0, t1), then their rows' padding.
template <typename Blocks>
inline bool quantize_rows_by_blocks(Blocks&& blocks, const float* x, int64_t n_in, int64_t t0, int64_t t1,
                                    const QuantizedActs& out) {
    const int64_t nb = n_in / 32;
    blocks(x, n_in, t0, t1, 0, nb, out);
    for (int64_t t = t0; t < t1; ++t) write_row_padding(out, t, nb);
    return true;
}

// A kernel table's entry for `type` (kernels: one of KernelTable's arrays), for the ISA files that fill it.
inline Kernel& entry(Kernel (&kernels)[kKernelTypes], GgmlType type) { return kernels[static_cast<uint32_t>(type)]; }

template <typename T>
inline T load_unaligned(const void* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// The outputs of a block of consecutive rows [r0, r0 + n_rows) for every token, collected as [n_rows, n_tokens]
// and then written to y [n_tokens, n_out] token by token. Writing each row tile's outputs straight to y would
// store a few floats n_out apart for every token: with n_out a multiple of 1024 those all fall in one L1 set.
struct OutputBlock {
    float* buf;  // [n_rows, n_tokens]
    int64_t n_tokens, r0, n_rows;

    // Rows per block for n_tokens tokens: as many as fit kOutputBlockFloats, a multiple of kRowTile, at most 64.
    static int64_t rows_for(int64_t n_tokens) {
        const int64_t rows = kOutputBlockFloats / n_tokens / kRowTile * kRowTile;
        return rows < kRowTile ? kRowTile : rows > 64 ? 64 : rows;
    }
    float& at(int64_t r, int64_t t) { return buf[(r - r0) * n_tokens + t]; }
    void flush(float* y, int64_t n_out) const {
        for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t i = 0; i < n_rows; ++i) y[t * n_out + r0 + i] = buf[i * n_tokens + t];
        }
    }
};

#if defined(__FMA__)
// Adds the 32-block minima of a repacked row tile to rows [r, r + nr) of the block, for every token: wm [nb, 4]
// (element i: row r + i) dotted with each token's block sums ds, one fma per block in block order, exactly as the
// decode tiles' minima accumulate (batch invariance); eight tokens' chains side by side, so they do not wait on one.
inline void add_block_minima(OutputBlock& block, const float* wm, const QuantizedActs& q, int64_t nb, int64_t r,
                             int nr) {
    auto add = [&]<int T>(int64_t t) {
        __m128 acc[T];
        for (int j = 0; j < T; ++j) acc[j] = _mm_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const __m128 w = _mm_loadu_ps(wm + 4 * b);
            for (int j = 0; j < T; ++j)
                acc[j] = _mm_fmadd_ps(w, _mm_set1_ps(q.ds[(t + j) * q.blk_stride + b]), acc[j]);
        }
        alignas(16) float mins[T][4];
        for (int j = 0; j < T; ++j) _mm_store_ps(mins[j], acc[j]);
        for (int i = 0; i < nr; ++i)
            for (int j = 0; j < T; ++j) block.at(r + i, t + j) += mins[j][i];
    };
    int64_t t = 0;
    for (; t + 8 <= block.n_tokens; t += 8) add.template operator()<8>(t);
    for (; t < block.n_tokens; ++t) add.template operator()<1>(t);
}
#endif

// Where super-block g's sixteen Q6_K scales and its fp16 d lie for each of four rows: in the file's rows, or in a quad
// of packed Q6_K (kQ6QuadBytes).
struct Q6Heads {
    const uint8_t* scales[4];
    const uint8_t* d[4];
    static Q6Heads of_rows(const uint8_t* const rows[4], int64_t g) {
        Q6Heads h;
        for (int r = 0; r < 4; ++r) {
            h.scales[r] = rows[r] + g * static_cast<int64_t>(sizeof(BlockQ6_K)) + offsetof(BlockQ6_K, scales);
            h.d[r] = rows[r] + g * static_cast<int64_t>(sizeof(BlockQ6_K)) + offsetof(BlockQ6_K, d);
        }
        return h;
    }
    static Q6Heads of_quad(const uint8_t* quad, int64_t g) {
        Q6Heads h;
        for (int r = 0; r < 4; ++r) {
            h.scales[r] = quad + g * kQ6QuadBytes + kQ6ScalesAt + 16 * r;
            h.d[r] = quad + g * kQ6QuadBytes + kQ6DAt + 2 * r;
        }
        return h;
    }
};

#if defined(__FMA__)
// The 4 rows of a quad of packed Q6_K, decoded by P (an ISA's PackedQ6_K) as a four-row kernel walks them (its Tile),
// the stream of quads prefetched into L2 Ahead bytes on, a step's share of lines at a time.
template <typename P, int64_t Ahead>
struct PackedQ6Tile {
    static constexpr int64_t kStepBytes = kQ6QuadBytes / P::kGroupSteps;
    const uint8_t* quad;
    typename P::State st;  // written by begin_group before a step reads it

    // Rows [r, r + 4) of w's packed form (r a multiple of 4).
    static PackedQ6Tile at(const WeightMatrix& w, int64_t r, int) {
        PackedQ6Tile tile;
        tile.quad = static_cast<const uint8_t*>(w.packed) + r / 4 * (w.n_in / 256) * kQ6QuadBytes;
        return tile;
    }
    void begin_group(int64_t g) { P::load_group(quad, g, st); }
    auto step(int64_t g, int k) {
        const int64_t s = g * P::kGroupSteps + k;
        for (int64_t o = s * kStepBytes / 64 * 64; o < (s + 1) * kStepBytes; o += 64)
            _mm_prefetch(reinterpret_cast<const char*>(quad + Ahead + o), _MM_HINT_T1);
        return P::step(quad, g, k, st);
    }
};
#endif

// IEEE half to float without a table (used where F16C is not available).
inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000 | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else {
        // zero or subnormal: mant * 2^-24
        const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
        std::memcpy(&bits, &f, sizeof(bits));
        bits |= sign;
    }
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

// The eight 6-bit scales and eight 6-bit mins of a Q4_K / Q5_K block, each as bytes (same values as
// get_scale_min_k4 for j = 0..7, computed four at a time).
inline void unpack_k4_scales(const uint8_t* scales, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t w[3];
    std::memcpy(w, scales, 12);
    const uint32_t low6 = 0x3F3F3F3F, low4 = 0x0F0F0F0F, top2 = 0x03030303;
    const uint32_t sc_lo = w[0] & low6;                                         // sc[0..3]: q[0..3] & 63
    const uint32_t mn_lo = w[1] & low6;                                         // m[0..3]: q[4..7] & 63
    const uint32_t sc_hi = (w[2] & low4) | (((w[0] >> 6) & top2) << 4);         // sc[4..7]
    const uint32_t mn_hi = ((w[2] >> 4) & low4) | (((w[1] >> 6) & top2) << 4);  // m[4..7]
    std::memcpy(sc, &sc_lo, 4);
    std::memcpy(sc + 4, &sc_hi, 4);
    std::memcpy(mn, &mn_lo, 4);
    std::memcpy(mn + 4, &mn_hi, 4);
}

// The signed 6-bit scale j (0..15) of a Q3_K block: low nibble in bytes 0..7 (j < 8: low nibbles, else high),
// top two bits in byte 8 + j % 4 at bit 2 (j / 4); stored with an offset of 32.
inline int q3_k_scale(const uint8_t* scales, int j) {
    const int low = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
}

}  // namespace

}  // namespace quill::cpu
