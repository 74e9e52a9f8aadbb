// Causal attention of one token over its slot's KV cache, in float, with the cache in F16 or F32.
#pragma once

#include "engine/backend.h"
#include "engine/cpu/matmul.h"

#include <cstdint>

namespace quill::cpu {

// Vector primitives over one cache row, per ISA (F16 rows converted in registers where the CPU can).
struct KvOps {
    float (*dot_f16)(const uint16_t* k, const float* q, int n);        // sum k[i] * q[i]
    void (*axpy_f16)(float a, const uint16_t* v, float* out, int n);  // out[i] += a * v[i]
    float (*dot_f32)(const float* k, const float* q, int n);
    void (*axpy_f32)(float a, const float* v, float* out, int n);
};
// The primitives for an ISA; `reference` gives plain scalar loops with fp16_to_fp32 (the oracle).
const KvOps& kv_ops(Isa isa, bool reference);

constexpr int kMaxHeadDim = 512;

struct AttentionArgs {
    const float* q;   // [n_head, head_dim] of this token, RoPE applied
    const void* k;    // [n_kv, n_head_kv, head_dim] this layer's and slot's cache, positions 0..n_kv-1
    const void* v;    // [n_kv, n_head_kv, head_dim]
    KvType kv_type;
    int n_kv;         // positions attended: pos + 1
    int n_head, n_head_kv, head_dim;
    float scale;      // 1 / sqrt(head_dim)
};

// out[h, :] = softmax_j(q_h . k_j * scale) . v_j for heads [head_begin, head_end); scores is scratch [n_kv].
void attend(const AttentionArgs& a, const KvOps& ops, int head_begin, int head_end, float* scores, float* out);

}  // namespace quill::cpu
