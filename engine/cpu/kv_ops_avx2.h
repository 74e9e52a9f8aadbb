// AVX2 + F16C primitives for attention over the KV cache (compiled with -mavx2 -mfma -mf16c; call only when the
// CPU has them).
#pragma once

#include <cstdint>

namespace quill::cpu {

float dot_f16_avx2(const uint16_t* k, const float* q, int n);
void axpy_f16_avx2(float a, const uint16_t* v, float* out, int n);
float dot_f32_avx2(const float* k, const float* q, int n);
void axpy_f32_avx2(float a, const float* v, float* out, int n);

}  // namespace quill::cpu
