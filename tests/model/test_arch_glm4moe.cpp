// glm4moe (GLM-4.5, GLM-4.5-Air, GLM-4.6: DeepSeek-V3-style routing) against llama.cpp: the synthetic glm4moe-tiny
// model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic glm4moe-tiny --dtype f32|f16 --save FILE`
// writes it: 3 layers, layer 0 a dense FFN of 192, layers 1 and 2 with 8 experts of 64 features, 2 a token, chosen by
// sigmoid(logit) + a selection bias, weighted by the normalized sigmoids times 2.5, beside an ungated shared expert of
// 64; Q/K/V biases, Q/K norms, NEOX RoPE over half of each head's 32 dims; one multi-token-prediction block after
// the layers, which neither quill nor llama.cpp runs) regenerated, saved and loaded back, then run on the reference
// backend and the CPU backend of every kernel family this machine has. References in tests/data/arch/: llama.cpp
// (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with
// tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/error.h"
#include "engine/model/layer_matrices.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_glm4moe {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "glm4moe-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: F32 2.9e-7 to 4.1e-7 on
// every backend; F16 3.2e-4 on the reference backend, 2.0e-4 to 3.2e-4 on the CPU backend's paths. With F16 weights
// llama.cpp rounds each product's input to fp16 and the CPU backend's AVX2 and AVX-512 paths turn its 17th greedy
// token (183 there, 46 in llama.cpp's) while every prompt position stays within 3.2e-4 of the range: the first 16.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3, 16}};

}  // namespace

TEST_CASE("glm4moe tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("glm4moe tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("glm4moe: softmax gating, no selection bias, no weight scale or no leading dense layer each leave "
          "llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each routing feature turned off is far outside their tolerance on either backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"softmax", [](ModelConfig& c, Weights&) { c.moe_gating_sigmoid = false; }},
        {"no selection bias",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) L.ffn_exp_probs_b.clear();
         }},
        {"no scale", [](ModelConfig& c, Weights&) { c.moe_weights_scale = 1.0f; }},
        {"not normalized", [](ModelConfig& c, Weights&) { c.moe_norm_weights = false; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, mutate, kCtx)) CHECK(e > 1e-2);
    }
}

TEST_CASE("glm4moe settings, leading dense layer, experts and shared expert are read from the file as llama.cpp "
          "reads them, the MTP block skipped", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK(c.arch == "glm4moe");
    CHECK((c.rope == ModelConfig::Rope::neox && c.n_rot == 16 && c.head_dim == 32 && c.n_head_kv == 2));
    // block_count 4: 3 layers and the MTP block, which is loaded and never run
    CHECK((c.n_layer == 3 && c.n_layer_nextn == 1 && m->weights.layers.size() == 3));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 1));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 2.5f));
    CHECK((c.moe_shared_expert && !c.moe_shared_gate && !c.layer_moe(0) && c.layer_moe(1) && c.layer_moe(2)));
    CHECK((c.layer_n_ff(0) == 192 && c.layer_n_ff(1) == 64 && c.n_ff == 192));
    const LayerWeights& dense = m->weights.layers[0];
    CHECK((dense.experts.empty() && dense.ffn_exp_probs_b.empty() && dense.ffn_gate.n_rows() == 192));
    CHECK(dense.ffn_gate.name == "blk.0.ffn_gate.weight");
    const LayerWeights& L = m->weights.layers[2];
    CHECK((L.experts.size() == 8 && L.ffn_exp_probs_b.size() == 8 && L.ffn_gate_inp_shexp.empty()));
    CHECK((L.ffn_gate.name == "blk.2.ffn_gate_shexp.weight" && L.ffn_gate.n_rows() == 64));
    CHECK((L.bq.size() == 128 && L.bk.size() == 64 && L.attn_q_norm.size() == 32 && L.attn_k_norm.size() == 32));
    CHECK((L.ffn_norm.size() == 128 && L.attn_post_norm.empty()));  // (the file's post_attention_norm)
    // GLM-4.5-Air's shape: no Q/K norms, 1408-feature experts and shared expert, and its first two layers.
    for (const char* shape : {"glm-4.5-air", "glm-4.5-air-2l"}) {
        const ModelConfig air = synthetic_config(shape);
        CHECK((air.arch == "glm4moe" && air.n_embd == 4096 && air.n_head == 96 && air.n_head_kv == 8 &&
               air.head_dim == 128 && air.n_rot == 64 && air.n_expert == 128 && air.n_expert_used == 8 &&
               air.n_ff_exp == 1408 && air.layer_n_ff(0) == 10944 && air.layer_n_ff(1) == 1408 &&
               air.n_leading_dense == 1 && air.n_vocab == 151552));
        CHECK(air.n_layer == (std::string(shape).ends_with("-2l") ? 2 : 46));
    }
}

TEST_CASE("glm4moe: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("glm4moe files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_glm4moe_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("glm4moe.expert_gating_func", uint32_t(4)); },
         "metadata 'glm4moe.expert_gating_func' is 4, expected 1 (softmax) or 2 (sigmoid): the expert gating "
         "functions quill supports for glm4moe"},
        {"shared", [](GgufWriter& w) { w.set("glm4moe.expert_shared_count", uint32_t(0)); },
         "metadata 'glm4moe.expert_shared_count' is 0, expected 1..64"},
        {"dense", [](GgufWriter& w) { w.set("glm4moe.leading_dense_block_count", uint32_t(9)); },
         "metadata 'glm4moe.leading_dense_block_count' is 9, expected 0..3"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a glm4moe file with GLM-4.6's chat template, and --device auto "
          "runs it on the CPU", "[arch][cli]") {
    // (the template Z.ai ships with GLM-4.6; GLM-4.5's is of the same form)
    test::check_run_and_chat(kShape, "GLM-4.6.jinja",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=64",
                              "gating=sigmoid with a selection bias, normalized=true scale=2.5 leading_dense=1"});
}

}  // namespace test_arch_glm4moe
