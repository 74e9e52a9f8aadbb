#include "engine/cpu/layer_norm.h"

#include <cmath>

namespace quill::cpu {

void layer_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps) {
    for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * d;
        float* yr = y + r * d;
        double sum = 0.0;
        for (int64_t i = 0; i < d; ++i) sum += xr[i];
        const auto mean = static_cast<float>(sum / static_cast<double>(d));
        double var = 0.0;
        for (int64_t i = 0; i < d; ++i) {
            const float v = xr[i] - mean;
            var += static_cast<double>(v) * v;
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(var / static_cast<double>(d)) + eps);
        for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mean) * scale * w[i];
    }
}

}  // namespace quill::cpu
