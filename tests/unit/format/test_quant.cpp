// Tests of engine/quant: the type table, fp16/bf16 conversions, and the scalar codecs against ggml's reference
// vectors (../shared/testdata/quant/<type>.txt, made by llama.cpp's ggml_quantize_chunk without imatrix).
#include "engine/error.h"
#include "engine/format/quant.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace test_quant {

using namespace quill;

namespace {

uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

// One reference vector: the header, the input row, ggml's bytes for it and ggml's dequantization of those bytes.
struct RefVector {
    std::map<std::string, std::string> header;  // "type" -> "q4_K", "n" -> "1024", ...
    std::vector<float> input;                   // [n]
    std::vector<uint8_t> bytes;                 // [row_size(type, n)]
    std::vector<float> dequantized;             // [n]
};

// Floats are written with 9 significant digits (%.9g), which round-trips every float exactly, so strtof gives
// back ggml's bits and every comparison below can be bit-exact.
RefVector read_ref_vector(const std::filesystem::path& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    RefVector v;
    std::string line, section;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        if (line == "input" || line == "quantized_hex" || line == "dequantized") {
            section = line;
            continue;
        }
        if (line == "end") break;
        std::istringstream ss(line);
        if (section.empty()) {
            std::string key, value;
            ss >> key >> value;
            v.header[key] = value;
        } else if (section == "quantized_hex") {
            REQUIRE(line.size() % 2 == 0);
            for (size_t i = 0; i < line.size(); i += 2) {
                v.bytes.push_back(static_cast<uint8_t>(std::stoul(line.substr(i, 2), nullptr, 16)));
            }
        } else {
            auto& out = section == "input" ? v.input : v.dequantized;
            std::string tok;
            while (ss >> tok) out.push_back(std::strtof(tok.c_str(), nullptr));
        }
    }
    return v;
}

// Where byte `offset` of a row lies: "block 3 byte 17".
std::string byte_position(const TypeTraits& t, size_t offset) {
    return fmt::format("block {} byte {}", offset / t.type_size, offset % t.type_size);
}

std::vector<uint8_t> quantize(GgmlType type, const std::vector<float>& x) {
    std::vector<uint8_t> q(row_size(type, static_cast<int64_t>(x.size())));
    quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size()));
    return q;
}

std::vector<float> dequantize(GgmlType type, const std::vector<uint8_t>& q, size_t n) {
    std::vector<float> y(n);
    dequantize_row(type, q.data(), y.data(), static_cast<int64_t>(n));
    return y;
}

const char* const kRefTypes[] = {"f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
                                 "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"};

}  // namespace

