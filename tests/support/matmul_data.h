// Random weight matrices and activations for the CPU kernel tests (tests/unit/cpu/test_matmul.cpp,
// test_activations.cpp).
#pragma once

#include "engine/cpu/matmul.h"
#include "engine/format/quant.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace quill::test {

// A weight matrix built from random floats with quantize_row, and its dequantized values.
struct TestMatrix {
    GgmlType type;
    int64_t n_out, n_in;
    std::vector<uint8_t> data;  // [n_out, row_bytes]
    std::vector<float> deq;     // [n_out, n_in]: what the reference multiplies
    cpu::WeightMatrix view() const { return {type, data.data(), n_in, n_out, row_size(type, n_in)}; }
};

inline TestMatrix make_matrix(GgmlType type, int64_t n_out, int64_t n_in, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    TestMatrix m{type, n_out, n_in, {}, {}};
    const size_t rb = row_size(type, n_in);
    m.data.resize(rb * static_cast<size_t>(n_out));
    m.deq.resize(static_cast<size_t>(n_out * n_in));
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_out; ++r) {
        // Rows of different magnitude, with a mean offset so that minima and offsets matter.
        const float scale = 0.02f + uniform(rng), mean = 0.3f * (uniform(rng) - 0.5f);
        for (float& v : row) v = scale * (normal(rng) + mean);
        quantize_row(type, row.data(), m.data.data() + rb * static_cast<size_t>(r), n_in);
        dequantize_row(type, m.data.data() + rb * static_cast<size_t>(r), m.deq.data() + r * n_in, n_in);
    }
    return m;
}

// Activations like a transformer's: mostly N(0.2, 1), a few large outliers, never all zero.
inline std::vector<float> make_input(int64_t n_tokens, int64_t n_in, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.2f, 1.0f);
    std::uniform_int_distribution<int> outlier(0, 63);
    std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
    for (float& v : x) v = outlier(rng) == 0 ? 12.0f * normal(rng) : normal(rng);
    return x;
}

// An output buffer of NaNs, so that a result the kernels never wrote shows.
inline std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

}  // namespace quill::test
