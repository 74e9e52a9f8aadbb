// Tests of the 1-bit i-quants IQ1_S and IQ1_M: quill's dequantizers against ggml's on tests/data/quant/<type>.txt
// (random valid blocks in which every grid index, scale value and delta sign occurs, and the to_float of the
// llama.cpp that llama-cpp-python 0.3.36 vendors: tests/data/quant/probe_iq1.cpp made them), the CPU kernels of every
// ISA against the dequantized weights, one token alone and in a batch, and tiny models of each type on the fast CPU
// backend against the reference backend (the checks of tests/support/iquant_checks.h), and the grid.
#include "engine/format/quant_iq1.h"
#include "tests/support/iquant_checks.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <iterator>
#include <set>
#include <vector>

namespace test_quant_iq1 {

using namespace quill;

namespace {

constexpr GgmlType kIq1Types[] = {GgmlType::IQ1_S, GgmlType::IQ1_M};

}  // namespace

TEST_CASE("quant iq1: quill's dequantizers match ggml's vectors bit for bit", "[quant][iq1]") {
    for (GgmlType type : kIq1Types) test::check_ggml_vector(type);
}

TEST_CASE("quant iq1: the grid holds 2048 distinct entries of the levels -1, 0, 1, and its nibble form the same",
          "[quant][iq1]") {
    CHECK(std::set<uint64_t>(std::begin(kIq1Grid), std::end(kIq1Grid)).size() == 2048);
    int bad = 0, moved = 0;
    for (size_t i = 0; i < 2048; ++i) {
        for (int j = 0; j < 8; ++j) {
            const auto g = static_cast<int8_t>((kIq1Grid[i] >> (8 * j)) & 0xFF);
            bad += g < -1 || g > 1;
            const uint32_t nibble = (kIq1Grid4[i] >> (j < 4 ? 8 * j : 8 * (j - 4) + 4)) & 0xF;
            moved += static_cast<int>(nibble) != g + 1;
        }
    }
    CHECK(bad == 0);
    CHECK(moved == 0);
}

TEST_CASE("quant iq1: random blocks are reproducible, valid and of the asked magnitude", "[quant][iq1]") {
    for (GgmlType type : kIq1Types) test::check_random_blocks(type);
}

TEST_CASE("quant iq1: each ISA's kernels equal a dot of the dequantized weights with the int8 activations, and a "
          "token's outputs have the same bits alone and in a batch", "[quant][iq1][matmul]") {
    for (GgmlType type : kIq1Types) test::check_kernels(type);
}

TEST_CASE("quant iq1: tiny models of each type run on every ISA as on the reference backend, prefill as decode",
          "[quant][iq1]") {
    for (GgmlType type : kIq1Types) test::check_tiny_model(type);
}

}  // namespace test_quant_iq1