TEST_CASE("quant: traits, names and row sizes", "[quant]") {
    SECTION("every ggml type id, with ggml's block layout") {
        struct Expected {
            uint32_t id;
            const char* name;
            int64_t block_size;
            size_t type_size;
        };
        const Expected expected[] = {
            {0, "f32", 1, 4},          {1, "f16", 1, 2},         {2, "q4_0", 32, 18},      {3, "q4_1", 32, 20},
            {6, "q5_0", 32, 22},       {7, "q5_1", 32, 24},      {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},
            {10, "q2_K", 256, 84},     {11, "q3_K", 256, 110},   {12, "q4_K", 256, 144},   {13, "q5_K", 256, 176},
            {14, "q6_K", 256, 210},    {15, "q8_K", 256, 292},   {16, "iq2_xxs", 256, 66}, {17, "iq2_xs", 256, 74},
            {18, "iq3_xxs", 256, 98},  {19, "iq1_s", 256, 50},   {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},
            {22, "iq2_s", 256, 82},    {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},         {25, "i16", 1, 2},
            {26, "i32", 1, 4},         {27, "i64", 1, 8},        {28, "f64", 1, 8},        {29, "iq1_m", 256, 56},
            {30, "bf16", 1, 2},        {34, "tq1_0", 256, 54},   {35, "tq2_0", 256, 66},   {39, "mxfp4", 32, 17},
        };
        for (const auto& e : expected) {
            INFO("type id " << e.id);
            const TypeTraits* t = find_type_traits(e.id);
            REQUIRE(t != nullptr);
            CHECK(static_cast<uint32_t>(t->type) == e.id);
            CHECK(std::string(t->name) == e.name);
            CHECK(t->block_size == e.block_size);
            CHECK(t->type_size == e.type_size);
            CHECK(&type_traits(t->type) == t);
            CHECK(type_name(t->type) == e.name);
            CHECK(type_from_name(e.name) == t->type);
            std::string upper = e.name;
            for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            CHECK(type_from_name(upper) == t->type);
        }
        CHECK(type_from_name("q4_k") == GgmlType::Q4_K);
        CHECK(type_from_name("Q6_K") == GgmlType::Q6_K);
        int known = 0;
        for (uint32_t id = 0; id < 64; ++id) known += find_type_traits(id) != nullptr;
        CHECK(known == static_cast<int>(std::size(expected)));
    }
    SECTION("retired and unknown ids and names") {
        for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u, 0xFFFFFFFFu}) {
            INFO("type id " << id);
            CHECK(find_type_traits(id) == nullptr);
        }
        CHECK_THROWS_AS(type_traits(static_cast<GgmlType>(4)), Error);
        for (const char* name : {"", "q4", "q4_0 ", "f8", "q4_2", "iq4"}) CHECK_FALSE(type_from_name(name).has_value());
    }
    SECTION("what can be computed") {
        for (const char* name : {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q2_K", "q3_K",
                                 "q4_K", "q5_K", "q6_K", "q8_K", "iq4_nl", "iq4_xs", "mxfp4"}) {
            INFO(name);
            const TypeTraits& t = type_traits(*type_from_name(name));
            CHECK(t.can_dequantize);
            CHECK(t.can_quantize);
        }
        // dequantized only: their quantizers need an importance matrix
        for (const char* name : {"iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s"}) {
            INFO(name);
            const TypeTraits& t = type_traits(*type_from_name(name));
            CHECK(t.can_dequantize);
            CHECK_FALSE(t.can_quantize);
        }
        for (const char* name : {"i8", "i32", "f64", "tq1_0", "tq2_0"}) {
            INFO(name);
            const TypeTraits& t = type_traits(*type_from_name(name));
            CHECK_FALSE(t.can_dequantize);
            CHECK_FALSE(t.can_quantize);
            float out[256];
            std::vector<uint8_t> in(t.type_size * 256);
            CHECK_THROWS_AS(dequantize_row(t.type, in.data(), out, t.block_size), Error);
        }
    }
    SECTION("row_size") {
        CHECK(row_size(GgmlType::F32, 7) == 28);
        CHECK(row_size(GgmlType::Q4_0, 64) == 36);
        CHECK(row_size(GgmlType::Q4_K, 4096) == 16 * 144);
        CHECK(row_size(GgmlType::Q6_K, 0) == 0);
        CHECK_THROWS_AS(row_size(GgmlType::Q4_0, 33), Error);
        CHECK_THROWS_AS(row_size(GgmlType::Q4_K, 128), Error);
        std::vector<float> x(48, 1.0f);
        std::vector<uint8_t> q(64);
        CHECK_THROWS_AS(quantize_row(GgmlType::Q8_0, x.data(), q.data(), 48), Error);
    }
}

