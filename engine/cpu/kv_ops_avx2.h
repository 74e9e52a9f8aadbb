// AVX2 + F16C primitives for attention over the KV cache (compiled with -mavx2 -mfma -mf16c; call only when the
// CPU has them). Shapes as in KvOps (attention.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace quill::cpu::avx2 {

void scores_f16(const uint16_t* k, size_t stride, const float* q, int head_dim, int n_kv, float* scores);
void scores_f32(const float* k, size_t stride, const float* q, int head_dim, int n_kv, float* scores);
void mix_f16(const float* p, const uint16_t* v, size_t stride, int head_dim, int n_kv, float* out);
void mix_f32(const float* p, const float* v, size_t stride, int head_dim, int n_kv, float* out);
void round_f16(float* x, int n);
void to_f16(const float* x, uint16_t* y, int n);
// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i], with exp8 (kv_ops_avx2.cpp) for e^x.
void swiglu(float* gate, const float* up, int64_t n);
// gate = gelu_tanh(gate) * up
void geglu(float* gate, const float* up, int64_t n);

// Attention of n_q query heads of one token that share one KV head (1 <= n_q <= 8) over positions [0, n_kv):
// out[g] = softmax_j(q[g] . k_j * scale) v_j, head_dim a multiple of 8. With the F16 cache q is rounded to fp16
// first, and the probabilities before they meet V. The heads share each K and V row's conversion; every head's
// result is computed by the same operations in the same order whatever n_q is, so it does not depend on which
// heads or tokens share a call (batch invariance). scores: scratch [n_q, n_kv].
void attend_heads_f16(const float* const* q, int n_q, const uint16_t* k, const uint16_t* v, size_t stride,
                      int head_dim, int n_kv, float scale, float* scores, float* const* out);
void attend_heads_f32(const float* const* q, int n_q, const float* k, const float* v, size_t stride, int head_dim,
                      int n_kv, float scale, float* scores, float* const* out);

}  // namespace quill::cpu::avx2
