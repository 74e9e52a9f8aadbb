// laguna (poolside Laguna XS.2, M.1: qwen3moe's layers with a softplus gate on the attention's output, a gate a head
// or a value, local layers of their own query heads rotating all of each head's dims with plain RoPE beside global
// ones rotating half of them with YaRN, DeepSeek-V3-style routing beside a shared expert after a leading dense layer)
// against llama.cpp: the synthetic laguna-tiny and laguna-m-tiny models (engine/model/synthetic.cpp, seed 42, as
// `quill bench --synthetic SHAPE --dtype f32|f16 --save FILE` writes them). laguna-tiny: 5 layers, layer 0 a dense FFN
// of 192, layers 1-4 with 8 experts of 64, 2 a token, chosen by sigmoid(logit) + a selection bias and weighted by the
// normalized sigmoids times 2.5, beside a shared expert of 96; layers 0 and 4 global with 4 heads of 32 rotating 16
// dims in NEOX pairs with YaRN (base 500,000, 4x over 256 positions), layers 1-3 local with 6 heads, a window of 8,
// rotating all 32 dims with base 10,000 and no scaling; 2 KV heads, per-head Q/K norms, a gate a head.
// laguna-m-tiny: 3 layers, all global, 4 heads, a gate a value (Laguna M.1's). Regenerated, saved and loaded back,
// then run on the reference backend and the CPU backend of every kernel family this machine has. References in
// tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens
// below, made with tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
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

namespace test_arch_laguna {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "laguna-tiny";

// The limits on max |diff| / range with F16 weights (F32: 1e-5). Measured: see the commit.
constexpr test::ArchFiles kFiles[] = {{"laguna-tiny", 1e-3}, {"laguna-m-tiny", 1e-3}};

}  // namespace

TEST_CASE("laguna tiny models: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_files_against_llama_cpp(kFiles, kCtx, false);
}

TEST_CASE("laguna tiny models: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA", "[arch][cpu]") {
    test::check_files_against_llama_cpp(kFiles, kCtx, true);
}

TEST_CASE("laguna: a sigmoid gate, no selection bias, the local layers' RoPE dims on the global ones, YaRN on the "
          "local layers, or no window each leave llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature of laguna's, turned off, is far outside their tolerance on either
    // backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"sigmoid gate", [](ModelConfig& c, Weights&) { c.attn_gate_softplus = false; }},
        {"no selection bias",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) std::fill(L.ffn_exp_probs_b.begin(), L.ffn_exp_probs_b.end(), 0.0f);
         }},
        {"every layer rotating the local layers' dims", [](ModelConfig& c, Weights&) { c.n_rot = c.n_rot_local; }},
        {"YaRN on the local layers",
         [](ModelConfig& c, Weights&) {
             c.rope_local_plain = false;
             c.rope_freq_scale_local = c.rope_freq_scale;
         }},
        {"no window", [](ModelConfig& c, Weights&) { c.sliding_window = 1 << 20; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-2);
    }
    // (laguna-m-tiny, a gate a value: a sigmoid instead of softplus)
    for (double e : test::mutant_error("laguna-m-tiny", kCtx, [](ModelConfig& c, Weights&) {
             c.attn_gate_softplus = false;
         }))
        CHECK(e > 1e-2);
}

TEST_CASE("laguna settings, heads, gates, RoPE, experts and shared expert are read from the file as llama.cpp reads "
          "them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen3moe" && c.file_arch == "laguna" && c.attn_gate_proj && c.attn_gate_per_head &&
           c.attn_gate_softplus));
    CHECK((c.rope == ModelConfig::Rope::neox && c.n_rot == 16 && c.n_rot_local == 32 && c.head_dim == 32));
    CHECK((c.n_head == 4 && c.n_head_local == 6 && c.n_head_kv == 2 && c.sliding_window == 8));
    CHECK((c.rope_yarn && c.rope_freq_scale == 0.25f && c.yarn_n_ctx_orig == 256 && c.rope_base == 500000.0f));
    CHECK((c.rope_local_plain && c.rope_base_local == 10000.0f && c.rope_freq_scale_local == 1.0f));
    CHECK((!c.layer_is_local(0) && c.layer_is_local(1) && c.layer_is_local(3) && !c.layer_is_local(4)));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 1));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 2.5f));
    CHECK((c.moe_shared_expert && c.layer_n_ff(0) == 192 && c.layer_n_ff(4) == 96 && c.n_layer_nextn == 0));
    for (int64_t l = 0; l < c.n_layer; ++l)
        CHECK(m->weights.layers[static_cast<size_t>(l)].wgate.n_rows() == c.layer_n_head(l));
    auto m1 = test::saved_synthetic("laguna-m-tiny", GgmlType::F16);
    CHECK((m1->config.sliding_window == 0 && !m1->config.attn_gate_per_head && m1->config.n_head_local == 0));
    CHECK(m1->weights.layers[0].wgate.n_rows() == 128);
    const ModelConfig big = synthetic_config("laguna-xs2");
    CHECK((big.file_arch == "laguna" && big.n_layer == 40 && big.n_head == 48 && big.n_head_local == 64 &&
           big.n_rot == 64 && big.n_rot_local == 128 && big.n_leading_dense == 1));
}

TEST_CASE("laguna: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("laguna files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_laguna_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("laguna.expert_gating_func", uint32_t(4)); },
         "metadata 'laguna.expert_gating_func' is 4, expected 1 (softmax) or 2 (sigmoid): the expert gating functions "
         "quill supports for laguna"},
        {"dense", [](GgufWriter& w) { w.set("laguna.leading_dense_block_count", uint32_t(9)); },
         "metadata 'laguna.leading_dense_block_count' is 9, expected 0..5"},
        {"pattern",
         [](GgufWriter& w) {
             w.set("laguna.attention.sliding_window_pattern", GgufValue::array(GgufType::BOOL, {GgufValue(true)}));
         },
         "metadata 'laguna.attention.sliding_window_pattern' is an array of 1 bool values, expected 5 bools (one a "
         "layer, true: local)"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a laguna file, and --device auto runs it on the CPU", "[arch][cli]") {
    // (Laguna XS.2's published template, from the corpus)
    test::check_run_and_chat(kShape, "poolside-Laguna-XS.2.jinja",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96",
                              "gating=sigmoid with a selection bias, normalized=true scale=2.5 leading_dense=1",
                              "sliding_window=8 local_layers=1,2,3 n_head_local=6"});
}

}  // namespace test_arch_laguna