TEST_CASE("quant: ggml reference vectors", "[quant]") {
    auto dir = test::require_testdata("quant");
    if (!dir) return;
    for (const char* name : kRefTypes) {
        auto path = *dir / fmt::format("{}.txt", name);
        DYNAMIC_SECTION(name) {
            INFO(path.string());
            REQUIRE(std::filesystem::exists(path));  // the directory is there, so the set must be complete
            const RefVector v = read_ref_vector(path);
            CHECK(v.header.at("type") == name);
            const auto type = type_from_name(v.header.at("type"));
            REQUIRE(type.has_value());
            const TypeTraits& t = type_traits(*type);
            CHECK(static_cast<uint32_t>(t.type) == std::stoul(v.header.at("ggml_type_id")));
            CHECK(t.block_size == std::stoll(v.header.at("blck_size")));
            CHECK(t.type_size == std::stoul(v.header.at("type_size")));
            const auto n = static_cast<size_t>(std::stoull(v.header.at("n")));
            REQUIRE(v.input.size() == n);
            REQUIRE(v.dequantized.size() == n);
            REQUIRE(v.bytes.size() == std::stoull(v.header.at("bytes")));
            REQUIRE(v.bytes.size() == row_size(t.type, static_cast<int64_t>(n)));

            // dequantize_row(ggml's bytes) == ggml's floats, bit for bit.
            const std::vector<float> y = dequantize(t.type, v.bytes, n);
            size_t float_mismatches = 0;
            for (size_t i = 0; i < n; ++i) {
                if (float_bits(y[i]) == float_bits(v.dequantized[i])) continue;
                if (float_mismatches++ < 5) {
                    UNSCOPED_INFO(fmt::format("element {}: got {:.9g}, ggml {:.9g}", i, y[i], v.dequantized[i]));
                }
            }
            CHECK(float_mismatches == 0);

            // quantize_row(input) == ggml's bytes, byte for byte.
            const std::vector<uint8_t> q = quantize(t.type, v.input);
            size_t byte_mismatches = 0;
            for (size_t i = 0; i < q.size(); ++i) {
                if (q[i] == v.bytes[i]) continue;
                if (byte_mismatches++ < 5) {
                    UNSCOPED_INFO(fmt::format("{}: got {:02x}, ggml {:02x}", byte_position(t, i), q[i], v.bytes[i]));
                }
            }
            CHECK(byte_mismatches == 0);
        }
    }
}

// ---- fp16 / bf16 ----

namespace {

// The value of a half by its definition (independent of the bit manipulation in quant.cpp).
double half_value(uint16_t h) {
    const int sign = (h & 0x8000) ? -1 : 1;
    const int exp = (h >> 10) & 0x1F;
    const int mant = h & 0x3FF;
    if (exp == 0x1F) return mant ? std::nan("") : sign * HUGE_VAL;
    if (exp == 0) return sign * std::ldexp(mant, -24);
    return sign * std::ldexp(1024 + mant, exp - 25);
}

// Nearest half to f, ties to even, found by rounding f / ulp in double: the slow but obvious way.
uint16_t half_nearest(float f) {
    const double a = std::fabs(static_cast<double>(f));
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    int e = a > 0 ? std::ilogb(a) : -14;
    e = std::max(e, -14);
    const double q = std::nearbyint(std::ldexp(a, 10 - e));  // default rounding mode: to nearest even
    const double v = std::ldexp(q, e - 10);
    if (v >= 65536.0) return sign | 0x7C00;
    if (v == 0.0) return sign;
    const int ev = std::max(std::ilogb(v), -14);
    const auto mant = static_cast<uint16_t>(std::ldexp(v, 10 - ev));  // 1024..2047, or < 1024 when subnormal
    if (mant < 1024) return static_cast<uint16_t>(sign | mant);
    return static_cast<uint16_t>(sign | ((ev + 15) << 10) | (mant - 1024));
}

}  // namespace

