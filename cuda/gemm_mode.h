// How the CUDA backend runs products of many tokens (prefill). Host-only header, no CUDA includes.
#pragma once

#include <string>

namespace quill::cuda {

// off: quill's own matmul kernel (float, the decode kernel taking tokens in tiles of 8). f32: cuBLAS in float (the
// kernel's function, another summation order). tf32: inputs rounded to TF32 (10-bit mantissa, float range) on the
// tensor cores, float sums. f16: weights and activations rounded to F16 on the tensor cores, float sums (twice
// TF32's rate; an activation beyond F16's range becomes inf, which the forward pass's finiteness check reports).
enum class GemmMode { off, f32, tf32, f16 };

// "off", "f32", "tf32", "f16"; parse_gemm_mode throws UsageError for anything else.
const char* gemm_mode_name(GemmMode m);
GemmMode parse_gemm_mode(const std::string& s);

}  // namespace quill::cuda
