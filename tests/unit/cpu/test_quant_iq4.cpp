// Tests of the non-linear 4-bit types IQ4_NL, IQ4_XS and MXFP4 in engine/format: quill's codecs against ggml's
// on tests/data/quant/<type>.txt (made by the llama.cpp that llama-cpp-python 0.3.36 vendors: ggml_quantize_chunk
// without an importance matrix and the type's to_float, on the 1,024 inputs of ../shared/testdata/quant), byte for
// byte and bit for bit, the round-trip error of each, and a model quantized to each against the same model in F32.
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/matmul.h"
#include "engine/format/quant.h"
#include "tests/support/backend_checks.h"
#include "tests/support/quant_vectors.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace test_quant_iq4 {

using namespace quill;

using test::float_bits;
using test::read_quant_vector;

TEST_CASE("quant iq4: quill's codecs match ggml's vectors byte for byte", "[quant][iq4]") {
    for (const char* name : {"iq4_nl", "iq4_xs", "mxfp4"}) {
        DYNAMIC_SECTION(name) {
            const test::QuantVector v = read_quant_vector(name);
            const GgmlType type = *type_from_name(name);
            const TypeTraits& t = type_traits(type);
            CHECK(v.header.at("type") == name);
            CHECK(static_cast<uint32_t>(type) == std::stoul(v.header.at("ggml_type_id")));
            CHECK(t.block_size == std::stoll(v.header.at("blck_size")));
            CHECK(t.type_size == std::stoul(v.header.at("type_size")));
            const auto n = static_cast<int64_t>(v.input.size());
            REQUIRE(n == 1024);
            REQUIRE(v.bytes.size() == row_size(type, n));
            REQUIRE(v.dequantized.size() == v.input.size());

            // Floats compared as bits (-0 and 0 differ), bytes as bytes; the first difference of each is shown.
            std::vector<float> y(v.input.size());
            dequantize_row(type, v.bytes.data(), y.data(), n);
            std::vector<uint32_t> got_bits, want_bits;
            for (size_t i = 0; i < y.size(); ++i) {
                got_bits.push_back(float_bits(y[i]));
                want_bits.push_back(float_bits(v.dequantized[i]));
            }
            const auto f = std::mismatch(got_bits.begin(), got_bits.end(), want_bits.begin()).first - got_bits.begin();
            INFO(fmt::format("first float difference at element {}", f));
            CHECK(got_bits == want_bits);

            std::vector<uint8_t> q(v.bytes.size());
            quantize_row(type, v.input.data(), q.data(), n);
            const auto at = static_cast<size_t>(std::mismatch(q.begin(), q.end(), v.bytes.begin()).first - q.begin());
            INFO(fmt::format("first byte difference: block {} byte {}", at / t.type_size, at % t.type_size));
            CHECK(q == v.bytes);
        }
    }
}

TEST_CASE("quant iq4: round trips of Gaussian rows stay near the value grid", "[quant][iq4]") {
    // Relative RMS error of a unit Gaussian row: the 16 levels give about 0.1 for IQ4 (ggml's own figure is near
    // Q4_K's); MXFP4's power-of-two scale and E2M1 grid cost more.
    const std::pair<const char*, double> bounds[] = {{"iq4_nl", 0.12}, {"iq4_xs", 0.12}, {"mxfp4", 0.2}};
    std::mt19937 rng(7);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    for (const auto& [name, bound] : bounds) {
        DYNAMIC_SECTION(name) {
            const GgmlType type = *type_from_name(name);
            std::vector<float> x(4096), y(x.size());
            for (float& f : x) f = 0.02f * gauss(rng);
            std::vector<uint8_t> q(row_size(type, static_cast<int64_t>(x.size())));
            quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size()));
            dequantize_row(type, q.data(), y.data(), static_cast<int64_t>(x.size()));
            double err = 0, ref = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
                ref += static_cast<double>(x[i]) * x[i];
            }
            const double rel = std::sqrt(err / ref);
            INFO("relative RMS error " << rel);
            CHECK(rel < bound);
            CHECK(rel > 0.01);  // a real 4-bit code, not a copy
        }
    }
}

