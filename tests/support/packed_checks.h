// The check that the packed kernels give the bits of the kernels over the file's rows and the reference dot products,
// for the packed-type tests (tests/unit/cpu/test_packed_q3k.cpp, test_packed_iq4nl.cpp, test_packed_q6k.cpp).
#pragma once

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "engine/cpu/matmul.h"
#include "tests/support/matmul_data.h"
#include "tests/support/test_util.h"

namespace quill::test {

// For each token count, random activations through m's file rows and through m's packed form for each isa (packed
// with the last pool) on that isa and every pool: the same bits, and the reference dot products within the int8
// scales' fp16 rounding (2^-11 relative) and float rounding.
inline void check_packed_products(const TestMatrix& m, std::initializer_list<int64_t> token_counts,
                                  const std::vector<cpu::Isa>& isas, std::span<cpu::ThreadPool> pools,
                                  std::mt19937& rng) {
    const int64_t n_out = m.n_out, n_in = m.n_in;
    std::vector<PackedTestMatrix> packs;
    packs.reserve(isas.size());
    for (cpu::Isa isa : isas) packs.emplace_back(m, isa, &pools.back());
    for (int64_t n_tokens : token_counts) {
        const std::vector<float> x = make_input(n_tokens, n_in, rng);
        const std::vector<float> xq = cpu::reference_activations(m.type, x.data(), n_tokens, n_in);
        std::vector<float> ref(static_cast<size_t>(n_tokens * n_out));
        cpu::matmul_reference(m.view(), xq.data(), n_tokens, ref.data());
        const std::vector<double> size = abs_products(m, xq, n_tokens);
        for (size_t i = 0; i < isas.size(); ++i) {
            const cpu::Isa isa = isas[i];
            const PackedTestMatrix& packed = packs[i];
            for (cpu::ThreadPool& pool : pools) {
                INFO(fmt::format("{}x{} tokens {} isa {} threads {}", n_out, n_in, n_tokens, cpu::isa_name(isa),
                                 pool.size()));
                const std::vector<float> file = product(m.view(), x, n_tokens, pool, isa);
                const std::vector<float> y = product(packed.view, x, n_tokens, pool, isa);
                CHECK(std::memcmp(y.data(), file.data(), y.size() * sizeof(float)) == 0);
                size_t bad = 0, first_bad = 0;
                for (size_t at = 0; at < y.size(); ++at) {
                    const double err = std::fabs(static_cast<double>(y[at]) - ref[at]);
                    if (!(err <= size[at] / 2048.0 + 1e-5 * size[at] + 1e-6) && bad++ == 0) first_bad = at;
                }
                INFO(fmt::format("output {}: {} against the reference's {}", first_bad, y[first_bad], ref[first_bad]));
                CHECK(bad == 0);
            }
        }
    }
}

// check_packed_products for the matrices of the super-block types' eight-row halves that make(n_out, n_in) returns:
// ragged tiles and halves (45, 7, 21 rows), one super-block and many, every token path (decode of 1 to 3 tokens,
// the tiles decoded once from 4, the AVX-512 families' chunks), on every ISA with packed kernels (none: a skip).
template <typename Make>
void check_packed_halves(GgmlType type, Make&& make, std::mt19937& rng) {
    const std::vector<cpu::Isa> isas = packed_isas();
    if (isas.empty()) return skip_no_device("no AVX2 here: the packed kernels cannot run");
    for (cpu::Isa isa : isas) {
        INFO(cpu::isa_name(isa));
        REQUIRE(cpu::PackedWeights::supports(type, isa));
    }
    cpu::ThreadPool pools[] = {cpu::ThreadPool(1), cpu::ThreadPool(3)};
    for (auto [n_out, n_in] : {std::pair<int64_t, int64_t>{45, 768}, {7, 256}, {21, 2816}})
        check_packed_products(make(n_out, n_in), {1, 2, 3, 4, 5, 8, 9, 16, 17, 40}, isas, pools, rng);
}

}  // namespace quill::test
