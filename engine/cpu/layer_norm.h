// LayerNorm without bias (command-r, cohere2: ModelConfig::layer_norm), in plain loops that every kernel family
// shares: the norm of a row is a small part of a block's work beside its products.
#pragma once

#include <cstdint>

namespace quill::cpu {

// y = (x - mean(x)) / sqrt(var(x) + eps) * w for each of the n rows of d values of x (y may be x); w [d]. The sums
// in double, as llama.cpp's norm sums the row in double.
void layer_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps);

}  // namespace quill::cpu
