// The block decoders the CUDA kernels run (cuda/dequant.h), compiled here for the host and compared bit for bit
// with the reference dequantizers (engine/format/quant.h) on random blocks of every type the CUDA backend
// multiplies. This runs on every machine, GPU or not: the kernels' block arithmetic is checked even where they
// cannot run.
#include "cuda/dequant.h"
#include "engine/format/quant.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

namespace test_cuda_decode {

using namespace quill;

namespace {

// A row of n elements of `type`: quantized from random floats, plus raw random bytes for the block types (so scale
// fields and bit patterns the quantizer never writes are decoded too, NaN/inf scales excepted).
std::vector<uint8_t> random_row(GgmlType type, int64_t n, uint32_t seed, bool raw) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> row(row_size(type, n));
    if (raw && cuda::is_block_type(type)) {
        std::uniform_int_distribution<int> byte(0, 255);
        for (uint8_t& b : row) b = static_cast<uint8_t>(byte(rng));
        // Keep every fp16 scale finite: rewrite the exponent bits of each block's half fields to a sane range.
        const size_t bs = type_traits(type).type_size;
        auto tame = [&](size_t off) {
            for (size_t b = 0; b + bs <= row.size(); b += bs) row[b + off + 1] &= 0x3B;  // exponent < 0b11111
        };
        switch (type) {
            case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K:
                tame(0);
                tame(2);
                break;
            case GgmlType::Q6_K: tame(208); break;
            case GgmlType::Q3_K: tame(108); break;
            case GgmlType::Q2_K:
                tame(80);
                tame(82);
                break;
            default: tame(0); break;
        }
        return row;
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng) * (1.0f + static_cast<float>(rng() % 8));
    quantize_row(type, x.data(), row.data(), n);
    return row;
}

template <GgmlType T>
std::vector<float> decode_row(const std::vector<uint8_t>& row, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    if constexpr (cuda::is_block_type(T)) {
        for (int64_t g = 0; g < n / 32; ++g) cuda::decode_group32<T>(row.data(), g, out.data() + 32 * g);
    } else {
        for (int64_t e = 0; e < n; ++e) out[static_cast<size_t>(e)] = cuda::decode_element<T>(row.data(), e);
    }
    return out;
}

template <GgmlType T>
void check_type() {
    INFO(type_name(T));
    const int64_t n = cuda::is_block_type(T) ? 4 * 256 : 100;  // plain float rows need not be a multiple of 32
    for (bool raw : {false, true}) {
        for (uint32_t seed = 1; seed <= 4; ++seed) {
            const std::vector<uint8_t> row = random_row(T, n, seed, raw);
            std::vector<float> want(static_cast<size_t>(n));
            dequantize_row(T, row.data(), want.data(), n);
            const std::vector<float> got = decode_row<T>(row, n);
            INFO("seed " << seed << (raw ? ", raw bytes" : ", quantized"));
            // Bit for bit: compare the bits, so that -0.0 vs 0.0 or two NaNs are not glossed over.
            CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
        }
    }
}

}  // namespace

TEST_CASE("CUDA block decoders, compiled for the host, equal the reference dequantizers bit for bit", "[quant]") {
    check_type<GgmlType::F32>();
    check_type<GgmlType::F16>();
    check_type<GgmlType::BF16>();
    check_type<GgmlType::Q4_0>();
    check_type<GgmlType::Q4_1>();
    check_type<GgmlType::Q5_0>();
    check_type<GgmlType::Q5_1>();
    check_type<GgmlType::Q8_0>();
    check_type<GgmlType::Q4_K>();
    check_type<GgmlType::Q5_K>();
    check_type<GgmlType::Q6_K>();
    check_type<GgmlType::Q2_K>();
    check_type<GgmlType::Q3_K>();
    check_type<GgmlType::IQ4_NL>();
    check_type<GgmlType::IQ4_XS>();
    check_type<GgmlType::MXFP4>();
    // Every type the backend claims has a decoder above, and nothing else is claimed.
    int claimed = 0;
    for (uint32_t id = 0; id < 64; ++id) {
        if (const TypeTraits* t = find_type_traits(id)) claimed += cuda::cuda_supports(t->type);
    }
    CHECK(claimed == 16);
}

namespace {

template <GgmlType T>
void check_packed() {
    INFO(type_name(T));
    const int64_t n = 3 * 320;  // three rows of 320, back to back
    constexpr int qb = cuda::packed_quant_bytes(T), sb = cuda::packed_scale_bytes(T);
    for (bool raw : {false, true}) {
        const std::vector<uint8_t> gguf = random_row(T, n, 11, raw);
        const int64_t blocks = n / 32;
        REQUIRE(gguf.size() == static_cast<size_t>(blocks * (qb + sb)));  // the planes add up to the GGUF bytes
        std::vector<uint8_t> planes(gguf.size());
        cuda::pack_blocks(T, gguf.data(), blocks, planes.data(), planes.data() + blocks * qb);
        std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
        dequantize_row(T, gguf.data(), want.data(), n);
        for (int64_t b = 0; b < blocks; ++b)
            cuda::decode_packed32<T>(planes.data() + b * qb, planes.data() + blocks * qb + b * sb, got.data() + 32 * b);
        INFO((raw ? "raw bytes" : "quantized"));
        CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
    }
}

}  // namespace

TEST_CASE("the packed layout of Q4_0, Q4_1 and Q8_0 (two planes) decodes bit for bit as the GGUF blocks", "[quant]") {
    check_packed<GgmlType::Q4_0>();
    check_packed<GgmlType::Q4_1>();
    check_packed<GgmlType::Q8_0>();
    for (GgmlType t : {GgmlType::F16, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K})
        CHECK(cuda::packed_quant_bytes(t) == 0);
}

}  // namespace test_cuda_decode
