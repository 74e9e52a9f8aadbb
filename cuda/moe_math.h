// The arithmetic of gpt-oss's experts (cuda/moe.cu), in code that compiles both for the GPU (nvcc) and for the host,
// so that tests/unit/cuda/host/ checks it against the CPU backend's on machines without a GPU (as cuda/attn_math.h).
#pragma once

#include "cuda/dequant.h"  // QUILL_HD

#include <cmath>

namespace quill::cuda {

// gpt-oss's clamped SwiGLU of a gate and an up value (biases added): g' / (1 + e^(-alpha g')) * (u' + 1), g' =
// min(g, limit), u' = clamp(u, -limit, limit), in float as the CPU backend's swiglu_oai (engine/cpu/moe.cpp). The
// comparisons are std::min's and std::clamp's, so that a NaN stays NaN (and the layer's check names it).
QUILL_HD float swiglu_oai(float g, float u, float alpha, float limit) {
    const float gc = limit < g ? limit : g;
    const float uc = u < -limit ? -limit : (limit < u ? limit : u);
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(gc, __fadd_rn(1.0f, expf(__fmul_rn(alpha, -gc)))) * __fadd_rn(uc, 1.0f);
#else
    return gc / (1.0f + std::exp(alpha * -gc)) * (uc + 1.0f);
#endif
}

}  // namespace quill::cuda