TEST_CASE("quant: fp16 conversions", "[quant]") {
    SECTION("all 65536 halves: value by definition, and fp16 -> fp32 -> fp16 is the identity") {
        for (uint32_t h = 0; h < 65536; ++h) {
            const auto h16 = static_cast<uint16_t>(h);
            const float f = fp16_to_fp32(h16);
            const double want = half_value(h16);
            if (std::isnan(want)) {
                REQUIRE(std::isnan(f));
                REQUIRE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
                REQUIRE((fp32_to_fp16(f) | 0x0200) == (h16 | 0x0200));  // quieted, payload and sign kept
                continue;
            }
            INFO("half 0x" << std::hex << h);
            REQUIRE(static_cast<double>(f) == want);
            REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
            REQUIRE(fp32_to_fp16(f) == h16);
        }
    }
    SECTION("round to nearest even at every midpoint between neighbouring halves") {
        for (uint32_t h = 0; h < 0x7C00; ++h) {
            const double lo = half_value(static_cast<uint16_t>(h));
            const double hi = h + 1 == 0x7C00 ? 65536.0 : half_value(static_cast<uint16_t>(h + 1));
            const auto mid = static_cast<float>((lo + hi) / 2);  // exact: halves have 11 significant bits
            const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
            INFO("between 0x" << std::hex << h << " and 0x" << h + 1);
            REQUIRE(fp32_to_fp16(mid) == even);
            REQUIRE(fp32_to_fp16(std::nextafter(mid, 0.0f)) == h);
            REQUIRE(fp32_to_fp16(std::nextafter(mid, 1e30f)) == h + 1);
            REQUIRE(fp32_to_fp16(-mid) == (even | 0x8000));
        }
    }
    SECTION("random floats of every magnitude match the rounding of f / ulp") {
        std::mt19937 rng(7);
        std::uniform_int_distribution<uint32_t> exp_dist(90, 145), mant_dist(0, 0x7FFFFF), sign_dist(0, 1);
        for (int i = 0; i < 200000; ++i) {
            const float f = bits_float((sign_dist(rng) << 31) | (exp_dist(rng) << 23) | mant_dist(rng));
            INFO(fmt::format("{:.9g}", f));
            REQUIRE(fp32_to_fp16(f) == half_nearest(f));
        }
    }
    SECTION("special values") {
        CHECK(fp32_to_fp16(0.0f) == 0x0000);
        CHECK(fp32_to_fp16(-0.0f) == 0x8000);
        CHECK(fp32_to_fp16(1.0f) == 0x3C00);
        CHECK(fp32_to_fp16(-2.0f) == 0xC000);
        CHECK(fp32_to_fp16(65504.0f) == 0x7BFF);
        CHECK(fp32_to_fp16(65519.996f) == 0x7BFF);
        CHECK(fp32_to_fp16(65520.0f) == 0x7C00);  // the midpoint to 2^16 rounds up to inf (0x7BFF is odd)
        CHECK(fp32_to_fp16(1e10f) == 0x7C00);
        CHECK(fp32_to_fp16(HUGE_VALF) == 0x7C00);
        CHECK(fp32_to_fp16(-HUGE_VALF) == 0xFC00);
        CHECK(fp32_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
        CHECK(fp32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
        CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24: even
        CHECK(fp32_to_fp16(std::ldexp(3.0f, -26)) == 0x0001);
        CHECK(fp32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 * 2^-24: tie, to even 2
        CHECK(fp32_to_fp16(1e-30f) == 0x0000);
        CHECK(fp32_to_fp16(bits_float(1)) == 0x0000);  // fp32 subnormal
        CHECK(fp32_to_fp16(-1e-30f) == 0x8000);
        const uint16_t nan = fp32_to_fp16(std::nanf(""));
        CHECK((nan & 0x7C00) == 0x7C00);
        CHECK((nan & 0x0200) != 0);
        CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(bits_float(0x7F800001)))));  // signalling NaN stays NaN
        CHECK(fp16_to_fp32(0x7C00) == HUGE_VALF);
        CHECK(fp16_to_fp32(0xFC00) == -HUGE_VALF);
        CHECK(fp16_to_fp32(0x3555) == 0.333251953125f);
    }
}

