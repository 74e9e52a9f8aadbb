// hunyuan-dense (Hunyuan 0.5B-7B) and hunyuan-moe (Hunyuan-A13B) against llama.cpp: qwen3's and qwen3moe's layers
// whose Q and K heads are RMS-normalized after RoPE, not before. The synthetic models (engine/model/synthetic.cpp,
// seed 42, as `quill bench --synthetic SHAPE --dtype f32|f16 --save FILE` writes them) regenerated, saved and loaded
// back, then run on the reference backend and the CPU backend of every kernel family this machine has:
// - hunyuan-dense-tiny: 4 layers of 128, 4 heads of 64 (Q 256 wide), 2 KV heads, NEOX RoPE of base 10,000 with the
//   file's rope.scaling.alpha 50 (llama.cpp's base * alpha^(64 / 62)), SwiGLU FFNs of 320;
// - hunyuan-moe-tiny: 3 layers of the same attention (RoPE base 1e6) with 8 SwiGLU experts of 64 (2 a token, the
//   softmax of their logits) beside a shared SwiGLU expert of 96 without a gate.
// References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over
// the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1
// 300 45 72 ... 202.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_hunyuan {

using namespace quill;

namespace {

constexpr int64_t kCtx = 256;

// The limits on max |diff| / range: 1e-5 with F32 weights, 1e-3 with F16 (llama.cpp rounds each product's input to
// fp16). Measured: see the commit.
constexpr test::ArchFiles kFiles[] = {{"hunyuan-dense-tiny", 1e-3}, {"hunyuan-moe-tiny", 1e-3}};

using Mutant = std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>;

}  // namespace

TEST_CASE("hunyuan tiny models: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_files_against_llama_cpp(kFiles, kCtx, false);
}

TEST_CASE("hunyuan tiny models: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_files_against_llama_cpp(kFiles, kCtx, true);
}

TEST_CASE("hunyuan: Q/K norms before RoPE, RoPE without alpha, no shared expert or unrenormalized expert weights each "
          "leave llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature undone is far outside their tolerance on either backend.
    const Mutant before_rope{"Q/K norms before RoPE", [](ModelConfig& c, Weights&) { c.qk_norm_after_rope = false; }};
    const std::vector<std::pair<const char*, std::vector<Mutant>>> shapes = {
        {"hunyuan-dense-tiny",
         {before_rope,
          {"RoPE base without alpha", [](ModelConfig& c, Weights&) { c.rope_base = c.rope_base_local = 10000.0f; }}}},
        {"hunyuan-moe-tiny",
         {before_rope,
          {"no shared expert", [](ModelConfig& c, Weights&) { c.moe_shared_expert = false; }},
          {"unrenormalized weights", [](ModelConfig& c, Weights&) { c.moe_norm_weights = false; }}}},
    };
    for (const auto& [shape, mutants] : shapes)
        for (const auto& [name, mutate] : mutants) {
            INFO(shape << ": " << name);
            for (double e : test::mutant_error(shape, kCtx, mutate)) CHECK(e > 1e-2);
        }
}

TEST_CASE("hunyuan settings, the RoPE alpha, the experts and the shared expert are read from the file as llama.cpp "
          "reads them", "[arch][model]") {
    auto d = test::saved_synthetic("hunyuan-dense-tiny", GgmlType::F16);
    const ModelConfig& c = d->config;
    CHECK((c.arch == "qwen3" && c.file_arch == "hunyuan-dense" && c.qk_norm_after_rope && !c.moe()));
    CHECK((c.rope == ModelConfig::Rope::neox && c.head_dim == 64 && c.n_ff == 320 && c.rope_alpha == 50.0f));
    CHECK_THAT(c.rope_base, Catch::WithinRel(10000.0f * std::pow(50.0f, 64.0f / 62.0f), 1e-6f));
    for (const LayerWeights& L : d->weights.layers) CHECK((L.attn_q_norm.size() == 64 && L.bo.empty()));
    auto m = test::saved_synthetic("hunyuan-moe-tiny", GgmlType::F16);
    const ModelConfig& e = m->config;
    CHECK((e.arch == "qwen3moe" && e.file_arch == "hunyuan-moe" && e.qk_norm_after_rope && e.moe_shared_expert));
    CHECK((!e.moe_shared_gate && e.moe_norm_weights && !e.moe_routing_general() && e.rope_base == 1e6f));
    CHECK((e.n_expert == 8 && e.n_expert_used == 2 && e.n_ff_exp == 64 && e.n_ff == 96));
    for (const LayerWeights& L : m->weights.layers)
        CHECK((L.experts.size() == 8 && L.ffn_gate.data != nullptr && L.ffn_gate_inp_shexp.empty()));
    // The real shapes: Hunyuan-7B's and Hunyuan-A13B's first layers (alpha 1000 folded into the base)
    const ModelConfig h7 = synthetic_config("hunyuan-7b-4l"), a13 = synthetic_config("hunyuan-a13b-2l");
    CHECK((h7.n_embd == 4096 && h7.n_head_kv == 8 && h7.n_ff == 14336 && h7.n_vocab == 128256));
    CHECK_THAT(h7.rope_base, Catch::WithinRel(11158840.0f, 1e-6f));
    CHECK((a13.n_expert == 64 && a13.n_expert_used == 8 && a13.n_ff_exp == 3072 && a13.n_ff == 3072));
}

TEST_CASE("hunyuan: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("hunyuan-dense-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
    test::check_mixed_batches(synthetic_config("hunyuan-moe-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("quill run and chat work end to end on hunyuan files, and --device auto runs them on the CPU",
          "[arch][cli]") {
    // (no Hunyuan template in the corpus: the file's own, the synthetic model's ChatML-like one)
    test::check_run_and_chat("hunyuan-dense-tiny", "", {"qk norms        after RoPE"});
    test::check_run_and_chat("hunyuan-moe-tiny", "", {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96"});
}

}  // namespace test_arch_hunyuan
