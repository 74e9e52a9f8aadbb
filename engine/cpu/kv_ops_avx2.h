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

}  // namespace quill::cpu::avx2
