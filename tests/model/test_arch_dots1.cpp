// dots1 (rednote dots.llm1: qwen3moe's layers without grouped-query attention and DeepSeek-V3-style routing beside two
// shared experts after a leading dense layer) against llama.cpp: the synthetic dots1-tiny model
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic dots1-tiny --dtype f32|f16 --save FILE` writes
// it: 3 layers, layer 0 a dense FFN of 192, layers 1 and 2 with 8 experts of 64, 2 a token, chosen by sigmoid(logit)
// + a selection bias and weighted by the normalized sigmoids times 2.5, beside two shared experts of 64 (one FFN of
// 128); 4 heads of 32 and as many KV heads, per-head Q/K norms, every dim rotated in NEOX pairs) regenerated, saved
// and loaded back, then run on the reference backend and the CPU backend of every kernel family this machine has.
// References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over
// the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says how):
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

namespace test_arch_dots1 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "dots1-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("dots1 tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("dots1 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA", "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("dots1: no selection bias, softmax gating, unscaled weights or no shared experts each leave llama.cpp's "
          "logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature of dots1's, turned off, is far outside their tolerance on either backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"no selection bias",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) std::fill(L.ffn_exp_probs_b.begin(), L.ffn_exp_probs_b.end(), 0.0f);
         }},
        {"softmax", [](ModelConfig& c, Weights&) { c.moe_gating_sigmoid = false; }},
        {"unscaled", [](ModelConfig& c, Weights&) { c.moe_weights_scale = 1.0f; }},
        {"no shared experts", [](ModelConfig& c, Weights&) { c.moe_shared_expert = false; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-2);
    }
}

TEST_CASE("dots1 settings, leading dense layer, experts and shared experts are read from the file as llama.cpp reads "
          "them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen3moe" && c.file_arch == "dots1" && !c.qk_norm_whole && c.n_layer_nextn == 0));
    CHECK((c.rope == ModelConfig::Rope::neox && c.n_rot == 32 && c.head_dim == 32 && c.n_head_kv == 4));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 1));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 2.5f));
    CHECK((c.moe_n_group == 0 && c.moe_shared_expert && c.n_expert_shared == 2));
    CHECK((c.layer_n_ff(0) == 192 && c.layer_n_ff(1) == 128 && c.layer_n_ff(2) == 128));
    const LayerWeights& dense = m->weights.layers[0];
    CHECK((dense.experts.empty() && dense.ffn_exp_probs_b.empty() && dense.ffn_gate.n_rows() == 192));
    const LayerWeights& L = m->weights.layers[2];
    CHECK((L.experts.size() == 8 && L.ffn_exp_probs_b.size() == 8 && L.ffn_gate.name == "blk.2.ffn_gate_shexp.weight"));
    CHECK((L.attn_q_norm.size() == 32 && L.attn_k_norm.size() == 32 && L.attn_qkv.data == nullptr));
    CHECK(!m->weights.output_tied);
    // dots.llm1's shape: 62 layers, the first dense of 10944, 128 experts of 1408 (6 a token), two shared
    const ModelConfig big = synthetic_config("dots1");
    CHECK((big.file_arch == "dots1" && big.n_layer == 62 && big.n_embd == 4096 && big.n_head == 32 &&
           big.n_head_kv == 32 && big.head_dim == 128 && big.n_expert == 128 && big.n_expert_used == 6 &&
           big.n_ff_exp == 1408 && big.layer_n_ff(0) == 10944 && big.layer_n_ff(1) == 2816 &&
           big.n_vocab == 152064));
}

TEST_CASE("dots1: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("dots1 files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_dots1_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("dots1.expert_gating_func", uint32_t(0)); },
         "metadata 'dots1.expert_gating_func' is 0, expected 1 (softmax) or 2 (sigmoid): the expert gating functions "
         "quill supports for dots1"},
        {"gqa", [](GgufWriter& w) { w.set("dots1.attention.head_count_kv", uint32_t(2)); },
         "dots1 with 2 KV heads for 4 heads, 32 of 32 dims rotated: llama.cpp's dots1 needs as many KV heads as "
         "heads and every dim rotated"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a dots1 file, and --device auto runs it on the CPU", "[arch][cli]") {
    // (no dots.llm1 template in the corpus: the file's own, the synthetic model's ChatML)
    test::check_run_and_chat(kShape, "",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=128",
                              "gating=sigmoid with a selection bias, normalized=true scale=2.5 leading_dense=1"});
}

}  // namespace test_arch_dots1