TEST_CASE("quant iq4: zero blocks and the MXFP4 scale's range", "[quant][iq4]") {
    for (const char* name : {"iq4_nl", "iq4_xs", "mxfp4"}) {
        DYNAMIC_SECTION(name) {
            const GgmlType type = *type_from_name(name);
            std::vector<float> x(256, 0.0f), y(256, 1.0f);
            std::vector<uint8_t> q(row_size(type, 256));
            quantize_row(type, x.data(), q.data(), 256);
            dequantize_row(type, q.data(), y.data(), 256);
            for (float f : y) CHECK(f == 0.0f);
        }
    }
    // E8M0: 2^(e - 127), halved because the E2M1 table is doubled; e = 0 and 1 are subnormal floats.
    CHECK(mxfp4_scale(127) == 0.5f);
    CHECK(mxfp4_scale(130) == 4.0f);
    CHECK(mxfp4_scale(1) == std::ldexp(1.0f, -127));
    CHECK(mxfp4_scale(0) == std::ldexp(1.0f, -128));
    CHECK(mxfp4_scale(254) == std::ldexp(1.0f, 126));
}

TEST_CASE("quant iq4: a model quantized to each type gives logits as close to the F32 model's as Q4_0's, on every "
          "ISA", "[quant][iq4]") {
    // The same random floats in F32 and quantized by quill (make_tiny_model quantizes with quantize_row); the
    // logits differ by the weights' 4-bit error and the int8 activations. On these uniform random weights Q4_0 is
    // 0.21 of the logit range off, Q4_K 0.15, IQ4_NL and IQ4_XS 0.19, MXFP4 (two fewer levels, a power-of-two scale)
    // 0.35.
    test::TinySpec spec;
    spec.n_embd = 256;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 512;
    const auto tokens = test::some_tokens(10, static_cast<int>(spec.n_vocab), 3);
    cpu::CpuBackendOptions o;
    o.n_ctx = 64;
    auto logits = [&](GgmlType type) {
        spec.type = spec.ffn_down_type = type;
        auto model = test::make_tiny_model(spec);
        return test::prefill_logits(*std::make_unique<cpu::CpuBackend>(model->config, model->weights, o), tokens);
    };
    const std::vector<float> want = logits(GgmlType::F32);
    auto error = [&](const std::vector<float>& got) { return test::max_diff(got, want) / test::max_abs(want); };
    const double q4_0 = error(logits(GgmlType::Q4_0));
    for (GgmlType type : {GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4}) {
        for (cpu::Isa isa : test::available_isas()) {
            o.isa = isa;
            const double rel = error(logits(type));
            INFO(type_name(type) << ", " << cpu::isa_name(isa) << ": max |quantized - f32| / max |f32| = " << rel
                                 << ", Q4_0's " << q4_0);
            CHECK(rel < (type == GgmlType::MXFP4 ? 2.0 : 1.0) * q4_0);
            CHECK(rel > 0.1 * q4_0);  // the weights really are quantized
        }
        o.isa.reset();
    }
}

TEST_CASE("quant iq4: each ISA's kernels equal a dot of the dequantized weights with the int8 activations",
          "[quant][iq4][matmul]") {
    // matmul_reference multiplies the dequantized weights with the activations as the kernels see them (int8 per
    // block of 32, reference_activations) in double: the kernels' integer dots are exact, so only float rounding
    // separates them (1e-5 of sum |w x|). Rows: 37 (ragged tiles of 8 and 16), tokens: the decode paths (1-3) and
    // the repacked and lane paths (8, 17).
    std::mt19937 rng(54);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    cpu::ThreadPool pool(2);
    for (GgmlType type : {GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4}) {
        const int64_t n_out = 37, n_in = 768;
        const size_t rb = row_size(type, n_in);
        std::vector<uint8_t> w(rb * n_out);
        std::vector<float> row(n_in), wd(static_cast<size_t>(n_out * n_in));
        for (int64_t r = 0; r < n_out; ++r) {
            for (float& v : row) v = (0.05f + 0.01f * static_cast<float>(r)) * normal(rng);
            quantize_row(type, row.data(), w.data() + rb * r, n_in);
            dequantize_row(type, w.data() + rb * r, wd.data() + r * n_in, n_in);
        }
        const cpu::WeightMatrix m{type, w.data(), n_in, n_out, rb};
        for (int64_t n_tokens : {1, 2, 3, 8, 17}) {
            std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
            for (float& v : x) v = normal(rng);
            const std::vector<float> xq = cpu::reference_activations(type, x.data(), n_tokens, n_in);
            for (cpu::Isa isa : test::available_isas()) {
                INFO(type_name(type) << ", " << n_tokens << " tokens, " << cpu::isa_name(isa));
                cpu::Activations act;
                act.set(x.data(), n_tokens, n_in);
                std::vector<float> y(static_cast<size_t>(n_tokens * n_out), std::nanf(""));
                cpu::matmul(m, act, y.data(), pool, isa);
                CHECK(test::dot_mismatches(wd, xq, y, n_tokens, n_out, n_in) == 0);
            }
        }
    }
}

}  // namespace test_quant_iq4