TEST_CASE("quant: bf16 conversions", "[quant]") {
    SECTION("all 65536 bf16 values: the top half of a float, and bf16 -> fp32 -> bf16 is the identity") {
        for (uint32_t h = 0; h < 65536; ++h) {
            const float f = bf16_to_fp32(static_cast<uint16_t>(h));
            REQUIRE(float_bits(f) == h << 16);
            if (std::isnan(f)) {
                REQUIRE(fp32_to_bf16(f) == (h | 0x40));  // quieted
            } else {
                REQUIRE(fp32_to_bf16(f) == h);
            }
        }
    }
    SECTION("random floats round to the nearer bf16, ties to even") {
        std::mt19937 rng(11);
        std::uniform_int_distribution<uint32_t> bits_dist(0, 0xFFFFFFFFu);
        auto value = [](uint32_t b) {  // the bf16 above the largest finite one counts as 2^128 for rounding
            return (b & 0x7FFF) == 0x7F80 ? std::copysign(std::ldexp(1.0, 128), bits_float(b << 16))
                                          : static_cast<double>(bits_float(b << 16));
        };
        for (int i = 0; i < 200000; ++i) {
            uint32_t u = bits_dist(rng);
            if (i % 4 == 0) u = (u & 0xFFFF0000u) | 0x8000;  // exact ties
            const float f = bits_float(u);
            if (std::isnan(f) || std::isinf(f)) continue;
            const uint32_t down = u >> 16, up = down + 1;
            const double dd = std::fabs(f - value(down)), du = std::fabs(value(up) - f);
            const uint32_t want = dd < du ? down : du < dd ? up : ((down & 1) ? up : down);
            INFO(fmt::format("{:#010x}", u));
            REQUIRE(fp32_to_bf16(f) == want);
        }
    }
    SECTION("special values") {
        CHECK(fp32_to_bf16(1.0f) == 0x3F80);
        CHECK(fp32_to_bf16(-0.0f) == 0x8000);
        CHECK(fp32_to_bf16(bits_float(0x3F808000)) == 0x3F80);  // tie, even stays
        CHECK(fp32_to_bf16(bits_float(0x3F818000)) == 0x3F82);  // tie, odd rounds up
        CHECK(fp32_to_bf16(bits_float(0x7F7FFFFF)) == 0x7F80);  // rounds up to inf
        CHECK(fp32_to_bf16(HUGE_VALF) == 0x7F80);
        CHECK(fp32_to_bf16(-HUGE_VALF) == 0xFF80);
        CHECK(fp32_to_bf16(bits_float(0x00012345)) == 0x0001);  // subnormals round like any other value
        CHECK(fp32_to_bf16(bits_float(0x7F800001)) == 0x7FC0);  // signalling NaN is quieted
        CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
    }
}

// ---- round trips on random data ----

namespace {

constexpr size_t kRowLen = 2048;  // 8 super-blocks, 64 blocks of 32

// Row shapes that exercise the corners of the scale searches: [kRowLen].
std::vector<float> make_row(int pattern, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::uniform_real_distribution<float> unif(-1.0f, 1.0f);
    std::vector<float> x(kRowLen);
    switch (pattern) {
        case 0:  // gaussian, sigma 1
            for (float& v : x) v = gauss(rng);
            break;
        case 1:  // tiny and huge magnitudes, one per super-block (scales stay within fp16's normal range)
            for (size_t i = 0; i < kRowLen; ++i)
                x[i] = gauss(rng) * std::pow(10.0f, static_cast<float>(static_cast<int>(i / 256) % 6 - 2));
            break;
        case 2: {  // zero blocks, a block with one outlier, a constant block, the rest uniform
            for (float& v : x) v = unif(rng);
            std::fill(x.begin(), x.begin() + 256, 0.0f);
            for (size_t i = 256; i < 512; ++i) x[i] = 0.01f * gauss(rng);
            x[256 + rng() % 256] = 25.0f;
            std::fill(x.begin() + 512, x.begin() + 768, 0.3f);
            std::fill(x.begin() + 768, x.begin() + 800, -0.7f);
            break;
        }
        case 3:  // all positive (the min is not below zero), then all negative
            for (size_t i = 0; i < kRowLen; ++i) x[i] = (i < kRowLen / 2 ? 1.0f : -1.0f) * (1.5f + unif(rng));
            break;
        default:  // heavy tails: gaussian / sqrt(uniform)
            for (float& v : x) v = gauss(rng) / std::sqrt(0.02f + std::fabs(unif(rng)));
            break;
    }
    return x;
}

struct Stats {
    float amax = 0.0f, min = 0.0f, max = 0.0f;
};

Stats stats_of(const float* x, int64_t n) {
    Stats s{0.0f, x[0], x[0]};
    for (int64_t i = 0; i < n; ++i) {
        s.amax = std::max(s.amax, std::fabs(x[i]));
        s.min = std::min(s.min, x[i]);
        s.max = std::max(s.max, x[i]);
    }
    return s;
}

// The largest |x - dequantize(quantize(x))| allowed for an element of a block with stats s.
// For the 32-element types it follows from the format (d rounded to fp16 adds at most qmax * d * 2^-11); for the
// k-quants, whose scales come from a heuristic search and are themselves quantized, it is a multiple of the
// block's spread: about 1.7 times the worst seen over these patterns and seeds with ggml's algorithm.
double error_bound(GgmlType type, const Stats& s, float x) {
    constexpr double fp16_eps = 1.0 / 2048;
    const double amax = s.amax, range = static_cast<double>(std::max(s.max, 0.0f)) - std::min(s.min, 0.0f);
    const double spread = static_cast<double>(s.max) - s.min, absmin = std::fabs(s.min);
    switch (type) {
        case GgmlType::F32: return 0.0;
        case GgmlType::F16: return std::max(std::fabs(x) * fp16_eps, std::ldexp(1.0, -25));  // half an ulp
        case GgmlType::BF16: return std::fabs(x) / 256;  // half an ulp: 8 significant bits
        case GgmlType::Q8_0:
        case GgmlType::Q8_1: return amax / 254 + amax * fp16_eps;
        case GgmlType::Q8_K: return amax / 254 + amax * 1e-6;  // d is a float
        case GgmlType::Q4_0: return amax / 8 + amax * fp16_eps;  // the level +8 is missing: up to one step
        case GgmlType::Q5_0: return amax / 16 + amax * fp16_eps;
        case GgmlType::Q4_1: return spread / 30 + (absmin + spread) * fp16_eps;
        case GgmlType::Q5_1: return spread / 62 + (absmin + spread) * fp16_eps;
        case GgmlType::Q2_K: return range * 0.4;
        case GgmlType::Q3_K: return amax * 0.45;
        case GgmlType::Q4_K: return range * 0.1;
        case GgmlType::Q5_K: return range * 0.05;
        case GgmlType::Q6_K: return amax * 0.035;
        default: return 0.0;
    }
}

// sqrt(sum (y - x)^2 / sum x^2).
double relative_rms_error(const std::vector<float>& x, const std::vector<float>& y) {
    double se = 0.0, sx = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double e = static_cast<double>(y[i]) - x[i];
        se += e * e;
        sx += static_cast<double>(x[i]) * x[i];
    }
    return std::sqrt(se / sx);
}

