// qwen35moe (Qwen3.5's MoE models: qwen35's gated delta nets and full-attention layers with a mixture of experts and
// a shared expert behind a sigmoid gate) against llama.cpp: the synthetic qwen35moe-tiny model
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic qwen35moe-tiny --dtype f32|f16 --save FILE`
// writes it: 5 layers, 0-2 and 4 recurrent, 3 full attention with gated queries and GQA; in every layer 8 experts of
// 64 features, 2 a token, and a shared expert of 96 with its gate) regenerated, saved and loaded back, then run on
// the reference backend and the CPU backend of every kernel family this machine has. References in tests/data/arch/:
// llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with
// tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/model/layer_matrices.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace test_arch_qwen35moe {

using namespace quill;

namespace {

constexpr int64_t kCtx = 256;

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: F32 1.3e-6 to 2.2e-6 on
// every backend; F16 2.0e-3 on the reference backend (it does not round the F16 products' inputs to fp16, which
// llama.cpp does, and the recurrence carries the difference on), 5.4e-4 to 8.0e-4 on the CPU backend's paths.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-4, 1e-4}, {GgmlType::F16, 4e-3, 1.5e-3}};


}  // namespace

TEST_CASE("qwen35moe tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp("qwen35moe-tiny", kCases, kCtx, false);
}

TEST_CASE("qwen35moe tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp("qwen35moe-tiny", kCases, kCtx, true);
}

TEST_CASE("qwen35moe: without the shared expert's gate the logits leave llama.cpp's", "[arch][reference][cpu]") {
    // The checks above can fail: the same model with each layer's gate vector dropped (the shared expert's output
    // added whole) is far outside their tolerance, on either backend.
    auto m = test::saved_synthetic("qwen35moe-tiny", GgmlType::F32);
    Weights ungated = m->weights;
    for (LayerWeights& L : ungated.layers) L.ffn_gate_inp_shexp.clear();
    const test::RefLogits ref = test::read_ref_logits(test::arch_ref_path("qwen35moe-tiny-f32.prompt_logits.txt"));
    ReferenceBackend reference(m->config, ungated, ReferenceBackendOptions{kCtx, 1, KvType::f32});
    auto cpu = test::arch_cpu_backend(m->config, ungated, cpu::Isa::generic, kCtx);
    for (Backend* b : {static_cast<Backend*>(&reference), static_cast<Backend*>(cpu.get())}) {
        INFO(b->name());
        const std::vector<float> got = test::prefill_logits(*b, ref.tokens);
        const int64_t nv = m->config.n_vocab;
        double worst = 0;
        for (size_t p = 0; p < ref.tokens.size(); ++p) {
            const auto [lo, hi] = std::minmax_element(ref.logits[p].begin(), ref.logits[p].end());
            worst = std::max(worst, test::max_diff(test::rows(got, nv, p, p + 1), ref.logits[p]) / (*hi - *lo));
        }
        CHECK(worst > 0.05);
    }
}

TEST_CASE("qwen35moe settings, experts and shared expert are read from the file as llama.cpp reads them",
          "[arch][model]") {
    auto m = test::saved_synthetic("qwen35moe-tiny", GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK(c.arch == "qwen35moe");
    CHECK((c.rope == ModelConfig::Rope::neox && c.recurrent() && c.attn_out_gate && c.full_attn_interval == 4));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_ff == 96));
    CHECK((c.moe_shared_expert && c.moe_shared_gate && c.moe_norm_weights && c.dense_ffn()));
    for (int64_t l : {2, 3}) {  // a recurrent layer and the full-attention one
        INFO("layer " << l);
        const LayerWeights& L = m->weights.layers[l];
        CHECK(L.recurrent() == (l != 3));
        CHECK(L.ffn_gate_inp_shexp.size() == 128);
        CHECK(L.ffn_norm.size() == 128);  // (the file's post_attention_norm)
        CHECK((L.ffn_gate.n_rows() == 96 && L.ffn_down.ne[0] == 96 && L.experts.size() == 8));
        // The layer's matrices: the mixer's (delta net five, attention four), the shared expert's three, the router,
        // each expert's three.
        const auto mats = layer_matrices(L);
        const size_t mixer = l == 3 ? 4 : 5;
        REQUIRE(mats.size() == mixer + 3 + 1 + 3 * 8);
        CHECK(mats[mixer]->name == fmt::format("blk.{}.ffn_gate_shexp.weight", l));
        CHECK(mats[mixer + 2]->name == fmt::format("blk.{}.ffn_down_shexp.weight", l));
        CHECK(mats[mixer + 3]->name == fmt::format("blk.{}.ffn_gate_inp.weight", l));
    }
    // The released shape: Qwen3.5-35B-A3B, and its first 8 layers.
    for (const char* shape : {"qwen3.5-35b-a3b", "qwen3.5-35b-a3b-8l"}) {
        const ModelConfig big = synthetic_config(shape);
        CHECK((big.arch == "qwen35moe" && big.n_embd == 2048 && big.n_head == 16 && big.n_head_kv == 2 &&
               big.head_dim == 256 && big.n_rot == 64 && big.n_expert == 256 && big.n_expert_used == 8 &&
               big.n_ff_exp == 512 && big.n_ff == 512 && big.ssm_n_v_heads == 32 && big.n_vocab == 248320));
        CHECK(big.n_layer == (std::string(shape).ends_with("-8l") ? 8 : 40));
    }
}

TEST_CASE("qwen35moe: a token's logits have the same bits in any batch as alone, a prompt's in one batch as one at "
          "a time", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("qwen35moe-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
    auto m = SyntheticModel::make(synthetic_config("qwen35moe-tiny"), GgmlType::Q8_0, 7);
    const auto tokens = test::some_tokens(12, static_cast<int>(m->config.n_vocab), 5);
    for (cpu::Isa isa : test::model_test_isas()) {
        INFO(cpu::isa_name(isa));
        auto one = test::arch_cpu_backend(m->config, m->weights, isa, 64);
        auto many = test::arch_cpu_backend(m->config, m->weights, isa, 64);
        CHECK(test::max_diff(test::prefill_logits(*many, tokens), test::stepwise_logits(*one, tokens)) == 0.0);
    }
}

TEST_CASE("quill run and chat work end to end on a qwen35moe file with Qwen3.5's chat template, and --device auto "
          "runs it on the CPU", "[arch][cli]") {
    // (the template Qwen ships with Qwen3.5-4B, the one its MoE models use too)
    test::check_run_and_chat("qwen35moe-tiny", "Qwen3.5-4B.jinja",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96"});
}

}  // namespace test_arch_qwen35moe
