// cohere2moe (Cohere's MoE Command models: cohere2's parallel blocks with experts after leading dense layers) against
// llama.cpp: the synthetic cohere2moe-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic
// cohere2moe-tiny --dtype f32|f16 --save FILE` writes it: 6 layers of RMSNorm (the file's layer_norm_rms_epsilon),
// attention and FFN in parallel from the one norm, layers 0 and 4 global (the first of every four, as the file's
// pattern array says), the others local with a window of 8; RoPE (adjacent pairs) on the local layers and on layer 0,
// the leading dense one (an FFN of 256), none on layer 4; layers 1-5 with 8 experts of 64, 2 a token, by the softmax
// of their logits renormalized, and a shared expert of 64, the two averaged; logits times 0.25, tied output; one
// NextN block after them, in the file and never run) regenerated, saved and loaded back, then run on the reference
// backend and the CPU backend of every kernel family this machine has.
// References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over
// the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says how):
// dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_cohere2moe {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "cohere2moe-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("cohere2moe tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("cohere2moe tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("cohere2moe: no shared expert, the sum for the average, sigmoid gating, LayerNorm, RoPE on every layer or "
          "none on the leading dense layer each leave llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature turned off is far outside their tolerance on either backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"no shared expert", [](ModelConfig& c, Weights&) { c.moe_shared_expert = false; }},
        {"sum, not average", [](ModelConfig& c, Weights&) { c.moe_shared_scale = 1.0f; }},
        {"sigmoid", [](ModelConfig& c, Weights&) { c.moe_gating_sigmoid = true; }},
        {"LayerNorm", [](ModelConfig& c, Weights&) { c.layer_norm = true; }},
        {"RoPE on every layer", [](ModelConfig& c, Weights&) { c.rope_layers.assign(6, true); }},
        {"no RoPE on the dense layer", [](ModelConfig& c, Weights&) { c.rope_layers[0] = false; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-3);
    }
}

TEST_CASE("cohere2moe settings, window, RoPE layers, experts and shared expert are read from the file as llama.cpp "
          "reads them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "cohere2" && c.file_arch == "cohere2moe" && c.n_layer == 6 && c.n_layer_nextn == 1));
    CHECK((!c.layer_norm && c.parallel_blocks && c.logit_mul == 0.25f && c.rms_eps == 1e-5f));
    CHECK((c.rope == ModelConfig::Rope::adjacent && c.sliding_window == 8));
    for (int64_t l = 0; l < 6; ++l) {
        INFO("layer " << l);
        CHECK(c.layer_is_local(l) == (l != 0 && l != 4));
        CHECK(c.layer_has_rope(l) == (l != 4));
    }
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 1));
    CHECK((!c.moe_gating_sigmoid && !c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 1.0f));
    CHECK((c.moe_shared_expert && c.moe_shared_scale == 0.5f && c.layer_n_ff(0) == 256 && c.layer_n_ff(5) == 64));
    CHECK((m->weights.layers.size() == 6 && m->weights.output_tied && m->weights.layers[0].ffn_norm.empty()));
    const LayerWeights& L = m->weights.layers[5];
    CHECK((L.experts.size() == 8 && L.ffn_exp_probs_b.empty() && L.ffn_gate.name == "blk.5.ffn_gate_shexp.weight"));
    // A file with a pattern N instead of the array: the first layer of every N global (llama.cpp's dense-first)
    const fs::path dir = test::temp_dir("arch_cohere2moe_pattern");
    const std::string f = test::synthetic_with_metadata(dir, kShape, "n3", [](GgufWriter& w) {
        w.set("cohere2moe.attention.sliding_window_pattern", uint32_t(3));
    });
    const ModelConfig n3 = Model::load(f)->config;
    for (int64_t l = 0; l < 6; ++l) CHECK((n3.layer_is_local(l) == (l % 3 != 0) && n3.layer_has_rope(l) == (l != 3)));
}

TEST_CASE("cohere2moe: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("cohere2moe files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_cohere2moe_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("cohere2moe.expert_gating_func", uint32_t(3)); },
         "metadata 'cohere2moe.expert_gating_func' is 3, expected 1 (softmax) or 2 (sigmoid): the expert gating "
         "functions quill supports for cohere2moe"},
        {"window", [](GgufWriter& w) { w.set("cohere2moe.attention.sliding_window", uint32_t(0)); },
         "metadata 'cohere2moe.attention.sliding_window' is 0, expected 1..1073741824"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a cohere2moe file with its chat template, and --device auto runs it "
          "on the CPU", "[arch][cli]") {
    test::check_run_and_chat(kShape, "Cohere2MoE.jinja",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=64",
                              "gating=softmax, normalized=true scale=1.0 leading_dense=1 shared_scale=0.5",
                              "layer_norm=false parallel=true logit_scale=0.25",
                              "sliding_window=8 local_layers=1,2,3,5 rope_layers=0,1,2,3,5"});
}

}  // namespace test_arch_cohere2moe
