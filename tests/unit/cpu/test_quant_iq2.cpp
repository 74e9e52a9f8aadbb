// Tests of the 2-bit i-quants IQ2_XXS, IQ2_XS and IQ2_S: quill's dequantizers against ggml's on
// tests/data/quant/<type>.txt (random valid blocks in which every grid index, sign pattern and scale value occurs,
// and the to_float of the llama.cpp that llama-cpp-python 0.3.36 vendors: tests/data/quant/probe_iq2.cpp made them),
// the CPU kernels of every ISA against the dequantized weights, one token alone and in a batch, and tiny models of
// each type on the fast CPU backend against the reference backend.
#include "engine/error.h"
#include "engine/format/quant_iq2.h"
#include "engine/format/quant_random.h"
#include "tests/support/iquant_checks.h"

#include <catch2/catch.hpp>

#include <bit>
#include <iterator>
#include <set>
#include <vector>

namespace test_quant_iq2 {

using namespace quill;

namespace {

constexpr GgmlType kIq2Types[] = {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S};

const uint64_t* grid_of(GgmlType type, size_t& n) {
    switch (type) {
        case GgmlType::IQ2_XXS: n = std::size(kIq2XxsGrid); return kIq2XxsGrid;
        case GgmlType::IQ2_XS: n = std::size(kIq2XsGrid); return kIq2XsGrid;
        default: n = std::size(kIq2SGrid); return kIq2SGrid;
    }
}

}  // namespace

TEST_CASE("quant iq2: quill's dequantizers match ggml's vectors bit for bit", "[quant][iq2]") {
    for (GgmlType type : kIq2Types) test::check_ggml_vector(type);
}

TEST_CASE("quant iq2: the grids hold distinct entries of the magnitudes 8, 25 and 43, the signs an even count",
          "[quant][iq2]") {
    for (GgmlType type : kIq2Types) {
        size_t n = 0;
        const uint64_t* grid = grid_of(type, n);
        INFO(type_name(type));
        CHECK(std::set<uint64_t>(grid, grid + n).size() == n);
        int bad = 0;
        for (size_t i = 0; i < n; ++i) {
            for (int j = 0; j < 8; ++j) {
                const auto g = (grid[i] >> (8 * j)) & 0xFF;
                bad += g != 8 && g != 25 && g != 43;
            }
        }
        CHECK(bad == 0);
    }
    for (uint32_t i = 0; i < 128; ++i) {
        CHECK((iq2_signs(i) & 127) == i);
        CHECK(std::popcount(static_cast<unsigned>(iq2_signs(i))) % 2 == 0);
    }
}

TEST_CASE("quant iq2: random blocks are reproducible, valid and of the asked magnitude", "[quant][iq2]") {
    for (GgmlType type : kIq2Types) test::check_random_blocks(type);
    std::vector<uint8_t> out(64);
    CHECK_FALSE(random_blocks_supported(GgmlType::Q4_0));
    CHECK_THROWS_AS(random_blocks(GgmlType::Q4_0, 1, 1, 1.0f, out.data()), Error);
}

TEST_CASE("quant iq2: each ISA's kernels equal a dot of the dequantized weights with the int8 activations, and a "
          "token's outputs have the same bits alone and in a batch", "[quant][iq2][matmul]") {
    for (GgmlType type : kIq2Types) test::check_kernels(type);
}

TEST_CASE("quant iq2: tiny models of each type run on every ISA as on the reference backend, prefill as decode",
          "[quant][iq2]") {
    for (GgmlType type : kIq2Types) test::check_tiny_model(type);
}

}  // namespace test_quant_iq2
