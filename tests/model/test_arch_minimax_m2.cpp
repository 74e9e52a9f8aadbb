// minimax-m2 (MiniMax-M2, M2.1: qwen3moe's layers with Q/K norms over the whole projection, partial rotary dims and
// DeepSeek-V3-style sigmoid routing) against llama.cpp: the synthetic minimax-m2-tiny model
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic minimax-m2-tiny --dtype f32|f16 --save FILE`
// writes it: 3 layers, each with 8 experts of 64 features, 2 a token, chosen by sigmoid(logit) + a selection bias and
// weighted by the normalized sigmoids; 4 heads of 64 (2 KV heads) whose Q and K are RMS-normalized over the whole
// projection, 256 and 128 values, then rotated in NEOX pairs over 32 of each head's dims) regenerated, saved and
// loaded back, then run on the reference backend and the CPU backend of every kernel family this machine has.
// References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over
// the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says how):
// dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_minimax_m2 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "minimax-m2-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: see the commit.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("minimax-m2 tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("minimax-m2 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("minimax-m2: per-head Q/K norms (qwen3moe's), every dim rotated, softmax gating or no selection bias each "
          "leave llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each place where minimax-m2 differs from qwen3moe, done qwen3moe's way, is far
    // outside their tolerance on either backend.
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"per-head Q/K norms",
         [](ModelConfig& c, Weights& w) {
             for (LayerWeights& L : w.layers) {
                 L.attn_q_norm.resize(static_cast<size_t>(c.head_dim));
                 L.attn_k_norm.resize(static_cast<size_t>(c.head_dim));
             }
         }},
        {"every dim rotated", [](ModelConfig& c, Weights&) { c.n_rot = c.head_dim; }},
        {"softmax", [](ModelConfig& c, Weights&) { c.moe_gating_sigmoid = false; }},
        {"no selection bias",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) std::fill(L.ffn_exp_probs_b.begin(), L.ffn_exp_probs_b.end(), 0.0f);
         }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) CHECK(e > 1e-2);
    }
}

TEST_CASE("minimax-m2 settings, whole-projection Q/K norms and experts are read from the file as llama.cpp reads them",
          "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen3moe" && c.file_arch == "minimax-m2" && c.qk_norm_whole));
    CHECK((c.rope == ModelConfig::Rope::neox && c.n_rot == 32 && c.head_dim == 64 && c.n_head_kv == 2));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_leading_dense == 0));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 1.0f));
    CHECK((!c.moe_shared_expert && !c.dense_ffn()));
    for (const LayerWeights& L : m->weights.layers) {
        CHECK((L.experts.size() == 8 && L.ffn_exp_probs_b.size() == 8 && L.ffn_gate.data == nullptr));
        CHECK((L.attn_q_norm.size() == 256 && L.attn_k_norm.size() == 128 && L.bq.empty()));
    }
    CHECK(!m->weights.output_tied);
    // MiniMax-M2's shape: 62 layers of 256 experts of 1536 (8 a token), heads of 128 rotating 64 dims
    const ModelConfig big = synthetic_config("minimax-m2");
    CHECK((big.file_arch == "minimax-m2" && big.n_layer == 62 && big.n_embd == 3072 && big.n_head == 48 &&
           big.n_head_kv == 8 && big.head_dim == 128 && big.n_rot == 64 && big.n_expert == 256 &&
           big.n_expert_used == 8 && big.n_ff_exp == 1536 && big.n_vocab == 200064));
}

TEST_CASE("minimax-m2: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("minimax-m2 files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_minimax_m2_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("minimax-m2.expert_gating_func", uint32_t(0)); },
         "metadata 'minimax-m2.expert_gating_func' is 0, expected 1 (softmax) or 2 (sigmoid): the expert gating "
         "functions quill supports for minimax-m2"},
        {"expert width", [](GgufWriter& w) { w.set("minimax-m2.expert_feed_forward_length", uint32_t(0)); },
         "metadata 'minimax-m2.expert_feed_forward_length' is 0, expected 1..16777216"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a minimax-m2 file with MiniMax-M2's chat template, and --device "
          "auto runs it on the CPU", "[arch][cli]") {
    test::check_run_and_chat(kShape, "MiniMax-M2.jinja",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64",
                              "gating=sigmoid with a selection bias, normalized=true scale=1.0 leading_dense=0"});
}

}  // namespace test_arch_minimax_m2
