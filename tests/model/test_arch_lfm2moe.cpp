// lfm2moe (LFM2-8B-A1B: lfm2's layers with DeepSeek-V3-style routed experts after its leading dense ones) against
// llama.cpp: the synthetic lfm2moe-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic
// lfm2moe-tiny --dtype f32|f16 --save FILE` writes it: lfm2-tiny's 5 layers, 0, 2 and 4 short convs, 1 and 3
// attention; layer 0 a dense FFN of 256, layers 1-4 with 8 experts of 64 features, 2 a token, chosen by
// sigmoid(logit) + a selection bias and weighted by the normalized sigmoids) regenerated, saved and loaded back, then
// run on the reference backend and the CPU backend of every kernel family this machine has. References in
// tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens
// below, made with tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/recurrent_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace test_arch_lfm2moe {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "lfm2moe-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: F32 3.0e-7 to 3.2e-7 on
// every backend; F16 3.6e-4 on the reference backend, 2.3e-4 to 2.7e-4 on the CPU backend's paths.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("lfm2moe tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("lfm2moe tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("lfm2moe settings, leading dense layer and experts are read from the file as llama.cpp reads them",
          "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "lfm2" && c.file_arch == "lfm2moe" && c.recurrent() && c.layer_is_short_conv(4)));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_ff == 256 && c.n_leading_dense == 1));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 1.0f));
    CHECK((!c.moe_shared_expert && c.dense_ffn() && c.layer_dense_ffn(0) && !c.layer_dense_ffn(1)));
    const LayerWeights& dense = m->weights.layers[0];
    CHECK((dense.experts.empty() && dense.ffn_gate.n_rows() == 256 && dense.ffn_exp_probs_b.empty()));
    for (int64_t l : {1, 2}) {  // an attention layer and a short conv
        INFO("layer " << l);
        const LayerWeights& L = m->weights.layers[l];
        CHECK((L.experts.size() == 8 && L.ffn_exp_probs_b.size() == 8 && L.ffn_gate.data == nullptr));
    }
    // LFM2-8B-A1B's shape: 24 layers, the first two dense, 32 experts of 1792 (4 a token)
    const ModelConfig big = synthetic_config("lfm2-8b-a1b");
    CHECK((big.file_arch == "lfm2moe" && big.n_layer == 24 && big.n_embd == 2048 && big.n_ff == 7168 &&
           big.n_expert == 32 && big.n_expert_used == 4 && big.n_ff_exp == 1792 && big.n_leading_dense == 2 &&
           !big.layer_is_short_conv(21) && big.layer_is_short_conv(20)));
}

TEST_CASE("lfm2moe: a token's logits have the same bits in any batch as alone, a prompt's in one batch as one at a "
          "time", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
    test::check_prompt_equals_stepwise(kShape);
}

TEST_CASE("lfm2moe files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_lfm2moe_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("lfm2moe.expert_gating_func", uint32_t(0)); },
         "metadata 'lfm2moe.expert_gating_func' is 0, expected 1 (softmax) or 2 (sigmoid): the expert gating "
         "functions quill supports for lfm2moe"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on an lfm2moe file with LFM2-8B-A1B's chat template, and --device "
          "auto runs it on the CPU", "[arch][cli]") {
    test::check_run_and_chat(kShape, "LFM2-8B-A1B.jinja",
                             {"gating=sigmoid with a selection bias, normalized=true scale=1.0 leading_dense=1"});
}

}  // namespace test_arch_lfm2moe
