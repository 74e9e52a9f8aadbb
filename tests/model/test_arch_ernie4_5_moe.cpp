// ernie4_5-moe (ERNIE-4.5-21B-A3B, 300B-A47B: ernie4_5's layers with softmax-routed experts after the leading dense
// ones) against llama.cpp: the synthetic ernie4_5-moe-tiny model (engine/model/synthetic.cpp, seed 42, as
// `quill bench --synthetic ernie4_5-moe-tiny --dtype f32|f16 --save FILE` writes it: ernie4_5-tiny's 3 layers
// (adjacent RoPE pairs, a tied output), layer 0 a dense FFN of 256, layers 1 and 2 with 8 experts of 64 features, 2 a
// token, chosen by the softmax of their logits plus a selection bias and weighted by the chosen probabilities
// renormalized, beside an ungated shared expert of 96) regenerated, saved and loaded back, then run on the reference
// backend and the CPU backend of every kernel family this machine has. References in tests/data/arch/: llama.cpp
// (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with
// tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
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

namespace test_arch_ernie4_5_moe {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "ernie4_5-moe-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("ernie4_5-moe tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("ernie4_5-moe tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("ernie4_5-moe: no selection bias, sigmoid gating or weights not renormalized each leave llama.cpp's logits",
          "[arch][reference][cpu]") {
    // The checks above can fail: each place where ernie4_5-moe's routing differs from its neighbours', done their way
    // (qwen3moe's softmax without a bias, glm4moe's sigmoid, qwen2moe's shares), is far outside their tolerance.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"no selection bias",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) std::fill(L.ffn_exp_probs_b.begin(), L.ffn_exp_probs_b.end(), 0.0f);
         }},
        {"sigmoid", [](ModelConfig& c, Weights&) { c.moe_gating_sigmoid = true; }},
        {"not renormalized", [](ModelConfig& c, Weights&) { c.moe_norm_weights = false; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-2);
    }
}

TEST_CASE("ernie4_5-moe settings, leading dense layer, experts and shared expert are read from the file as llama.cpp "
          "reads them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "ernie4_5" && c.file_arch == "ernie4_5-moe" && c.rope == ModelConfig::Rope::adjacent));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 1));
    CHECK((!c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 1.0f));
    CHECK((c.moe_shared_expert && !c.moe_shared_gate && !c.layer_moe(0) && c.layer_moe(1) && c.layer_moe(2)));
    CHECK((c.layer_n_ff(0) == 256 && c.layer_n_ff(1) == 96 && c.n_ff == 256));
    const LayerWeights& dense = m->weights.layers[0];
    CHECK((dense.experts.empty() && dense.ffn_exp_probs_b.empty() && dense.ffn_gate.n_rows() == 256));
    const LayerWeights& L = m->weights.layers[2];
    CHECK((L.experts.size() == 8 && L.ffn_exp_probs_b.size() == 8 && L.ffn_gate_inp_shexp.empty()));
    CHECK((L.ffn_gate.name == "blk.2.ffn_gate_shexp.weight" && L.ffn_gate.n_rows() == 96));
    CHECK((L.attn_q_norm.empty() && L.bq.empty() && m->weights.output_tied));
    // ERNIE-4.5-21B-A3B's shape: 28 layers, the first dense, 64 experts of 1536 (6 a token), a shared one of 3072
    const ModelConfig big = synthetic_config("ernie-4.5-21b-a3b");
    CHECK((big.file_arch == "ernie4_5-moe" && big.n_layer == 28 && big.n_embd == 2560 && big.n_head == 20 &&
           big.n_head_kv == 4 && big.head_dim == 128 && big.n_expert == 64 && big.n_expert_used == 6 &&
           big.n_ff_exp == 1536 && big.layer_n_ff(0) == 12288 && big.layer_n_ff(1) == 3072 &&
           big.n_leading_dense == 1 && big.n_vocab == 103424));
}

TEST_CASE("ernie4_5-moe: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("ernie4_5-moe files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_ernie4_5_moe_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"step", [](GgufWriter& w) { w.set("ernie4_5-moe.interleave_moe_layer_step", uint32_t(2)); },
         "metadata 'ernie4_5-moe.interleave_moe_layer_step' is 2, expected 1 (experts in every layer after the "
         "leading dense ones: the ERNIE-4.5 mixtures quill supports)"},
        {"dense", [](GgufWriter& w) { w.set("ernie4_5-moe.leading_dense_block_count", uint32_t(9)); },
         "metadata 'ernie4_5-moe.leading_dense_block_count' is 9, expected 0..3"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on an ernie4_5-moe file, and --device auto runs it on the CPU",
          "[arch][cli]") {
    // (no ERNIE-4.5 template in the corpus: the file's own, the synthetic model's ChatML-like one)
    test::check_run_and_chat(kShape, "",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96",
                              "gating=softmax with a selection bias, normalized=true scale=1.0 leading_dense=1"});
}

}  // namespace test_arch_ernie4_5_moe
