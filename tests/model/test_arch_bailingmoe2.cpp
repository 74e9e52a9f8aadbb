// bailingmoe2 (Ling 2.0 mini and flash, Ring 2.0: qwen3moe's layers with Q, K and V in one matrix, partial RoPE and
// DeepSeek-V3-style routing in expert groups beside a shared expert) against llama.cpp: the synthetic
// bailingmoe2-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic bailingmoe2-tiny --dtype
// f32|f16 --save FILE` writes it: 3 layers, layer 0 a dense FFN of 192, layers 1 and 2 with 8 experts of 64 in 4
// groups, of which the 2 with the best pairs of biased sigmoids are used, 2 experts a token weighted by their
// normalized sigmoids times 2.5, beside a shared expert of 96; 4 heads of 32 (2 KV heads) with per-head Q/K norms,
// rotated in NEOX pairs over 16 of their dims; one multi-token-prediction block written after them and never run)
// regenerated, saved and loaded back, then run on the reference backend and the CPU backend of every kernel family
// this machine has. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32,
// n_ctx 256) over the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says how):
// dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_bailingmoe2 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "bailingmoe2-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("bailingmoe2 tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("bailingmoe2 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("bailingmoe2: no selection bias, softmax gating, no expert groups or every dim rotated each leave "
          "llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature of bailingmoe2's, turned off, is far outside their tolerance on either
    // backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"no selection bias",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) std::fill(L.ffn_exp_probs_b.begin(), L.ffn_exp_probs_b.end(), 0.0f);
         }},
        {"softmax", [](ModelConfig& c, Weights&) { c.moe_gating_sigmoid = false; }},
        {"no groups", [](ModelConfig& c, Weights&) { c.moe_n_group = c.moe_n_group_used = 0; }},
        {"every dim rotated", [](ModelConfig& c, Weights&) { c.n_rot = c.head_dim; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-2);
    }
}

TEST_CASE("bailingmoe2 settings, fused QKV, groups, shared expert and MTP block are read from the file as llama.cpp "
          "reads them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen3moe" && c.file_arch == "bailingmoe2" && !c.qk_norm_whole));
    CHECK((c.rope == ModelConfig::Rope::neox && c.n_rot == 16 && c.head_dim == 32 && c.n_head_kv == 2));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 1));
    CHECK((c.moe_n_group == 4 && c.moe_n_group_used == 2 && c.n_layer == 3 && c.n_layer_nextn == 1));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 2.5f));
    CHECK((c.moe_shared_expert && c.layer_n_ff(0) == 192 && c.layer_n_ff(1) == 96 && c.layer_n_ff(2) == 96));
    const LayerWeights& dense = m->weights.layers[0];
    CHECK((dense.experts.empty() && dense.ffn_exp_probs_b.empty() && dense.ffn_gate.name == "blk.0.ffn_gate.weight"));
    for (size_t l = 1; l < 3; ++l) {
        const LayerWeights& L = m->weights.layers[l];
        CHECK((L.experts.size() == 8 && L.ffn_exp_probs_b.size() == 8 && L.ffn_gate.n_rows() == 96));
        CHECK((L.attn_qkv.data != nullptr && L.wq.n_rows() == 128 && L.wk.n_rows() == 64 && L.wv.n_rows() == 64));
        CHECK((L.attn_q_norm.size() == 32 && L.attn_k_norm.size() == 32 && L.bq.empty()));
    }
    CHECK(!m->weights.output_tied);
    // Ling-mini-2.0's shape: 20 layers, the first dense, 256 experts of 512 in 8 groups (4 used), 8 a token
    const ModelConfig big = synthetic_config("ling-mini-2.0");
    CHECK((big.file_arch == "bailingmoe2" && big.n_layer == 20 && big.n_embd == 2048 && big.n_head == 16 &&
           big.n_head_kv == 4 && big.head_dim == 128 && big.n_rot == 64 && big.n_expert == 256 &&
           big.n_expert_used == 8 && big.moe_n_group == 8 && big.moe_n_group_used == 4 && big.n_ff_exp == 512 &&
           big.layer_n_ff(0) == 5120 && big.layer_n_ff(1) == 512 && big.n_vocab == 157184));
}

TEST_CASE("bailingmoe2: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("bailingmoe2 files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_bailingmoe2_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("bailingmoe2.expert_gating_func", uint32_t(3)); },
         "metadata 'bailingmoe2.expert_gating_func' is 3, expected 1 (softmax) or 2 (sigmoid): the expert gating "
         "functions quill supports for bailingmoe2"},
        {"groups", [](GgufWriter& w) { w.set("bailingmoe2.expert_group_count", uint32_t(3)); },
         "metadata 'bailingmoe2.expert_group_count' 3 does not divide expert_count 8 or expert_group_used_count is "
         "0"},
        {"shared", [](GgufWriter& w) { w.set("bailingmoe2.expert_shared_count", uint32_t(0)); },
         "metadata 'bailingmoe2.expert_shared_count' is 0, expected 1..64"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a bailingmoe2 file with Ling's chat template, --device auto runs it "
          "on the CPU, and its layers split over two CPUs give the same text", "[arch][cli]") {
    // (the corpus has Ling 3.0's published template, the Bailing family's turns; Ling 2.0's is not in it)
    test::check_run_and_chat(kShape, "inclusionai-ling-3.0-flash.jinja",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96",
                              "gating=sigmoid with a selection bias, normalized=true scale=2.5 leading_dense=1"});
    // (the MTP block after the layers belongs to neither range)
    const std::string file = (test::temp_dir("arch_bailingmoe2_split") / "bailingmoe2-tiny.gguf").string();
    SyntheticModel::make(synthetic_config(kShape), GgmlType::F16, 42)->save(file);
    test::check_split_over_two_cpus(file, "2 of 3 layers on cpu (layers 0-1");
}

}  // namespace test_arch_bailingmoe2
