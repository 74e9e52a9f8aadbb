// The packed forms of Q6_K and IQ4_XS (PackedWeights) on every ISA this CPU runs: the packed kernels against the
// reference dot products on random blocks (every bit pattern of the values and scales, not only what the quantizer
// makes), and against the portable kernel to float rounding.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul.h"
#include "engine/format/quant.h"
#include "tests/support/matmul_data.h"
#include "tests/support/test_util.h"

namespace test_packed_quants {

using namespace quill;
using namespace quill::cpu;
using quill::test::make_input;
using quill::test::packed_isas;
using quill::test::product;
using quill::test::random_blocks;
using quill::test::TestMatrix;

TEST_CASE("packed Q6_K and IQ4_XS kernels equal the reference dot products on random blocks on every ISA",
          "[matmul]") {
    const std::vector<Isa> isas = packed_isas();
    if (isas.empty()) return quill::test::skip_no_device("no AVX2 here: the packed kernels cannot run");
    for (Isa isa : isas) {
        INFO(isa_name(isa));
        REQUIRE(PackedWeights::supports(GgmlType::Q6_K, isa));
        REQUIRE(PackedWeights::supports(GgmlType::IQ4_XS, isa));
    }
    std::mt19937 rng(5406);
    ThreadPool pools[] = {ThreadPool(1), ThreadPool(3)};
    for (GgmlType type : {GgmlType::Q6_K, GgmlType::IQ4_XS}) {
        // Ragged tiles and quads (45, 7, 18 rows), one super-block and many.
        for (auto [n_out, n_in] : {std::pair<int64_t, int64_t>{45, 768}, {7, 256}, {18, 2816}}) {
            const TestMatrix m = random_blocks(type, n_out, n_in, rng);
            // Packed for each family (Q6_K's layouts differ), each view's file data zeros, so that only kernels
            // that read the packed form give m's results.
            std::vector<quill::test::PackedTestMatrix> packs;
            for (Isa isa : isas) {
                const quill::test::PackedTestMatrix& packed = packs.emplace_back(m, isa, &pools[1]);
                REQUIRE(packed.packed.bytes() == static_cast<size_t>((n_out + 15) / 16 * 16) * row_size(type, n_in));
            }
            // Every path: decode of 1 to 7 tokens, the repacked tiles, one whole group of the tile layout (16), and
            // passes with tokens left over.
            for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 9, 13, 16, 17, 40}) {
                const std::vector<float> x = make_input(n_tokens, n_in, rng);
                // The reference over the activations the kernels multiply (int8 blocks), in double.
                const std::vector<float> xq = reference_activations(type, x.data(), n_tokens, n_in);
                std::vector<float> ref(static_cast<size_t>(n_tokens * n_out));
                matmul_reference(m.view(), xq.data(), n_tokens, ref.data());
                const std::vector<float> portable = product(m.view(), x, n_tokens, pools[0], Isa::generic);
                for (size_t p = 0; p < isas.size(); ++p) {
                    const Isa isa = isas[p];
                    const WeightMatrix& packed_view = packs[p].view;
                    for (ThreadPool& pool : pools) {
                        INFO(fmt::format("{} {}x{} tokens {} isa {} threads {}", type_name(type), n_out, n_in,
                                         n_tokens, isa_name(isa), pool.size()));
                        const std::vector<float> y = product(packed_view, x, n_tokens, pool, isa);
                        size_t bad = 0, off = 0, first_bad = 0, first_off = 0;
                        for (int64_t t = 0; t < n_tokens; ++t) {
                            for (int64_t r = 0; r < n_out; ++r) {
                                double abs_wx = 0.0;
                                for (int64_t i = 0; i < n_in; ++i)
                                    abs_wx += std::fabs(static_cast<double>(m.deq[r * n_in + i]) * xq[t * n_in + i]);
                                const auto at = static_cast<size_t>(t * n_out + r);
                                // Float rounding alone against the portable kernel (the same int8 products); the
                                // reference's int8 scales are rounded to fp16 (2^-11 relative) besides.
                                const double rounding = 1e-5 * abs_wx + 1e-6;
                                if (!(std::fabs(static_cast<double>(y[at]) - portable[at]) <= rounding) && off++ == 0)
                                    first_off = at;
                                if (!(std::fabs(static_cast<double>(y[at]) - ref[at]) <= abs_wx / 2048.0 + rounding) &&
                                    bad++ == 0)
                                    first_bad = at;
                            }
                        }
                        INFO(fmt::format("output {}: {} against the reference's {}", first_bad, y[first_bad],
                                         ref[first_bad]));
                        CHECK(bad == 0);
                        INFO(fmt::format("output {}: {} against the portable kernel's {}", first_off, y[first_off],
                                         portable[first_off]));
                        CHECK(off == 0);
                    }
                }
            }
        }
    }
}

}  // namespace test_packed_quants
