// The packed form of Q3_K (PackedWeights: eight-row halves of three-bit values in lanes, kQ3SuperBytes): its bytes
// against the file's blocks, and its AVX2 kernel (which the AVX-512 families use too) against the four-row kernels
// over the file's rows (the same bits) and the reference dot products, on random blocks (every bit pattern of the
// values and scales, not only what the quantizer makes), ragged tiles and every token path.
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

namespace test_packed_q3k {

using namespace quill;
using namespace quill::cpu;
using quill::test::TestMatrix;

namespace {

// n_out rows of Q3_K blocks of random bytes, each block's d a random fp16 in [2^-12, 2^-5).
TestMatrix random_q3_k(int64_t n_out, int64_t n_in, std::mt19937& rng) {
    TestMatrix m{GgmlType::Q3_K, n_out, n_in, {}, {}};
    const size_t rb = row_size(m.type, n_in);
    m.data.resize(rb * static_cast<size_t>(n_out));
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> exponent(-12.0f, -5.0f);
    for (uint8_t& b : m.data) b = static_cast<uint8_t>(byte(rng));
    for (size_t at = 0; at < m.data.size(); at += sizeof(BlockQ3_K)) {
        const uint16_t d = fp32_to_fp16(std::exp2(exponent(rng)));
        std::memcpy(m.data.data() + at + offsetof(BlockQ3_K, d), &d, 2);
    }
    m.deq.resize(static_cast<size_t>(n_out * n_in));
    for (int64_t r = 0; r < n_out; ++r)
        dequantize_row(m.type, m.data.data() + rb * static_cast<size_t>(r), m.deq.data() + r * n_in, n_in);
    return m;
}

}  // namespace

TEST_CASE("packed Q3_K halves hold each element's three bits in its row's lane, then the scales and d", "[matmul]") {
    // Read back from the layout (kernels.h, kQ3SuperBytes): element 32 j + 4 k + i of row 8 h + r, super-block g, from
    // X0..X2 of block j at byte 4 r + i, against the file's dequantized weight d * sc * (u - 4).
    std::mt19937 rng(3301);
    const TestMatrix m = random_q3_k(21, 512, rng);  // two tiles, the second ragged
    const int64_t n_groups = m.n_in / 256, n_tiles = 2;
    REQUIRE(packed_record_bytes(GgmlType::Q3_K) == 228);
    REQUIRE(PackedWeights::bytes_for(m.view()) == static_cast<size_t>(n_tiles * 2 * n_groups * kQ3SuperBytes));
    std::vector<uint8_t> packed(PackedWeights::bytes_for(m.view()), 0xAB);
    generic::pack_tiles(m.view(), packed.data(), 0, n_tiles);
    size_t bad = 0;
    for (int64_t h = 0; h < 2 * n_tiles; ++h) {
        for (int64_t r = 0; r < 8; ++r) {
            const int64_t row = std::min<int64_t>(8 * h + r, m.n_out - 1);
            for (int64_t g = 0; g < n_groups; ++g) {
                const uint8_t* sb = packed.data() + (h * n_groups + g) * kQ3SuperBytes;
                const float d = fp16_to_fp32(load_unaligned<uint16_t>(sb + kQ3DAt + 2 * r));
                for (int j = 0; j < 8; ++j) {
                    const uint8_t* x = sb + j * kQ3BlockBytes + 4 * r;
                    for (int i = 0; i < 4; ++i) {
                        const int x0 = x[i], x1 = x[32 + i], x2 = x[64 + i];
                        const int u[8] = {x0 & 7,  (x0 >> 3) & 7, (x0 >> 6) | ((x2 >> 6) & 1) << 2,
                                          x1 & 7,  (x1 >> 3) & 7, (x1 >> 6) | (x2 >> 7) << 2,
                                          x2 & 7,  (x2 >> 3) & 7};
                        for (int k = 0; k < 8; ++k) {
                            const int e = 32 * j + 4 * k + i;  // element of the super-block
                            const auto sc = static_cast<int8_t>(sb[kQ3ScalesAt + 8 * (e / 16) + r]);
                            const float w = d * static_cast<float>(sc) * static_cast<float>(u[k] - 4);
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
}

TEST_CASE("packed Q3_K gives the bits of the file's layout and the reference dot products on every ISA", "[matmul]") {
    std::mt19937 rng(3302);
    quill::test::check_packed_halves(GgmlType::Q3_K, [&](int64_t n_out, int64_t n_in) {
        return random_q3_k(n_out, n_in, rng);
    }, rng);
}

}  // namespace test_packed_q3k
