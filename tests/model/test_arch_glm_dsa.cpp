// glm-dsa (GLM-5, 5.1, 5.2: deepseek32's layers with the indexer's RoPE on adjacent pairs, and GLM-5.2's layers that
// take the positions they attend to from an earlier layer's indexer) against llama.cpp: the synthetic glm-dsa-tiny
// model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic glm-dsa-tiny --dtype f32|f16 --save FILE`
// writes it: 3 layers of 4 heads, a dense first layer, 8 experts with sigmoid routing and a shared expert, RoPE base
// 1e6, an indexer of 16 heads of 64 keeping 10 positions in layers 0 and 2, layer 1 reusing layer 0's choice)
// regenerated, saved and loaded back, then run on the reference backend and the CPU backend of every kernel family
// this machine has. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32,
// n_ctx 256) over the 32 tokens of tests/data/arch/dump_logits.cpp's header, made with it.
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

namespace test_arch_glm_dsa {

using namespace quill;

namespace {

constexpr int64_t kCtx = 256;

// The limit on max |diff| / range (F16: llama.cpp rounds the activations of F16 products to fp16). With F16 weights
// position 29's choice in layer 2 is a near tie (its 10th and 11th scores 2.4e-4 of the scores' range apart in the
// reference's doubles) that llama.cpp's rounding turns the other way, on every backend (measured: max |diff| / range
// 0.058 there; positions 30 and 31, which the last layer's choice at 29 does not reach, within 1e-3): the logits are
// compared up to position 28, and the greedy tokens (all 24 equal) after the whole prompt.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3, 24, 29}};

}  // namespace

TEST_CASE("glm-dsa tiny model: the reference and CPU backends give llama.cpp's logits and greedy tokens",
          "[arch][reference][cpu]") {
    test::check_shape_against_llama_cpp("glm-dsa-tiny", kCases, kCtx, false);
    test::check_shape_against_llama_cpp("glm-dsa-tiny", kCases, kCtx, true);
}

// GLM-5's differences from deepseek32 each turned off leave llama.cpp's logits (measured max |diff| / range on the
// reference backend and the CPU backend's generic kernels): the indexer's RoPE on NEOX pairs 0.376, layer 2 reusing
// layer 0's choice as layer 1 does 0.238.
TEST_CASE("glm-dsa: with deepseek32's indexer RoPE or another layer reusing a choice the logits are not llama.cpp's",
          "[arch][reference][cpu]") {
    const auto neox = [](ModelConfig& c, Weights&) { c.indexer_neox = true; };
    for (double e : test::mutant_error("glm-dsa-tiny", kCtx, neox)) CHECK(e > 1e-3);
    const auto reuse = [](ModelConfig& c, Weights&) { c.indexer_layers = {1, 0, 0}; };
    for (double e : test::mutant_error("glm-dsa-tiny", kCtx, reuse)) CHECK(e > 1e-3);
}

TEST_CASE("glm-dsa settings are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = test::saved_synthetic("glm-dsa-tiny", GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "deepseek2" && c.file_arch == "glm-dsa" && c.dsa() && !c.indexer_neox &&
           c.indexer_layers == std::vector<uint8_t>{1, 0, 1} && c.moe_gating_sigmoid && c.moe_n_group == 0));
    CHECK((m->weights.layers[0].idx_wk.data && !m->weights.layers[1].idx_wk.data &&
           m->weights.layers[1].idx_k_norm.empty()));
    const ModelConfig glm5 = synthetic_config("glm-5-2l");
    CHECK((glm5.n_embd == 6144 && glm5.indexer_n_head == 32 && glm5.head_dim == 256 && glm5.head_dim_v == 256 &&
           glm5.kv_head_dim() == 576 + 128));
    // A split whose second range starts at layer 1, which has no indexer of its own, is refused.
    cpu::CpuBackendOptions o;
    o.n_threads = 1;
    o.n_ctx = 64;
    o.layers = LayerRange{1, 3};
    CHECK_THROWS_WITH(cpu::CpuBackend(c, m->weights, o), Catch::Contains("layers split at layer 1"));
    const std::vector<test::RefusedMetadata> cases = {
        {"types", [](GgufWriter& w) {
             w.set("glm-dsa.attention.indexer.types",
                   GgufValue::array(GgufType::BOOL, {GgufValue(false), GgufValue(true), GgufValue(true)}));
         },
         "metadata 'glm-dsa.attention.indexer.types' leaves layer 0 without an indexer of its own (llama.cpp's later "
         "layers reuse an earlier one's choice)"},
    };
    test::check_refused_metadata(test::temp_dir("arch_glm_dsa_refused"), "glm-dsa-tiny", cases);
}

// Decode steps past top_k (top_k 4) in mixed batches as alone, bit for bit, layer 1 reading layer 0's choice.
TEST_CASE("glm-dsa: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    ModelConfig c = synthetic_config("glm-dsa-tiny");
    c.indexer_top_k = 4;
    test::check_mixed_batches(c, {GgmlType::Q4_0}, kCtx);
}

// (No GLM-5 chat template is in tests/data/templates: the file's own.)
TEST_CASE("quill run and chat work end to end on a glm-dsa file", "[arch][cli]") {
    test::check_run_and_chat("glm-dsa-tiny", "",
                             {"architecture    glm-dsa",
                              "DeepSeek Sparse Attention: a lightning indexer of 16 heads of 64, the top 10 positions "
                              "attended (an indexer in 2 of the layers, the others reusing the choice before)"});
}

}  // namespace test_arch_glm_dsa
