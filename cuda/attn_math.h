// The per-architecture arithmetic of the attention kernels (norm_rope.cu, attention.cu), in code that compiles both
// for the GPU (nvcc) and for the host (any C++ compiler), so that tests/unit/cuda/host/ checks it against the CPU
// backend's on machines without a GPU, as cuda/dequant.h does for the weight blocks.
#pragma once

#include "cuda/dequant.h"  // QUILL_HD

#include <cmath>
#include <cstdint>

namespace quill::cuda {

// mistral3's attention temperature, the factor of the queries of a token at `pos`: 1 + scale * log(floor(pos /
// floor) + 1), in double and then rounded to float as the CPU backend does (ModelConfig::attn_temp); scale 0: 1.
QUILL_HD float query_temperature(int64_t pos, float scale, int64_t floor_len) {
    if (scale == 0.0f) return 1.0f;
    // (::log and ::floor: the C library's on the host, CUDA's in device code)
    return static_cast<float>(
        1.0 + static_cast<double>(scale) *
                  ::log(::floor(static_cast<double>(pos) / static_cast<double>(floor_len)) + 1.0));
}

// gemma2's soft-capped attention score: cap * tanh(s / cap), in float as the CPU backend's softcap_scores.
QUILL_HD float capped_score(float s, float cap) {
#if defined(__CUDA_ARCH__)
    return cap * tanhf(s / cap);
#else
    return cap * std::tanh(s / cap);
#endif
}

// RoPE's cosine or sine of an angle, times the magnitude scale (ModelConfig::rope_mscale: YaRN's, phi3's attention
// factor) in double and then rounded to float, as the CPU backend's angle table.
QUILL_HD float scaled_rope_term(double cos_or_sin, double mscale) { return static_cast<float>(cos_or_sin * mscale); }

}  // namespace quill::cuda
