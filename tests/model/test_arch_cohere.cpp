// Cohere's Command R family against llama.cpp: cohere2 (Command R7B, Command A) and command-r (Command R, R+). The
// synthetic models (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic SHAPE --dtype f32|f16 --save FILE`
// writes them) regenerated, saved and loaded back, then run on the reference backend and the CPU backend of every
// kernel family this machine has:
// - cohere2-tiny: 5 layers of LayerNorms (no bias), attention and FFN in parallel from the one norm, layers 0-2 and 4
//   local (a window of 8, adjacent RoPE pairs), layer 3 global without RoPE, GQA 4/2, logits times 0.25, tied output;
// - command-r-tiny: 64 layers (llama.cpp gives command-r per-head Q and K LayerNorms, a weight row per head, from
//   Command R+'s 64 layers on) of the same blocks with RoPE everywhere and no window, GQA 2/1, logits times 0.0625.
// References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over
// the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1
// 300 45 72 ... 202.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_cohere {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured on both shapes: F32
// 2.4e-7 to 3.2e-7 on every backend; F16 2.2e-4 to 3.6e-4 (llama.cpp rounds each product's input to fp16).
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

// The blocks run one after the other as llama's do, the FFN reading its own norm of x + attention (attn_norm's
// weights): what parallel_blocks replaces.
void sequential(ModelConfig& c, Weights& w) {
    c.parallel_blocks = false;
    for (LayerWeights& L : w.layers) L.ffn_norm = L.attn_norm;
}

}  // namespace

TEST_CASE("cohere2 tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp("cohere2-tiny", kCases, kCtx, false);
}

TEST_CASE("cohere2 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp("cohere2-tiny", kCases, kCtx, true);
}

TEST_CASE("command-r tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp("command-r-tiny", kCases, kCtx, false);
}

TEST_CASE("command-r tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp("command-r-tiny", kCases, kCtx, true);
}

TEST_CASE("cohere2 and command-r: RMSNorm for LayerNorm, sequential blocks, RoPE on the global layers, no Q/K norms "
          "or no logit scale each leave llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature undone is far outside their tolerance on either backend.
    using Mutant = std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>;
    const std::vector<std::pair<const char*, std::vector<Mutant>>> shapes = {
        {"cohere2-tiny",
         {{"RMSNorm", [](ModelConfig& c, Weights&) { c.layer_norm = false; }},
          {"sequential", sequential},
          {"RoPE on the global layers", [](ModelConfig& c, Weights&) { c.no_rope_step = 0; }},
          {"no logit scale", [](ModelConfig& c, Weights&) { c.logit_mul = 1.0f; }}}},
        {"command-r-tiny",
         {{"RMSNorm", [](ModelConfig& c, Weights&) { c.layer_norm = false; }},
          {"sequential", sequential},
          {"no Q/K norms",
           [](ModelConfig&, Weights& w) {
               for (LayerWeights& L : w.layers) L.attn_q_norm.clear(), L.attn_k_norm.clear();
           }}}},
    };
    for (const auto& [shape, mutants] : shapes)
        for (const auto& [name, mutate] : mutants) {
            INFO(shape << ": " << name);
            for (double e : test::mutant_error(shape, kCtx, mutate)) CHECK(e > 1e-3);
        }
}

TEST_CASE("cohere2 and command-r settings are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = test::saved_synthetic("cohere2-tiny", GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "cohere2" && c.layer_norm && c.parallel_blocks && c.logit_mul == 0.25f && c.logit_scale == 1.0f));
    CHECK((c.rope == ModelConfig::Rope::adjacent && c.sliding_window == 8 && c.swa_pattern == 4 && c.rms_eps == 1e-5f));
    for (int64_t l = 0; l < 5; ++l) CHECK(c.layer_has_rope(l) == (l != 3));
    for (int64_t l = 0; l < 5; ++l) CHECK(c.layer_is_local(l) == (l != 3));
    CHECK((m->weights.output_tied && m->weights.layers[0].ffn_norm.empty() && m->weights.layers[0].bo.empty()));
    CHECK(m->weights.layers[0].attn_q_norm.empty());
    auto r = test::saved_synthetic("command-r-tiny", GgmlType::F16);
    const ModelConfig& rc = r->config;
    CHECK((rc.arch == "command-r" && rc.layer_norm && rc.parallel_blocks && rc.logit_mul == 0.0625f));
    CHECK((rc.sliding_window == 0 && rc.no_rope_step == 0 && rc.n_layer == 64 && r->weights.output_tied));
    // (a row of Q's norm per head, of K's per KV head)
    CHECK((r->weights.layers[63].attn_q_norm.size() == 64 && r->weights.layers[63].attn_k_norm.size() == 32));
    // The released shapes: Command R7B's window and layers, Command R+'s depth that brings the Q/K norms.
    const ModelConfig r7b = synthetic_config("command-r7b");
    CHECK((r7b.n_embd == 4096 && r7b.n_layer == 32 && r7b.n_head_kv == 8 && r7b.sliding_window == 4096 &&
           r7b.n_vocab == 256000 && !r7b.layer_has_rope(3) && r7b.layer_has_rope(4)));
    CHECK(synthetic_config("command-r-plus-104b").n_layer == 64);
}

TEST_CASE("cohere2 and command-r: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("cohere2-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
    test::check_mixed_batches(synthetic_config("command-r-tiny"), {GgmlType::Q8_0}, kCtx);
}

TEST_CASE("cohere2 and command-r files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_cohere_refused");
    test::check_refused_metadata(
        dir, "cohere2-tiny",
        {{"window", [](GgufWriter& w) { w.set("cohere2.attention.sliding_window", uint32_t(0)); },
          "metadata 'cohere2.attention.sliding_window' is 0, expected 1..1073741824"},
         {"logit scale", [](GgufWriter& w) { w.set("cohere2.logit_scale", -1.0f); },
          "metadata 'cohere2.logit_scale' is -1, expected 0..1000000"}});
    test::check_refused_metadata(
        dir, "command-r-tiny",
        {{"eps", [](GgufWriter& w) { w.set("command-r.attention.layer_norm_epsilon", 2.0f); },
          "metadata 'command-r.attention.layer_norm_epsilon' is 2, expected 0..1"}});
}

TEST_CASE("quill run and chat work end to end on cohere2 and command-r files with Cohere's chat templates, and "
          "--device auto runs them on the CPU", "[arch][cli]") {
    test::check_run_and_chat("cohere2-tiny", "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
                             {"layer_norm=true parallel=true logit_scale=0.25", "sliding_window=8 swa_pattern=4"});
    // (command-r-v01-tiny: 3 layers where command-r-tiny's 64 take seconds over the template's 2,800-token preamble)
    test::check_run_and_chat("command-r-v01-tiny", "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
                             {"layer_norm=true parallel=true logit_scale=0.0625"});
}

}  // namespace test_arch_cohere
