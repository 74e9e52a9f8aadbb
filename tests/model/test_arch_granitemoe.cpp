// granitemoe (IBM Granite 3.0/3.1 MoE 1B-A400M, 3B-A800M, and the shared-expert files) against llama.cpp: the
// synthetic granitemoe-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic granitemoe-tiny
// --dtype f32|f16 --save FILE` writes it: granite's 3 layers with its embedding, residual, attention and logit
// multipliers, each FFN 8 experts of 64 features (feed_forward_length, as llama.cpp reads granitemoe), 2 a token, the
// softmax of their logits renormalized, beside a shared expert of 96) regenerated, saved and loaded back, then run on
// the reference backend and the CPU backend of every kernel family this machine has. References in tests/data/arch/:
// llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens of the other
// architectures, made with tests/data/arch/dump_logits.cpp (its header says how).
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <string>

namespace test_arch_granitemoe {

using namespace quill;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "granitemoe-tiny";
// The limits on max |diff| / range (granite's: F32 float summation order, F16 llama.cpp's fp16 inputs).
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("granitemoe tiny model: the reference and CPU backends give llama.cpp's logits and greedy tokens",
          "[arch][reference][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
    // Without the shared expert, or without granite's residual scale on the mixture's output, either backend would
    // leave llama.cpp's logits.
    const auto no_shared = [](ModelConfig& c, Weights&) { c.moe_shared_expert = false; };
    for (double e : test::mutant_error(kShape, kCtx, no_shared)) CHECK(e > 1e-2);
    const auto no_residual_scale = [](ModelConfig& c, Weights&) { c.residual_scale = 1.0f; };
    for (double e : test::mutant_error(kShape, kCtx, no_residual_scale)) CHECK(e > 1e-2);
}

TEST_CASE("granitemoe settings are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "granite" && c.file_arch == "granitemoe" && c.rope == ModelConfig::Rope::adjacent));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.moe_shared_expert && c.n_ff == 96 &&
           !c.moe_shared_gate && c.moe_norm_weights && !c.moe_routing_general()));
    CHECK((c.embd_scale == 12.0f && c.residual_scale == 0.22f && c.attn_scale == 0.015625f && c.logit_scale == 8.0f));
    const ModelConfig real = synthetic_config("granite-3.1-3b-a800m");
    CHECK((real.n_expert == 40 && real.n_expert_used == 8 && real.n_ff_exp == 512 && !real.moe_shared_expert));
}

TEST_CASE("granitemoe: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::Q4_0}, kCtx);
}

TEST_CASE("quill run and chat work end to end on a granitemoe file with Granite 3.3's chat template", "[arch][cli]") {
    // (Granite 3.x MoE's template is Granite 3's)
    test::check_run_and_chat(kShape, "ibm-granite-granite-3.3-2B-Instruct.jinja",
                             {"architecture    granitemoe", "n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96"});
}

}  // namespace test_arch_granitemoe
