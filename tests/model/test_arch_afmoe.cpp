// afmoe (Arcee Trinity: qwen3moe's layers with a sigmoid gate on the attention's output, post-norms, scaled
// embeddings, sliding-window layers and every fourth one global without RoPE, DeepSeek-V3-style routing beside a
// shared expert after a leading dense layer) against llama.cpp: the synthetic afmoe-tiny model
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic afmoe-tiny --dtype f32|f16 --save FILE` writes
// it: 5 layers, layer 0 a dense FFN of 192, layers 1-4 with 8 experts of 64, 2 a token, chosen by sigmoid(logit) + a
// selection bias and weighted by the normalized sigmoids times 2.826, beside a shared expert of 64; 4 heads of 32 (2
// KV heads) with per-head Q/K norms; layers 0-2 and 4 local with a window of 8 rotating in NEOX pairs with base
// 10,000, layer 3 global without RoPE) regenerated, saved and loaded back, then run on the reference backend and the
// CPU backend of every kernel family this machine has. References in tests/data/arch/: llama.cpp
// (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with
// tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
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

namespace test_arch_afmoe {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "afmoe-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("afmoe tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("afmoe tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA", "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("afmoe: no attention gate, no selection bias, softmax gating, no window or RoPE on every layer each leave "
          "llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature of afmoe's, turned off, is far outside their tolerance on either backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"no attention gate", [](ModelConfig& c, Weights&) { c.attn_gate_proj = false; }},
        {"no selection bias",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) std::fill(L.ffn_exp_probs_b.begin(), L.ffn_exp_probs_b.end(), 0.0f);
         }},
        {"softmax", [](ModelConfig& c, Weights&) { c.moe_gating_sigmoid = false; }},
        {"no window", [](ModelConfig& c, Weights&) { c.sliding_window = 0; }},
        {"RoPE on every layer", [](ModelConfig& c, Weights&) { c.no_rope_step = 0; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-2);
    }
}

TEST_CASE("afmoe settings, gate, post-norms, window, experts and shared expert are read from the file as llama.cpp "
          "reads them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen3moe" && c.file_arch == "afmoe" && c.attn_gate_proj && !c.attn_out_gate));
    CHECK((c.rope == ModelConfig::Rope::neox && c.n_rot == 32 && c.head_dim == 32 && c.n_head_kv == 2));
    CHECK((c.sliding_window == 8 && c.swa_pattern == 4 && c.no_rope_step == 4 && c.rope_base_local == 10000.0f));
    CHECK((c.layer_is_local(2) && !c.layer_is_local(3) && !c.layer_has_rope(3) && c.layer_has_rope(4)));
    CHECK(c.embd_scale == std::sqrt(128.0f));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 1));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 2.826f));
    CHECK((c.moe_shared_expert && c.layer_n_ff(0) == 192 && c.layer_n_ff(4) == 64));
    for (const LayerWeights& L : m->weights.layers) {
        CHECK((L.wgate.name.find("attn_gate.weight") != std::string::npos && L.wgate.n_rows() == 128));
        CHECK((L.attn_post_norm.size() == 128 && L.ffn_post_norm.size() == 128 && L.attn_q_norm.size() == 32));
    }
    CHECK(!m->weights.output_tied);
    // Trinity Mini's shape: 32 layers, the first two dense, 128 experts of 1024 (8 a token), a window of 2048
    const ModelConfig big = synthetic_config("trinity-mini");
    CHECK((big.file_arch == "afmoe" && big.n_layer == 32 && big.n_embd == 2048 && big.n_head == 32 &&
           big.n_head_kv == 4 && big.head_dim == 128 && big.n_expert == 128 && big.n_expert_used == 8 &&
           big.n_ff_exp == 1024 && big.n_leading_dense == 2 && big.sliding_window == 2048 && big.n_vocab == 200192));
}

TEST_CASE("afmoe: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("afmoe files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_afmoe_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("afmoe.expert_gating_func", uint32_t(4)); },
         "metadata 'afmoe.expert_gating_func' is 4, expected 1 (softmax) or 2 (sigmoid): the expert gating functions "
         "quill supports for afmoe"},
        {"nextn", [](GgufWriter& w) { w.set("afmoe.nextn_predict_layers", uint32_t(1)); },
         "NextN prediction layers ('afmoe.nextn_predict_layers') is not supported for afmoe"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on an afmoe file, and --device auto runs it on the CPU", "[arch][cli]") {
    // (no Trinity template in the corpus: the file's own, the synthetic model's ChatML)
    test::check_run_and_chat(kShape, "",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=64",
                              "gating=sigmoid with a selection bias, normalized=true scale=2.826 leading_dense=1",
                              "sliding_window=8 swa_pattern=4"});
}

}  // namespace test_arch_afmoe
