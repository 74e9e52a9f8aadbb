// step35 (StepFun Step-3.5-Flash: qwen3moe's layers with one sigmoid gate a head on the attention's output, local
// layers of their own query heads rotating all of each head's dims beside global ones rotating half of them, clamped
// SwiGLUs, DeepSeek-V3-style routing beside a shared expert after a leading dense layer, MTP blocks skipped) against
// llama.cpp: the synthetic step35-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic
// step35-tiny --dtype f32|f16 --save FILE` writes it: 5 layers and one MTP block, layer 0 a dense FFN of 192, layers
// 1-4 with 8 experts of 64, 2 a token, chosen by sigmoid(logit) + a selection bias and weighted by the normalized
// sigmoids times 2.5, beside a shared expert of 96, every SwiGLU clamped (the experts' at 0.5, the others' at 0.8);
// layers 0 and 4 global with 4 heads of 32 rotating 16 dims in NEOX pairs with base 5e6 and rope_freqs, layers 1-3
// local with 6 heads, a window of 8, rotating all 32 dims with base 10,000; 2 KV heads, per-head Q/K norms)
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

namespace test_arch_step35 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "step35-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("step35 tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("step35 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA", "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("step35: no attention gate, no selection bias, no SwiGLU clamp, the local layers' RoPE dims on the global "
          "ones, or no window each leave llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature of step35's, turned off, is far outside their tolerance on either
    // backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"no attention gate", [](ModelConfig& c, Weights&) { c.attn_gate_proj = c.attn_gate_per_head = false; }},
        {"no selection bias",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) std::fill(L.ffn_exp_probs_b.begin(), L.ffn_exp_probs_b.end(), 0.0f);
         }},
        {"no SwiGLU clamp",
         [](ModelConfig& c, Weights&) {
             c.swiglu_clamp_exp.clear();
             c.swiglu_clamp_shexp.clear();
         }},
        {"every layer rotating the local layers' dims", [](ModelConfig& c, Weights&) { c.n_rot = c.n_rot_local; }},
        {"no window", [](ModelConfig& c, Weights&) { c.sliding_window = 1 << 20; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-2);
    }
}

TEST_CASE("step35 settings, heads, gates, RoPE dims, clamps, experts and shared expert are read from the file as "
          "llama.cpp reads them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen3moe" && c.file_arch == "step35" && c.attn_gate_proj && c.attn_gate_per_head));
    CHECK((c.rope == ModelConfig::Rope::neox && c.n_rot == 16 && c.n_rot_local == 32 && c.head_dim == 32));
    CHECK((c.n_head == 4 && c.n_head_local == 6 && c.n_head_kv == 2 && c.n_head_kv_local == 0));
    CHECK((c.sliding_window == 8 && c.rope_base == 5e6f && c.rope_base_local == 10000.0f));
    CHECK((!c.layer_is_local(0) && c.layer_is_local(1) && c.layer_is_local(3) && !c.layer_is_local(4)));
    CHECK((c.layer_n_head(0) == 4 && c.layer_n_head(2) == 6 && c.layer_n_rot(0) == 16 && c.layer_n_rot(2) == 32));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 1));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 2.5f));
    CHECK((c.moe_shared_expert && c.layer_n_ff(0) == 192 && c.layer_n_ff(4) == 96 && c.n_layer_nextn == 1));
    CHECK((c.swiglu_clamp_exp.size() == 6 && c.swiglu_clamp_exp[4] == 0.5f && c.swiglu_clamp_shexp[0] == 0.8f &&
           c.swiglu_clamp_shexp[5] == 0.0f));
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = m->weights.layers[static_cast<size_t>(l)];
        CHECK((L.wgate.n_rows() == c.layer_n_head(l) && L.wq.n_rows() == 32 * c.layer_n_head(l)));
    }
    CHECK((m->weights.rope_freqs.size() == 16 && !m->weights.output_tied));
    // Step-3.5-Flash's shape: 45 layers, the first three dense, 288 experts of 1280 (8 a token), 64 and 96 heads
    const ModelConfig big = synthetic_config("step35-flash");
    CHECK((big.file_arch == "step35" && big.n_layer == 45 && big.n_embd == 4096 && big.n_head == 64 &&
           big.n_head_local == 96 && big.n_head_kv == 8 && big.head_dim == 128 && big.n_expert == 288 &&
           big.n_expert_used == 8 && big.n_ff_exp == 1280 && big.n_leading_dense == 3 && big.sliding_window == 512 &&
           big.n_vocab == 128896));
}

TEST_CASE("step35: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("step35 files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_step35_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("step35.expert_gating_func", uint32_t(4)); },
         "metadata 'step35.expert_gating_func' is 4, expected 1 (softmax) or 2 (sigmoid): the expert gating functions "
         "quill supports for step35"},
        {"pattern", [](GgufWriter& w) { w.set("step35.attention.sliding_window_pattern", uint32_t(4)); },
         "metadata 'step35.attention.sliding_window_pattern' is missing or not an array of 6 bools (one a block, true: "
         "local)"},
        {"heads",
         [](GgufWriter& w) {
             std::vector<GgufValue> heads;
             for (uint32_t h : {4, 6, 6, 8, 4, 6}) heads.emplace_back(h);
             w.set("step35.attention.head_count", GgufValue::array(GgufType::U32, heads));
         },
         "metadata 'step35.attention.head_count' differs between two local layers (6 and 8; quill supports one value "
         "for the local layers and one for the global ones)"},
        {"rope dims", [](GgufWriter& w) { w.set("step35.rope.dimension_count", uint32_t(30)); },
         "metadata 'step35.rope.dimension_count' 30 is not a multiple of 4 (the global layers rotate half of it)"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a step35 file, --device auto runs it on the CPU, and its layers split "
          "over two CPUs give the same text", "[arch][cli]") {
    // (Step-3.5-Flash's published template, from the corpus)
    test::check_run_and_chat(kShape, "StepFun3.5-Flash.jinja",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96",
                              "gating=sigmoid with a selection bias, normalized=true scale=2.5 leading_dense=1",
                              "sliding_window=8 local_layers=1,2,3 n_head_local=6"});
    // (layers 3-4 on the second: a local and a global layer of their own head counts; the MTP block in neither)
    const std::string file = (test::temp_dir("arch_step35_split") / "step35-tiny.gguf").string();
    SyntheticModel::make(synthetic_config(kShape), GgmlType::F16, 42)->save(file);
    test::check_split_over_two_cpus(file, "3 of 5 layers on cpu (layers 0-2");
}

}  // namespace test_arch_step35
