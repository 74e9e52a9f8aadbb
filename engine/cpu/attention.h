// Causal attention of one token over its slot's KV cache, in float, with the cache in F16 or F32.
#pragma once

#include "engine/runtime/backend.h"
#include "engine/cpu/matmul.h"

#include <cstddef>
#include <cstdint>

namespace quill::cpu {

constexpr int kMaxHeadDim = 512;
// Query heads attended together when they share a KV head (attend's scratch holds this many rows of scores).
constexpr int kMaxGroupHeads = 8;

// Row primitives over one head's cache, per ISA. K and V rows of consecutive positions are `stride` elements apart.
struct KvOps {
    // scores[j] = k_j . q for j < n_kv
    void (*scores_f16)(const uint16_t* k, size_t stride, const float* q, int head_dim, int n_kv, float* scores);
    void (*scores_f32)(const float* k, size_t stride, const float* q, int head_dim, int n_kv, float* scores);
    // out = sum_j p[j] v_j
    void (*mix_f16)(const float* p, const uint16_t* v, size_t stride, int head_dim, int n_kv, float* out);
    void (*mix_f32)(const float* p, const float* v, size_t stride, int head_dim, int n_kv, float* out);
    void (*round_f16)(float* x, int n);                // x = fp16(x), in float
    void (*to_f16)(const float* x, uint16_t* y, int n);  // y = fp16 bits of x
    // Whole attention of up to kMaxGroupHeads heads sharing a KV head (see kv_ops_avx2.h), for head_dim % 8 == 0;
    // nullptr where the ISA has none (attend then goes head by head through the primitives above).
    void (*attend_heads_f16)(const float* const* q, int n_q, const uint16_t* k, const uint16_t* v, size_t stride,
                             int head_dim, int n_kv, float scale, float* scores, float* const* out);
    void (*attend_heads_f32)(const float* const* q, int n_q, const float* k, const float* v, size_t stride,
                             int head_dim, int n_kv, float scale, float* scores, float* const* out);
    // gate = silu(gate) * up elementwise (the FFN's activation; here because it shares the vector exp)
    void (*swiglu)(float* gate, const float* up, int64_t n);
    // gate = gelu(gate) * up, GELU in its tanh form (gemma3's FFN)
    void (*geglu)(float* gate, const float* up, int64_t n);
};
// The primitives for an ISA; `reference` gives plain scalar loops with the scalar fp16 conversions (the oracle).
const KvOps& kv_ops(Isa isa, bool reference);

struct AttentionArgs {
    const float* q;   // [n_head, head_dim] of this token, RoPE applied
    const void* k;    // [n_kv, n_head_kv, head_dim] this layer's and slot's cache from the first visible position
    const void* v;    // [n_kv, n_head_kv, head_dim]
    KvType kv_type;
    int n_kv;         // positions attended: pos + 1 - the first visible one
    int n_head, n_head_kv, head_dim;
    float scale;      // ModelConfig::attn_scale
};

// out[h, :] = softmax_j(q_h . k_j * scale) . v_j for heads [head_begin, head_end); scores is scratch
// [kMaxGroupHeads, n_kv]. A head's result does not depend on the range it is computed in.
// With an F16 cache both products take F16 inputs with F32 accumulation, as GPU attention kernels (and the
// reference implementation) do: q and the probabilities are rounded to F16 before they meet K and V.
void attend(const AttentionArgs& a, const KvOps& ops, int head_begin, int head_end, float* scores, float* out);

}  // namespace quill::cpu
