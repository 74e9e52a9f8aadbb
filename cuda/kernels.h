// The CUDA kernels of the forward pass, behind host functions that launch them on a stream and check the launch
// (defined in matmul.cu, matmul_mma.cu, norm_rope.cu, attention.cu, elementwise.cu and select.cu: each file its
// kernels, then their launchers). Pointers are device memory. Shapes follow the CPU backend
// (engine/cpu/cpu_backend.cpp), the oracle they are tested against: activations are float rows [n_tokens, width],
// weights are GGUF rows in their block formats.
#pragma once

#include "engine/format/quant.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace quill {
struct ModelConfig;  // engine/model/model_config.h
}

namespace quill::cuda {

// A weight matrix on the device: `rows` rows of `cols` elements, each row `row_bytes` bytes of `type` blocks. In
// the packed layout (Q4_0, Q4_1, Q8_0; cuda/dequant.h) `data` is the plane of every block's quants and `scales` the
// plane of their scales; else `scales` is null and `data` holds the GGUF rows.
struct DeviceMatrix {
    GgmlType type = GgmlType::F32;
    const uint8_t* data = nullptr;
    int64_t cols = 0, rows = 0;
    size_t row_bytes = 0;
    const uint8_t* scales = nullptr;
};

// Up to three matrices multiplied with one input in one launch (Q, K and V; gate and up): the same type, width
// and layout (can_share_launch). row_end[i]: the rows of matrices 0..i together (past count: the total).
struct ProductSet {
    DeviceMatrix w[3];
    float* y[3] = {nullptr, nullptr, nullptr};
    int64_t row_end[3] = {0, 0, 0};
    int count = 0;
    void add(const DeviceMatrix& m, float* out);  // QUILL_CHECK: at most three, all alike
};
bool can_share_launch(const DeviceMatrix& a, const DeviceMatrix& b);
ProductSet product_set(const DeviceMatrix& w, float* y);

// y[t, r] = sum_k W[r, k] x[t, k] for t < n_tokens (y += that when accumulate). x [n_tokens, cols] must be
// 16-byte aligned, y [n_tokens, rows].
void matmul(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, bool accumulate, cudaStream_t s);
// Each matrix of the set times x into its output, in one launch.
void matmul(const ProductSet& ps, const float* x, int64_t n_tokens, bool accumulate, cudaStream_t s);

// The activations of matmul_q8: each block of 32 of x [n, cols] quantized as the CPU backend does
// (cpu::generic::quantize_block: d = max|x| / 127, q = round(x / d), half away from zero, clamped to +-127), the
// scale kept rounded to fp16: q [n, cols] int8 and ds [n, cols / 32] pairs (d, d * sum of the block's q). cols is a
// multiple of 32; q and ds 16-byte aligned.
// pdl, here and in the kernels of a decode step's chain below (the norm, RoPE + K/V store, attention, activation):
// launched as a programmatic dependent (sm_90 or later; ignored below), which waits for the kernel before it to
// finish and then lets the next kernel launch, so that the next one's blocks are on the multiprocessors when it
// finishes.
void quantize_q8(const float* x, int64_t n, int64_t cols, int8_t* q, float* ds, cudaStream_t s, bool pdl = false);

// How matmul_q8 multiplies (the same bits every way; tests/unit/cuda/test_cuda.cpp compares them).
struct Q8Launch {
    // More than eight tokens (sequences decoding together): four rows a warp, each token's quantized block loaded
    // once for the four (Tuning::fused_kernels); else one row a warp, eight tokens at a time.
    bool rows_kernel = false;
    // Eight tokens or fewer, weights in the packed layout and rows a multiple of 1024 wide (stream_takes): a kernel
    // that streams the weights through a ring in shared memory with cp.async, a persistent grid (matmul.cu says
    // why; tests/bench/HISTORY.md has what it measured against the register kernel).
    bool stream = false;
    int stream_blocks = 0;  // > 0: caps its persistent grid (tests: many rows a warp)
    int stream_stages = 0;  // its ring's stages: 2, 3, 4, 6 or 8 (0: kStreamStagesDefault)
    // More than eight tokens, weights in the packed layout, sm_80 or later (mma_takes): int8 mma on the tensor
    // cores, 16 rows and 32 tokens a block of 32 warps (the same bits as the dp4a kernels; matmul_mma.cu;
    // Tuning::mma_products).
    bool mma = false;
    // The mma kernel that stages each round's token side in shared memory (matmul_mma.cu; not yet run on a GPU).
    bool mma_staged = false;
    // Launched as a programmatic dependent (sm_90): the streamed kernel fetches its first chunks of weights, the
    // one-row-a-warp kernel (1 to 8 tokens) brings its first blocks into L2, while the kernel before it (a norm, the
    // attention or the activation, which let it start early) finishes; each waits for that kernel before it reads
    // the input, then lets the next kernel launch.
    bool pdl = false;
};
constexpr int kStreamStagesDefault = 3;  // the fastest of the stage counts tried (matmul.cu)

// y[t, r] = sum over blocks of W's block times x's quantized block (y += when accumulate), for a type that
// uses_q8: four int8 products a dp4a instruction, the block scales applied to each block's integer sum.
void matmul_q8(const DeviceMatrix& w, const int8_t* q, const float* ds, int64_t n_tokens, float* y, bool accumulate,
               cudaStream_t s, const Q8Launch& how = {});
void matmul_q8(const ProductSet& ps, const int8_t* q, const float* ds, int64_t n_tokens, bool accumulate,
               cudaStream_t s, const Q8Launch& how = {});
bool stream_takes(const ProductSet& ps, int64_t n_tokens);
bool mma_takes(const ProductSet& ps, int64_t n_tokens);
// Whether the device takes programmatic dependent launches (Q8Launch::pdl): sm_90 or later.
bool pdl_supported();
// Asks the device once what the mma kernel needs (outside graph capture).
void prepare_mma_products();
// Asks the device once what the streamed kernel's grid needs at that many stages (0: kStreamStagesDefault; not a
// stream operation: call outside graph capture).
void prepare_stream_products(int stages);

// Rows r0 <= r < r1 of w, decoded, to out [r1 - r0, w.cols]: float, or F16 when to_f16 (the GEMM's inputs).
void dequantize_rows(const DeviceMatrix& w, int64_t r0, int64_t r1, bool to_f16, void* out, cudaStream_t s);

// out[i] = x[i] rounded to F16, n elements.
void float_to_f16(const float* x, int64_t n, void* out, cudaStream_t s);

// x[t] = row tokens[t] of the embedding matrix, decoded to float, times scale: x [n_tokens, emb.cols].
void embed(const DeviceMatrix& emb, const int32_t* tokens, int64_t n_tokens, float scale, float* x, cudaStream_t s);

// y = x / sqrt(mean(x^2) + eps) * w, for n rows of d (y may be x).
void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps, cudaStream_t s);
// The same, and (q not null; d a multiple of 32) y quantized as quantize_q8 does, and (flag not null) *flag =
// min(*flag, layer) when x holds inf or NaN: the input checks and quantization of the products that follow, in the
// norm's launch. y is bit for bit rms_norm's.
void rms_norm_q8(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps, int8_t* q, float* ds,
                 int32_t* flag, int32_t layer, cudaStream_t s, bool pdl = false);

