// The packed form of IQ4_NL (PackedWeights: Q4_0's records, the kernels looking the nibbles up in the levels): its
// bytes against the file's blocks, the portable packer against the AVX-512 one, and the packed kernels of every ISA
// here against the kernels over the file's rows (the same bits) and against the reference dot products, on random
// blocks (every nibble pattern, not only what the quantizer makes).
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul.h"
#include "engine/format/quant.h"
#include "tests/support/matmul_data.h"
#include "tests/support/packed_checks.h"
#include "tests/support/test_util.h"

namespace test_packed_iq4nl {

using namespace quill;
using namespace quill::cpu;
using quill::test::packed_isas;
using quill::test::random_blocks;
using quill::test::TestMatrix;

TEST_CASE("packed IQ4_NL tiles hold each block's nibbles in the rows' lanes and its d as Q4_0's records do",
          "[matmul]") {
    // Written out from the layout (kernels.h, packed_record_bytes): record b of tile t holds at 64 c + 4 r + i byte
    // 4 c + i of the nibbles of block b of row 16 t + r, and at 256 + 2 r its d; a ragged tile repeats its last row.
    std::mt19937 rng(4601);
    const TestMatrix m = random_blocks(GgmlType::IQ4_NL, 21, 96, rng);
    const int64_t nb = m.n_in / 32, n_tiles = 2, record = packed_record_bytes(GgmlType::IQ4_NL);
    REQUIRE(record == 288);
    REQUIRE(PackedWeights::bytes_for(m.view()) == static_cast<size_t>(n_tiles * nb * record));
    std::vector<uint8_t> expected(static_cast<size_t>(n_tiles * nb * record));
    for (int64_t t = 0; t < n_tiles; ++t) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* rec = expected.data() + (t * nb + b) * record;
            for (int64_t r = 0; r < 16; ++r) {
                const int64_t row = std::min<int64_t>(16 * t + r, m.n_out - 1);
                BlockIq4Nl blk;
                std::memcpy(&blk, m.data.data() + row * static_cast<int64_t>(row_size(m.type, m.n_in)) +
                                      b * static_cast<int64_t>(sizeof(BlockIq4Nl)),
                            sizeof blk);
                for (int64_t c = 0; c < 4; ++c) std::memcpy(rec + 64 * c + 4 * r, blk.qs + 4 * c, 4);
                std::memcpy(rec + 256 + 2 * r, &blk.d, 2);
            }
        }
    }
    std::vector<uint8_t> portable(expected.size(), 0xAB);
    generic::pack_tiles(m.view(), portable.data(), 0, n_tiles);
    CHECK(portable == expected);
    if (isa_available(Isa::avx512) && !avx512_emulated()) {
        std::vector<uint8_t> transposed(expected.size(), 0xCD);
        REQUIRE(avx512::pack_tiles(m.view(), transposed.data(), 0, n_tiles));
        CHECK(transposed == expected);
    }
}

TEST_CASE("packed IQ4_NL kernels give the bits of the file's layout and the reference dot products on every ISA",
          "[matmul]") {
    const std::vector<Isa> isas = packed_isas();
    if (isas.empty()) return quill::test::skip_no_device("no AVX2 here: the packed kernels cannot run");
    for (Isa isa : isas) {
        INFO(isa_name(isa));
        REQUIRE(PackedWeights::supports(GgmlType::IQ4_NL, isa));
    }
    std::mt19937 rng(4602);
    ThreadPool pools[] = {ThreadPool(1), ThreadPool(3)};
    // Ragged tiles (45, 7 rows), an odd number of blocks (25), a single block, and a wider matrix.
    for (auto [n_out, n_in] : {std::pair<int64_t, int64_t>{45, 800}, {7, 32}, {40, 2816}}) {
        const TestMatrix m = random_blocks(GgmlType::IQ4_NL, n_out, n_in, rng);
        // Every path: one token over both halves (AVX2) or sixteen rows (AVX-512), two and three, the repacked
        // tiles, one whole group of the tile layout (16), lane kernels of eight tokens and more, and the rest.
        quill::test::check_packed_products(m, {1, 2, 3, 4, 5, 8, 9, 13, 16, 17, 40}, isas, pools, rng);
    }
}

}  // namespace test_packed_iq4nl
