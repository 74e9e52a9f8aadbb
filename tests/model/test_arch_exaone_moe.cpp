// exaone-moe (LG K-EXAONE: qwen3moe's layers with RoPE on the sliding-window layers alone and experts beside a shared
// one after a leading dense layer) against llama.cpp: the synthetic exaone-moe-tiny model (engine/model/synthetic.cpp,
// seed 42, as `quill bench --synthetic exaone-moe-tiny --dtype f32|f16 --save FILE` writes it: 5 layers, layer 0 a
// dense FFN of 192, layers 1-4 with 8 experts of 64, 2 a token, chosen by sigmoid(logit) + a selection bias and
// weighted by the normalized sigmoids times 2.5, beside a shared expert of 96; 4 heads of 32 over 2 KV heads with
// per-head Q/K norms; layers 0-2 and 4 local (a window of 8) rotating NEOX pairs, layer 3 global without RoPE; one
// dense NextN block after them, in the file and never run; no rope_freqs, which llama.cpp's exaone-moe counts twice
// beside a NextN block and then refuses the file) regenerated, saved and loaded
// back, then run on the reference backend and the CPU backend of every kernel family this machine has.
// References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over
// the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says how):
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

namespace test_arch_exaone_moe {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "exaone-moe-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("exaone-moe tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("exaone-moe tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("exaone-moe: no shared expert, softmax gating, no selection bias, RoPE on the global layers or none on the "
          "local ones each leave llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature turned off is far outside their tolerance on either backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"no shared expert", [](ModelConfig& c, Weights&) { c.moe_shared_expert = false; }},
        {"softmax", [](ModelConfig& c, Weights&) { c.moe_gating_sigmoid = false; }},
        {"no selection bias",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) std::fill(L.ffn_exp_probs_b.begin(), L.ffn_exp_probs_b.end(), 0.0f);
         }},
        {"RoPE on every layer", [](ModelConfig& c, Weights&) { c.no_rope_step = 0; }},
        {"RoPE on the global layers alone", [](ModelConfig& c, Weights&) { c.no_rope_step = 1; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-2);
    }
}

TEST_CASE("exaone-moe settings, window, experts, shared expert and NextN block are read from the file as llama.cpp "
          "reads them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen3moe" && c.file_arch == "exaone-moe" && c.n_layer == 5 && c.n_layer_nextn == 1));
    CHECK((c.rope == ModelConfig::Rope::neox && c.n_rot == 32 && c.head_dim == 32 && c.n_head_kv == 2));
    CHECK((c.sliding_window == 8 && c.swa_pattern == 4 && c.no_rope_step == 4 && c.rope_base_local == c.rope_base));
    for (int64_t l = 0; l < 5; ++l) CHECK((c.layer_is_local(l) == (l != 3) && c.layer_has_rope(l) == (l != 3)));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 1));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 2.5f));
    CHECK((c.moe_shared_expert && !c.moe_shared_gate && c.layer_n_ff(0) == 192 && c.layer_n_ff(4) == 96));
    CHECK((m->weights.layers.size() == 5 && m->weights.rope_freqs.empty() && !m->weights.output_tied));
    const LayerWeights& L = m->weights.layers[4];
    CHECK((L.experts.size() == 8 && L.ffn_exp_probs_b.size() == 8 && L.ffn_gate.name == "blk.4.ffn_gate_shexp.weight"));
    CHECK((L.attn_q_norm.size() == 32 && L.attn_k_norm.size() == 32 && L.attn_post_norm.empty()));
    // K-EXAONE's shape: 48 layers, the first dense of 18432, 128 experts of 2048 (8 a token), a shared one
    const ModelConfig big = synthetic_config("k-exaone");
    CHECK((big.file_arch == "exaone-moe" && big.n_layer == 48 && big.n_embd == 6144 && big.n_head == 64 &&
           big.n_head_kv == 8 && big.n_expert == 128 && big.n_expert_used == 8 && big.n_ff_exp == 2048 &&
           big.layer_n_ff(0) == 18432 && big.layer_n_ff(1) == 2048 && big.sliding_window == 128));
}

TEST_CASE("exaone-moe: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("exaone-moe files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_exaone_moe_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("exaone-moe.expert_gating_func", uint32_t(3)); },
         "metadata 'exaone-moe.expert_gating_func' is 3, expected 1 (softmax) or 2 (sigmoid): the expert gating "
         "functions quill supports for exaone-moe"},
        {"window", [](GgufWriter& w) { w.set("exaone-moe.attention.sliding_window", uint32_t(0)); },
         "metadata 'exaone-moe.attention.sliding_window' is 0, expected 1..1073741824"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on an exaone-moe file, and --device auto runs it on the CPU",
          "[arch][cli]") {
    // (no K-EXAONE template in the corpus: the file's own, the synthetic model's ChatML)
    test::check_run_and_chat(kShape, "",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96",
                              "gating=sigmoid with a selection bias, normalized=true scale=2.5 leading_dense=1",
                              "sliding_window=8 swa_pattern=4"});
}

}  // namespace test_arch_exaone_moe
