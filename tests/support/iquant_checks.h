// The checks every i-quant type without a quantizer passes (the IQ2 and IQ1 tests run them on each of their
// types): quill's dequantizer against ggml's on tests/data/quant/<type>.txt, random_blocks, the CPU kernels of every
// ISA against the dequantized weights alone and in a batch, and a tiny model on the CPU backend against the reference.
#pragma once

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/thread_pool.h"
#include "engine/reference/reference_backend.h"
#include "engine/format/quant_random.h"
#include "tests/support/backend_checks.h"
#include "tests/support/quant_vectors.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace quill::test {

// The type's dequantizer gives ggml's floats bit for bit on its reference vector.
inline void check_ggml_vector(GgmlType type) {
    const std::string name(type_name(type));
    INFO(name);
    const test::QuantVector v = test::read_quant_vector(name);
    const TypeTraits& t = type_traits(type);
    CHECK(v.header.at("type") == name);
    CHECK(static_cast<uint32_t>(type) == std::stoul(v.header.at("ggml_type_id")));
    CHECK(t.block_size == std::stoll(v.header.at("blck_size")));
    CHECK(t.type_size == std::stoul(v.header.at("type_size")));
    const auto n = static_cast<int64_t>(v.dequantized.size());
    REQUIRE(n == std::stoll(v.header.at("n")));
    REQUIRE(v.bytes.size() == row_size(type, n));
    std::vector<float> y(v.dequantized.size());
    dequantize_row(type, v.bytes.data(), y.data(), n);
    std::vector<uint32_t> got, want;
    for (size_t i = 0; i < y.size(); ++i) {
        got.push_back(test::float_bits(y[i]));
        want.push_back(test::float_bits(v.dequantized[i]));
    }
    const auto at = std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin();
    INFO(fmt::format("first difference at element {}", at));
    CHECK(got == want);
}

// random_blocks is reproducible, valid and of the asked magnitude.
inline void check_random_blocks(GgmlType type) {
    INFO(type_name(type));
    REQUIRE(random_blocks_supported(type));
    const int64_t nb = 64;
    std::vector<uint8_t> a(row_size(type, nb * QK_K)), b(a.size()), c(a.size());
    random_blocks(type, 5, nb, 0.05f, a.data());
    random_blocks(type, 5, nb, 0.05f, b.data());
    random_blocks(type, 6, nb, 0.05f, c.data());
    CHECK(a == b);
    CHECK(a != c);
    std::vector<float> y(static_cast<size_t>(nb * QK_K));
    dequantize_row(type, a.data(), y.data(), nb * QK_K);
    double sq = 0;
    for (float f : y) sq += static_cast<double>(f) * f;
    const double rms = std::sqrt(sq / static_cast<double>(y.size()));
    // Uniform floats in [-0.05, 0.05] have an RMS of 0.029.
    CHECK(rms > 0.5 * 0.05 / std::sqrt(3.0));
    CHECK(rms < 2.0 * 0.05 / std::sqrt(3.0));
}

// Each ISA's kernels equal a dot of the dequantized weights with the int8 activations, and a token's outputs have
// the same bits alone and in a batch.
inline void check_kernels(GgmlType type) {
    // matmul_reference's sum in double of the dequantized weights times the activations as the kernels see them
    // (int8 blocks, reference_activations): the kernels' integer dots are exact, so only float rounding separates
    // them (1e-5 of sum |w x|). Rows: 37 (ragged tiles of 8 and 16); tokens: the decode paths (1-3) and the batch
    // ones (8, 17).
    std::mt19937 rng(61);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    cpu::ThreadPool pool(2);
    const int64_t n_out = 37, n_in = 768;
    const size_t rb = row_size(type, n_in);
    std::vector<uint8_t> w(rb * n_out);
    random_blocks(type, 9, n_out * n_in / QK_K, 0.05f, w.data());
    std::vector<float> wd(static_cast<size_t>(n_out * n_in));
    dequantize_row(type, w.data(), wd.data(), n_out * n_in);
    const cpu::WeightMatrix m{type, w.data(), n_in, n_out, rb};
    std::vector<float> x(static_cast<size_t>(17 * n_in));
    for (float& v : x) v = normal(rng);
    for (cpu::Isa isa : test::model_test_isas()) {
        // Each token alone first: the bits every batch must give it.
        std::vector<float> alone(static_cast<size_t>(17 * n_out));
        for (int64_t t = 0; t < 17; ++t) {
            cpu::Activations act;
            act.set(x.data() + t * n_in, 1, n_in);
            cpu::matmul(m, act, alone.data() + t * n_out, pool, isa);
        }
        for (int64_t n_tokens : {1, 2, 3, 8, 17}) {
            INFO(type_name(type) << ", " << n_tokens << " tokens, " << cpu::isa_name(isa));
            const std::vector<float> xq = cpu::reference_activations(type, x.data(), n_tokens, n_in);
            cpu::Activations act;
            act.set(x.data(), n_tokens, n_in);
            std::vector<float> y(static_cast<size_t>(n_tokens * n_out), std::nanf(""));
            cpu::matmul(m, act, y.data(), pool, isa);
            CHECK(test::dot_mismatches(wd, xq, y, n_tokens, n_out, n_in) == 0);
            int moved = 0;
            for (int64_t i = 0; i < n_tokens * n_out; ++i)
                moved += test::float_bits(y[i]) != test::float_bits(alone[i]);
            CHECK(moved == 0);
        }
    }
}

// A tiny model of the type runs on every ISA as on the reference backend, prefill as decode.
inline void check_tiny_model(GgmlType type) {
    // The reference backend dequantizes and sums in double; the fast path rounds each matmul input to int8 blocks,
    // and one int8 rounding flip moves the logits of these random models by up to a few per cent of their RMS (the
    // bound of every block-quantized type in test_reference.cpp: 0.15 of the RMS). Prefill and step-by-step decode
    // run the same sums in the same order (batch invariance): the same bits.
    test::TinySpec spec;
    spec.type = spec.ffn_down_type = type;
    spec.n_embd = 256;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 512;
    auto model = test::make_tiny_model(spec);
    const auto tokens = test::some_tokens(12, static_cast<int>(spec.n_vocab), 5);
    ReferenceBackend ref(model->config, model->weights, ReferenceBackendOptions{64, 1, KvType::f16});
    const std::vector<float> want = test::prefill_logits(ref, tokens);
    REQUIRE(test::rms(want) > 0.1);
    for (cpu::Isa isa : test::model_test_isas()) {
        INFO(type_name(type) << ", " << cpu::isa_name(isa));
        cpu::CpuBackendOptions o;
        o.n_threads = 2;
        o.n_ctx = 64;
        o.isa = isa;
        cpu::CpuBackend batched(model->config, model->weights, o), stepped(model->config, model->weights, o);
        const std::vector<float> got = test::prefill_logits(batched, tokens);
        CHECK(test::max_diff(got, want) <= 0.15 * test::rms(want));
        CHECK(test::max_diff(got, test::stepwise_logits(stepped, tokens)) == 0.0);
    }
}

}  // namespace quill::test