// The KV cache of one layer: element (slot, pos, e) is at slot * slot_stride + pos * row + e, row = n_head_kv *
// head_dim, in f16 or f32.
struct LayerCache {
    void* k = nullptr;
    void* v = nullptr;
    bool f16 = true;
    int64_t slot_stride = 0;  // elements per slot: n_ctx * row
};

// The attention heads of a layer and its per-architecture settings (layer_heads reads them from ModelConfig).
struct Heads {
    int n_head = 0, n_head_kv = 0, head_dim = 0;
    int n_rot = 0;      // the rotated dims of each head; 0: no RoPE (smollm3's no-RoPE layers)
    bool neox = false;  // RoPE pairs (x[i], x[i + n_rot/2]) instead of (x[2i], x[2i+1]) (ModelConfig::Rope)
    // mistral3's attention temperature: rope_store multiplies the queries of a token at pos by
    // query_temperature(pos, temp_scale, temp_floor) after RoPE (cuda/attn_math.h); temp_scale 0: no scaling.
    float temp_scale = 0.0f;
    int64_t temp_floor = 0;
    // gemma2: attention's scores soft-capped, softcap * tanh(score / softcap), before the softmax; 0: none.
    float softcap = 0.0f;
    // gpt-oss: each head's attention sink [n_head] on the device, a logit that joins the softmax's max and
    // denominator without a value; nullptr: none (the forward call sets it from the layer's weights).
    const float* sinks = nullptr;
};
// Layer `layer`'s heads: the model's shape and RoPE layout, n_rot 0 on a layer without RoPE
// (ModelConfig::layer_has_rope), the attention temperature and the scores' soft-cap (defined in cuda_backend.cpp).
Heads layer_heads(const ModelConfig& c, int64_t layer);