// Relative RMS error on gaussian rows: about 1.2 times what ggml's reference quantizers give (q4_0 ~0.085,
// q4_K ~0.071, q6_K ~0.018, q2_K ~0.30), so that a weaker scale search would show.
double gaussian_rms_bound(GgmlType type) {
    switch (type) {
        case GgmlType::F32: return 0.0;
        case GgmlType::F16: return 2.5e-4;
        case GgmlType::BF16: return 2.0e-3;
        case GgmlType::Q8_0:
        case GgmlType::Q8_1: return 0.0065;
        case GgmlType::Q8_K: return 0.0085;
        case GgmlType::Q4_0: return 0.105;
        case GgmlType::Q4_1: return 0.097;
        case GgmlType::Q5_0: return 0.052;
        case GgmlType::Q5_1: return 0.047;
        case GgmlType::Q2_K: return 0.37;
        case GgmlType::Q3_K: return 0.185;
        case GgmlType::Q4_K: return 0.087;
        case GgmlType::Q5_K: return 0.044;
        case GgmlType::Q6_K: return 0.021;
        default: return 0.0;
    }
}

}  // namespace

TEST_CASE("quant: round trips stay within each type's error bound", "[quant]") {
    const char* const types[] = {"f32",  "f16",  "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
                                 "q8_1", "q8_K", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"};
    for (const char* name : types) {
        DYNAMIC_SECTION(name) {
            const TypeTraits& t = type_traits(*type_from_name(name));
            double worst = 0.0;  // largest error / bound, and where it was
            std::string worst_at;
            for (int pattern = 0; pattern < 5; ++pattern) {
                for (uint32_t seed : {1u, 2u, 3u}) {
                    const std::vector<float> x = make_row(pattern, seed * 7919 + static_cast<uint32_t>(pattern));
                    const std::vector<uint8_t> q = quantize(t.type, x);
                    const std::vector<float> y = dequantize(t.type, q, x.size());
                    if (pattern == 0) {
                        INFO("seed " << seed);
                        CHECK(relative_rms_error(x, y) <= gaussian_rms_bound(t.type));
                    }
                    for (size_t b = 0; b < x.size(); b += static_cast<size_t>(t.block_size)) {
                        const Stats s = stats_of(&x[b], t.block_size);
                        for (size_t i = b; i < b + static_cast<size_t>(t.block_size); ++i) {
                            const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
                            const double bound = error_bound(t.type, s, x[i]);
                            const double ratio = bound > 0 ? err / bound : (err > 0 ? HUGE_VAL : 0.0);
                            if (ratio <= worst) continue;
                            worst = ratio;
                            worst_at = fmt::format("pattern {} seed {} element {}: x {:.9g} -> {:.9g}, bound {:.3g}",
                                                   pattern, seed, i, x[i], y[i], bound);
                        }
                    }
                }
            }
            INFO("largest error / bound " << worst << " at " << worst_at);
            CHECK(worst <= 1.0);
        }
    }
}

TEST_CASE("quant: zeros, extreme magnitudes, unaligned rows and the Q8 sums", "[quant]") {
    const char* const types[] = {"f16",  "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1",
                                 "q8_K", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"};
    for (const char* name : types) {
        DYNAMIC_SECTION(name) {
            const TypeTraits& t = type_traits(*type_from_name(name));
            SECTION("an all-zero row comes back as zeros") {
                const std::vector<float> zeros(512, 0.0f);
                for (float v : dequantize(t.type, quantize(t.type, zeros), zeros.size())) REQUIRE(v == 0.0f);
            }
            SECTION("tiny and huge rows stay finite and within their magnitude") {
                for (float scale : {1e-30f, 1e-8f, 1e4f}) {
                    std::vector<float> x = make_row(0, 5);
                    x.resize(512);
                    for (float& v : x) v *= scale;
                    const std::vector<float> y = dequantize(t.type, quantize(t.type, x), x.size());
                    const float amax = stats_of(x.data(), static_cast<int64_t>(x.size())).amax;
                    for (size_t i = 0; i < x.size(); ++i) {
                        INFO("scale " << scale << " element " << i);
                        REQUIRE(std::isfinite(y[i]));
                        REQUIRE(std::fabs(y[i] - x[i]) <= 2 * amax);
                    }
                }
            }
            SECTION("a row at an odd address decodes the same") {
                const std::vector<float> x = make_row(4, 9);
                const std::vector<uint8_t> q = quantize(t.type, x);
                std::vector<uint8_t> shifted(q.size() + 1);
                std::memcpy(shifted.data() + 1, q.data(), q.size());
                std::vector<float> y(x.size());
                dequantize_row(t.type, shifted.data() + 1, y.data(), static_cast<int64_t>(y.size()));
                CHECK(y == dequantize(t.type, q, x.size()));
            }
        }
    }
    SECTION("Q8_1 stores d * sum(q); Q8_K stores the sums of each 16 quants") {
        const std::vector<float> x = make_row(0, 3);
        const std::vector<uint8_t> q81 = quantize(GgmlType::Q8_1, x);
        const std::vector<uint8_t> q8k = quantize(GgmlType::Q8_K, x);
        for (size_t b = 0; b < x.size() / QK8_1; ++b) {
            BlockQ8_1 blk;
            std::memcpy(&blk, &q81[b * sizeof(blk)], sizeof(blk));
            float amax = 0.0f;
            for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, std::fabs(x[b * QK8_1 + j]));
            int sum = 0;
            for (int8_t v : blk.qs) sum += v;
            CHECK(blk.s == fp32_to_fp16(static_cast<float>(sum) * (amax / 127)));
        }
        for (size_t b = 0; b < x.size() / QK_K; ++b) {
            BlockQ8_K blk;
            std::memcpy(&blk, &q8k[b * sizeof(blk)], sizeof(blk));
            for (int k = 0; k < QK_K / 16; ++k) {
                int sum = 0;
                for (int e = 0; e < 16; ++e) sum += blk.qs[16 * k + e];
                CHECK(blk.bsums[k] == sum);
            }
        }
    }
}

}  // namespace test_quant
