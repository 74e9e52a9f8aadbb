// Q6_K's packed form for the AVX2 kernels (PackedWeights packed for Isa::avx2: eight-row halves of six-bit values in
// lanes, kQ6EightSuperBytes) beside the AVX-512 families' quads: its bytes against the file's blocks, each family's
// kernel reading only its own layout, and the AVX2 eight-row kernel against the four-row kernel over the file's rows
// (the same bits) and the reference dot products, on random blocks, ragged tiles and every token path.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul.h"
#include "engine/format/quant.h"
#include "tests/support/matmul_data.h"
#include "tests/support/packed_checks.h"
#include "tests/support/test_util.h"

namespace test_packed_q6k_avx2 {

using namespace quill;
using namespace quill::cpu;
using quill::test::random_blocks;
using quill::test::TestMatrix;

TEST_CASE("packed Q6_K for AVX2 holds each element's six bits in its row's lane, then the scales and d", "[matmul]") {
    // Read back from the layout (kernels.h, kQ6EightSuperBytes): element 32 j + 4 k + i of row 8 h + r, super-block
    // g, from X0..X5 of block j at byte 4 r + i, against the file's dequantized weight d * sc * (u - 32).
    std::mt19937 rng(6601);
    const TestMatrix m = random_blocks(GgmlType::Q6_K, 21, 512, rng);  // two tiles, the second ragged
    const int64_t n_groups = m.n_in / 256, n_tiles = 2;
    REQUIRE(PackedWeights::bytes_for(m.view()) == static_cast<size_t>(n_tiles * 2 * n_groups * kQ6EightSuperBytes));
    std::vector<uint8_t> packed(PackedWeights::bytes_for(m.view()), 0xAB);
    REQUIRE(generic::pack_avx2_tiles(m.view(), packed.data(), 0, n_tiles));
    size_t bad = 0;
    for (int64_t h = 0; h < 2 * n_tiles; ++h) {
        for (int64_t r = 0; r < 8; ++r) {
            const int64_t row = std::min<int64_t>(8 * h + r, m.n_out - 1);
            for (int64_t g = 0; g < n_groups; ++g) {
                const uint8_t* sb = packed.data() + (h * n_groups + g) * kQ6EightSuperBytes;
                const float d = fp16_to_fp32(load_unaligned<uint16_t>(sb + kQ6EightDAt + 2 * r));
                for (int j = 0; j < 8; ++j) {
                    const uint8_t* x = sb + j * kQ6EightBlockBytes + 4 * r;
                    for (int i = 0; i < 4; ++i) {
                        int u[8];
                        for (int k = 0; k < 6; ++k) u[k] = x[32 * k + i] & 0x3F;
                        for (int k = 6; k < 8; ++k) {
                            const uint8_t* top = x + 32 * 3 * (k - 6) + i;  // X0..X2 for u6, X3..X5 for u7
                            u[k] = top[0] >> 6 | (top[32] >> 6) << 2 | (top[64] >> 6) << 4;
                        }
                        for (int k = 0; k < 8; ++k) {
                            const int e = 32 * j + 4 * k + i;  // element of the super-block
                            const auto sc = static_cast<int8_t>(sb[kQ6EightScalesAt + 8 * (e / 16) + r]);
                            const float w = d * static_cast<float>(sc) * static_cast<float>(u[k] - 32);
                            if (w != m.deq[row * m.n_in + 256 * g + e] && bad++ == 0)
                                FAIL_CHECK(fmt::format("half {} row {} group {} element {}: {} against {}", h, r, g,
                                                       e, w, m.deq[row * m.n_in + 256 * g + e]));
                        }
                    }
                }
            }
        }
    }
    CHECK(bad == 0);
    // The other types' AVX2 layout is pack_tiles'.
    for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q3_K, GgmlType::Q4_0}) {
        WeightMatrix other = m.view();
        other.type = type;
        CHECK_FALSE(generic::pack_avx2_tiles(other, packed.data(), 0, n_tiles));
    }
}

TEST_CASE("PackedWeights packs Q6_K as eight-row halves for AVX2 and as quads for the AVX-512 families", "[matmul]") {
    std::mt19937 rng(6602);
    const TestMatrix m = random_blocks(GgmlType::Q6_K, 37, 768, rng);
    const int64_t n_tiles = (m.n_out + 15) / 16;
    const size_t bytes = PackedWeights::bytes_for(m.view());
    std::vector<uint8_t> eights(bytes, 0), quads(bytes, 0);
    REQUIRE(generic::pack_avx2_tiles(m.view(), eights.data(), 0, n_tiles));
    generic::pack_tiles(m.view(), quads.data(), 0, n_tiles);
    REQUIRE(eights != quads);
    ThreadPool pool(2);
    for (Isa isa : quill::test::packed_isas()) {
        INFO(isa_name(isa));
        const PackedWeights packed(m.view(), isa, &pool);
        CHECK(packed.isa() == isa);
        const std::vector<uint8_t>& want = isa == Isa::avx2 ? eights : quads;
        CHECK(std::memcmp(packed.data(), want.data(), bytes) == 0);
    }
}

TEST_CASE("a packed Q6_K matrix is read only by the kernels of the family it was packed for", "[matmul]") {
    // The layouts differ, so every other family reads the file's rows, with those rows' kernels.
    const std::vector<Isa> isas = quill::test::packed_isas();
    if (isas.empty()) return quill::test::skip_no_device("no AVX2 here: the packed kernels cannot run");
    std::mt19937 rng(6603);
    const TestMatrix m = random_blocks(GgmlType::Q6_K, 24, 512, rng);
    const std::array<Kernel, kIsaCount> file = resolve_kernels(m.view());
    for (Isa packed_for : isas) {
        const PackedWeights packed(m.view(), packed_for, nullptr);
        const std::array<Kernel, kIsaCount> kernels = resolve_kernels(packed.reading(m.view()));
        for (Isa isa : isas) {
            INFO(fmt::format("packed for {}, run on {}", isa_name(packed_for), isa_name(isa)));
            const auto i = static_cast<size_t>(isa);
            const bool same_family = (isa == Isa::avx2) == (packed_for == Isa::avx2);
            CHECK((kernels[i].fn == file[i].fn) == !same_family);
        }
    }
}

TEST_CASE("packed Q6_K gives the bits of the file's layout and the reference dot products on every ISA", "[matmul]") {
    std::mt19937 rng(6604);
    quill::test::check_packed_halves(GgmlType::Q6_K, [&](int64_t n_out, int64_t n_in) {
        return random_blocks(GgmlType::Q6_K, n_out, n_in, rng);
    }, rng);
}

}  // namespace test_packed_q6k_avx2