// cs[t, i] = (cos, sin) of pos[t] * inv_freq[i], each times mscale (ModelConfig::rope_mscale), for t < n, i < half:
// the angles rope_store takes, computed in double and rounded to float as the CPU backend does.
void rope_angles(const int32_t* pos, const double* inv_freq, int64_t half, int64_t n, double mscale, float* cs,
                 cudaStream_t s);

// Rotates q [n, n_head * head_dim] in place and stores rotated k and v [n, n_head_kv * head_dim] at each token's
// (slot, pos) of the cache. cs [n, n_rot / 2, 2] holds cos and sin of each token's angles; rotation is of pair i of
// each head's first n_rot dims (adjacent or NEOX, heads.neox), as the CPU backend does; then every dim of q is
// multiplied by the token's attention temperature (heads.temp_scale).
void rope_store(float* q, const float* k, const float* v, const float* cs, const int32_t* slots,
                const int32_t* pos, int64_t n, const Heads& heads, const LayerCache& cache, cudaStream_t s,
                bool pdl = false);

// out[t, h] = softmax(cap(q[t, h] . K[slot_t, j0..pos_t] * scale)) V[slot_t, j0..pos_t] for every token and head,
// cap(s) = s, or heads.softcap * tanh(s / heads.softcap) when it is set (capped_score, cuda/attn_math.h), with
// grouped-query heads (head h reads KV head h / (n_head / n_head_kv)); j0 = 0, or with a sliding window > 0
// max(0, pos_t - window + 1); with heads.sinks, head h's sink joins the softmax as a key of no value. head_dim <=
// 512.
// flash: the queries in tiles on the tensor cores (flash_attention_takes: an f16 cache and head_dim a multiple of 16
// up to 128; else ignored), each K and V row read once per tile of 64 query rows, the query and the probabilities
// rounded to f16 as the reference backend does with an f16 cache; meant for prompts. Tokens of a tile whose first
// token has another slot, and every token without flash, go one block per (token, head), keys one per thread.
// q_out, ds_out (not with flash; head_dim a multiple of 32): out also quantized as quantize_q8 does, in the same
// launch.
void attention(const float* q, const int32_t* slots, const int32_t* pos, int64_t n, const Heads& heads,
               const LayerCache& cache, float scale, int64_t window, float* out, cudaStream_t s, bool flash = false,
               int8_t* q_out = nullptr, float* ds_out = nullptr, bool pdl = false);
bool flash_attention_takes(const Heads& heads, const LayerCache& cache);

// gate = act(gate) * up, n elements: act SiLU, or GELU in its tanh form when gelu.
void gated_activation(float* gate, const float* up, int64_t n, bool gelu, cudaStream_t s);
// The same (bit for bit), the result also quantized as quantize_q8 does (n a multiple of 32).
void gated_activation_q8(float* gate, const float* up, int64_t n, bool gelu, int8_t* q, float* ds, cudaStream_t s,
                         bool pdl = false);

// x[t, i] += b[i] for n rows of d.
void add_rows(float* x, const float* b, int64_t n, int64_t d, cudaStream_t s);
// x[i] += y[i], n elements.
void add(float* x, const float* y, int64_t n, cudaStream_t s);
// x = cap * tanh(x / cap), n elements.
void softcap(float* x, int64_t n, float cap, cudaStream_t s);

// y[i] = x[rows[i]] for i < m, rows of d floats.
void gather_rows(const float* x, const int32_t* rows, int64_t m, int64_t d, float* y, cudaStream_t s);

// out[r] = the index of the first maximum of x[r, 0..n) for r < m, rows `stride` floats apart (greedy sampling).
void argmax_rows(const float* x, int64_t m, int64_t stride, int64_t n, int32_t* out, cudaStream_t s);

// The most candidates top_candidates takes per row.
constexpr int32_t kMaxTopCandidates = 512;
// For r < m: the need[r] (at most kMaxTopCandidates, and at most the row) largest of x[r, 0..n_row), rows `stride`
// floats apart, values past n_ids taken as -inf, ties broken towards the lower index (Sampler::sample_top's
// candidates), written in no particular order to ids[r * kMaxTopCandidates ..] and vals[r * kMaxTopCandidates ..].
void top_candidates(const float* x, int64_t m, int64_t stride, int64_t n_row, int64_t n_ids, const int32_t* need,
                    int32_t* ids, float* vals, cudaStream_t s);

// *flag = min(*flag, layer) when any of x[0..n) is inf or NaN.
void check_finite(const float* x, int64_t n, int32_t layer, int32_t* flag, cudaStream_t s);

}  // namespace quill::cuda
