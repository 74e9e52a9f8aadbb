// granite_swa (IBM Granite 4 with interleaved sliding-window attention: granite's multipliers, attention sinks in every
// layer, a window pattern and a RoPE pattern a layer, and granitemoe's experts where the file has them) against
// llama.cpp: the synthetic granite-swa-tiny and granite-swa-moe-tiny models (engine/model/synthetic.cpp, seed 42, as
// `quill bench --synthetic SHAPE --dtype f32|f16 --save FILE` writes them: 5 layers of 128, GQA 4/2, Granite 3.3's
// multipliers but an attention multiplier of 0.25, layers 0 and 4 global and 1-3 local (a window of 8), RoPE
// (adjacent pairs) on layers 1, 2 and 4 alone, sinks in every layer; granite-swa-tiny a dense SwiGLU FFN of 256,
// granite-swa-moe-tiny 8 experts of 64 (2 a token, their gate and up in one tensor) beside a shared expert of 96 whose
// gate and up are one tensor too) regenerated, saved and loaded back, then run on the reference backend and the CPU
// backend of every kernel family this machine has. Text only: Granite Vision's deepstack inputs add nothing to a
// token's embedding (read_granite_swa).
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

namespace test_arch_granite_swa {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

using Mutant = std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>;

void no_sinks(ModelConfig&, Weights& w) {
    for (LayerWeights& L : w.layers) L.attn_sinks.clear();
}

}  // namespace

TEST_CASE("granite_swa tiny models: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp("granite-swa-tiny", kCases, kCtx, false);
    test::check_shape_against_llama_cpp("granite-swa-moe-tiny", kCases, kCtx, false);
}

TEST_CASE("granite_swa tiny models: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp("granite-swa-tiny", kCases, kCtx, true);
    test::check_shape_against_llama_cpp("granite-swa-moe-tiny", kCases, kCtx, true);
}

TEST_CASE("granite_swa: no sinks, RoPE on every layer, no window, no shared expert or sigmoid gating each leave "
          "llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature turned off is far outside their tolerance on either backend.
    const std::vector<std::pair<const char*, std::vector<Mutant>>> shapes = {
        {"granite-swa-tiny",
         {{"no sinks", no_sinks},
          {"RoPE on every layer", [](ModelConfig& c, Weights&) { c.rope_layers.clear(); }},
          {"no window", [](ModelConfig& c, Weights&) { c.sliding_window = 0; }}}},
        {"granite-swa-moe-tiny",
         {{"no sinks", no_sinks},
          {"no shared expert", [](ModelConfig& c, Weights&) { c.moe_shared_expert = false; }},
          {"sigmoid", [](ModelConfig& c, Weights&) { c.moe_gating_sigmoid = true; }}}},
    };
    for (const auto& [shape, mutants] : shapes)
        for (const auto& [name, mutate] : mutants) {
            INFO(shape << ": " << name);
            for (double e : test::mutant_error(shape, kCtx, mutate)) CHECK(e > 1e-3);
        }
}

TEST_CASE("granite_swa settings, window and RoPE patterns, sinks and fused experts are read from the file as llama.cpp "
          "reads them", "[arch][model]") {
    auto m = test::saved_synthetic("granite-swa-moe-tiny", GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "granite" && c.file_arch == "granite_swa" && c.n_layer == 5 && c.sliding_window == 8));
    CHECK((c.embd_scale == 12.0f && c.residual_scale == 0.22f && c.attn_scale == 0.25f && c.logit_scale == 8.0f));
    for (int64_t l = 0; l < 5; ++l) {
        INFO("layer " << l);
        CHECK(c.layer_is_local(l) == (l >= 1 && l <= 3));
        CHECK(c.layer_has_rope(l) == (l == 1 || l == 2 || l == 4));
    }
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.moe_shared_expert && c.n_ff == 96));
    const LayerWeights& L = m->weights.layers[2];
    CHECK((L.attn_sinks.size() == 4 && L.ffn_gate_up_exps.data != nullptr && L.experts.size() == 8));
    CHECK((L.ffn_gate_up.name == "blk.2.ffn_up_shexp.weight" && L.ffn_gate.n_rows() == 96));
    // Granite Vision's deepstack layers are accepted (they change nothing for text)
    const fs::path dir = test::temp_dir("arch_granite_swa_keys");
    const std::string f = test::synthetic_with_metadata(dir, "granite-swa-tiny", "deepstack", [](GgufWriter& w) {
        w.set("granite_swa.deepstack_mapping",
              GgufValue::array(GgufType::I32, {GgufValue(int32_t(-1)), GgufValue(int32_t(1)), GgufValue(int32_t(-1)),
                                               GgufValue(int32_t(2)), GgufValue(int32_t(-1))}));
    });
    const ModelConfig k = Model::load(f)->config;
    for (int64_t l = 0; l < 5; ++l) CHECK(k.layer_has_rope(l) == (l == 1 || l == 2 || l == 4));
}

TEST_CASE("granite_swa: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("granite-swa-tiny"), {GgmlType::F32}, kCtx);
    test::check_mixed_batches(synthetic_config("granite-swa-moe-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("granite_swa files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_granite_swa_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"pattern", [](GgufWriter& w) { w.set("granite_swa.attention.sliding_window_pattern", uint32_t(4)); },
         "metadata 'granite_swa.attention.sliding_window_pattern' is not an array of 5 bools (one a layer, true: "
         "local)"},
        {"rope pattern", [](GgufWriter& w) { w.set("granite_swa.attention.rope_pattern", uint32_t(1)); },
         "metadata 'granite_swa.attention.rope_pattern' is not an array of 5 bools (one a layer, true: RoPE)"},
    };
    test::check_refused_metadata(dir, "granite-swa-tiny", cases);
}

TEST_CASE("quill run and chat work end to end on a granite_swa file with Granite 4's chat template, and --device auto "
          "runs it on the CPU", "[arch][cli]") {
    test::check_run_and_chat("granite-swa-moe-tiny", "ibm-granite-granite-4.0.jinja",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96",
                              "sliding_window=8 local_layers=1,2,3 rope_layers=1,2,4 sinks"});
}

}  // namespace test_arch_granite_swa
