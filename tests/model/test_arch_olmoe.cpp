// olmoe (OLMoE-1B-7B: qwen3moe's layers with Q/K norms over the whole projection and its experts weighted by their
// shares of the softmax over all of them) against llama.cpp: the synthetic olmoe-tiny model
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic olmoe-tiny --dtype f32|f16 --save FILE` writes
// it: 3 layers, each with 8 experts of 64 features, 4 a token, weighted by their softmax shares not renormalized; 4
// heads of 32 and as many KV heads (llama.cpp's olmoe sizes the K norm n_embd) whose Q and K are RMS-normalized over
// the whole projection of 128 values, then rotated in NEOX pairs) regenerated, saved and loaded back, then run on the reference backend and the CPU backend
// of every kernel family this machine has. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's
// vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its
// header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_olmoe {

using namespace quill;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "olmoe-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("olmoe tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("olmoe tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA", "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("olmoe: per-head Q/K norms or renormalized expert weights (qwen3moe's) each leave llama.cpp's logits",
          "[arch][reference][cpu]") {
    // The checks above can fail: each place where olmoe differs from qwen3moe, done qwen3moe's way, is far outside
    // their tolerance on either backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"per-head Q/K norms",
         [](ModelConfig& c, Weights& w) {
             for (LayerWeights& L : w.layers) {
                 L.attn_q_norm.resize(static_cast<size_t>(c.head_dim));
                 L.attn_k_norm.resize(static_cast<size_t>(c.head_dim));
             }
         }},
        {"renormalized", [](ModelConfig& c, Weights&) { c.moe_norm_weights = true; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-2);
    }
}

TEST_CASE("olmoe settings, whole-projection Q/K norms and experts are read from the file as llama.cpp reads them",
          "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen3moe" && c.file_arch == "olmoe" && c.qk_norm_whole && c.rope == ModelConfig::Rope::neox));
    CHECK((c.n_expert == 8 && c.n_expert_used == 4 && c.n_ff_exp == 64 && c.n_ff == 64 && c.head_dim == 32));
    CHECK((!c.moe_gating_sigmoid && !c.moe_selection_bias && !c.moe_norm_weights && !c.moe_routing_general()));
    for (const LayerWeights& L : m->weights.layers) {
        CHECK((L.experts.size() == 8 && L.ffn_exp_probs_b.empty() && L.ffn_gate.data == nullptr));
        CHECK((L.attn_q_norm.size() == 128 && L.attn_k_norm.size() == 128));
    }
    CHECK(!m->weights.output_tied);
    // OLMoE-1B-7B's shape: 16 layers of 64 experts of 1024 (8 a token)
    const ModelConfig big = synthetic_config("olmoe-1b-7b");
    CHECK((big.file_arch == "olmoe" && big.n_layer == 16 && big.n_embd == 2048 && big.n_head == 16 &&
           big.n_head_kv == 16 && big.n_expert == 64 && big.n_expert_used == 8 && big.n_ff_exp == 1024 &&
           big.n_vocab == 50304));
}

TEST_CASE("olmoe: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("quill run and chat work end to end on an olmoe file, and --device auto runs it on the CPU", "[arch][cli]") {
    // (no OLMoE template in the corpus: the file's own, the synthetic model's ChatML-like one)
    test::check_run_and_chat(kShape, "", {"n_expert=8 n_expert_used=4 n_ff_exp=64"});
}

}  // namespace test_arch_olmoe
