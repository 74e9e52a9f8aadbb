// Random weight matrices and activations for the CPU kernel tests (tests/unit/cpu/test_matmul.cpp,
// test_activations.cpp, test_packed_quants.cpp, test_packed_iq4nl.cpp).
#pragma once

#include "engine/cpu/matmul.h"
#include "engine/format/quant.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

// n_out rows of random blocks of Q6_K, IQ4_XS or IQ4_NL: every byte random but each block's d, a random fp16 in
// [2^-12, 2^-5) (finite, so that the products are): every bit pattern of the values and scales, not only what the
// quantizer makes.
inline TestMatrix random_blocks(GgmlType type, int64_t n_out, int64_t n_in, std::mt19937& rng) {
    TestMatrix m{type, n_out, n_in, {}, {}};
    const size_t rb = row_size(type, n_in), block = row_size(type, type_traits(type).block_size);
    m.data.resize(rb * static_cast<size_t>(n_out));
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> exponent(-12.0f, -5.0f);
    for (uint8_t& b : m.data) b = static_cast<uint8_t>(byte(rng));
    const size_t d_at = type == GgmlType::Q6_K     ? offsetof(BlockQ6_K, d)
                        : type == GgmlType::IQ4_XS ? offsetof(BlockIq4Xs, d)
                                                   : offsetof(BlockIq4Nl, d);
    for (size_t at = 0; at < m.data.size(); at += block) {
        const uint16_t d = fp32_to_fp16(std::exp2(exponent(rng)));
        std::memcpy(m.data.data() + at + d_at, &d, 2);
    }
    m.deq.resize(static_cast<size_t>(n_out * n_in));
    for (int64_t r = 0; r < n_out; ++r)
        dequantize_row(type, m.data.data() + rb * static_cast<size_t>(r), m.deq.data() + r * n_in, n_in);
    return m;
}

// y [n_tokens, n_out] = x W^T on isa (threads from pool), into a poisoned buffer.
inline std::vector<float> product(const cpu::WeightMatrix& w, const std::vector<float>& x, int64_t n_tokens,
                                  cpu::ThreadPool& pool, cpu::Isa isa) {
    cpu::Activations act;
    act.set(x.data(), n_tokens, w.n_in);
    std::vector<float> y = poisoned(static_cast<size_t>(n_tokens * w.n_out));
    cpu::matmul(w, act, y.data(), pool, isa);
    return y;
}

// sum_i |w[r][i] x[t][i]| for each output [n_tokens, n_out] of m against x [n_tokens, n_in]: the size of a dot
// product's rounding.
inline std::vector<double> abs_products(const TestMatrix& m, const std::vector<float>& x, int64_t n_tokens) {
    std::vector<double> out(static_cast<size_t>(n_tokens * m.n_out), 0.0);
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < m.n_out; ++r)
            for (int64_t i = 0; i < m.n_in; ++i)
                out[static_cast<size_t>(t * m.n_out + r)] +=
                    std::fabs(static_cast<double>(m.deq[r * m.n_in + i]) * x[t * m.n_in + i]);
    return out;
}

// m's packed form for isa (PackedWeights) and a view of m that reads it, whose file data are zeros: only kernels
// that read the packed form give m's results through it.
struct PackedTestMatrix {
    cpu::PackedWeights packed;
    std::vector<uint8_t> zeros;
    cpu::WeightMatrix view;
    PackedTestMatrix(const TestMatrix& m, cpu::Isa isa, cpu::ThreadPool* pool)
        : packed(m.view(), isa, pool), zeros(m.data.size(), 0), view(packed.reading(m.view())) {
        view.data = zeros.data();
    }
};

// The families whose packed kernels run here (the AVX-512 ones natively, not emulated).
inline std::vector<cpu::Isa> packed_isas() {
    std::vector<cpu::Isa> isas;
    for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::amx}) {
        if (cpu::isa_available(isa) && !(isa >= cpu::Isa::avx512 && cpu::avx512_emulated())) isas.push_back(isa);
    }
    return isas;
}

}  // namespace quill::test
