// mamba2 (pure Mamba-2 models: Mistral's Mamba-Codestral 7B, state-spaces' mamba2-130m..2.7b; every layer its
// Mamba-2 mixer alone, x = x + mamba2(rms_norm(x)), no attention and no FFN) against llama.cpp: the synthetic
// mamba2-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic mamba2-tiny --dtype f32|f16
// --save FILE` writes it: 3 layers of 8 heads of 32 over 2 groups of B and C of d_state 64, a conv of 4 taps and its
// bias, the grouped norm; head_count and feed_forward_length 0 as the converter writes them) regenerated, saved and
// loaded back, then run on the reference backend and the CPU backend of every kernel family this machine has.
// References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, n_ctx 256) over the 32
// tokens below, made with tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72
// ... 202.
#include "engine/model/layer_matrices.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/recurrent_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace test_arch_mamba2 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "mamba2-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's (measured: see the commit).
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("mamba2 tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("mamba2 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA", "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("mamba2 settings and tensors are read from the file as llama.cpp reads them (no attention, no FFN), and "
          "each part of the mixer is what llama.cpp runs", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "mamba2" && c.n_layer == 3 && c.mamba2() && c.recurrent() && !c.ssm_beside_attn));
    for (int64_t l = 0; l < 3; ++l) {
        INFO("layer " << l);
        CHECK((c.layer_is_recurrent(l) && c.layer_has_mixer(l) && !c.layer_has_attention(l) && !c.layer_has_kv(l) &&
               !c.layer_has_ffn(l)));
    }
    CHECK((c.n_layer_kv() == 0 && c.n_ff == 0 && c.rms_eps == 1e-5f));
    CHECK((c.ssm_conv == 4 && c.ssm_head_k == 64 && c.ssm_n_k_heads == 2 && c.ssm_n_v_heads == 8 &&
           c.ssm_head_v == 32 && c.ssm_d_inner() == 256));
    for (const LayerWeights& L : m->weights.layers) {
        CHECK((L.ffn_norm.empty() && L.ssm_norm.size() == 256 && L.ssm_conv1d_b.size() == 512 && L.ssm_a.size() == 8));
        CHECK(layer_matrices(L).size() == 2);  // (ssm_in, ssm_out)
    }
    // Mamba-Codestral 7B's widths
    const ModelConfig big = synthetic_config("mamba-codestral-7b-4l");
    CHECK((big.n_embd == 4096 && big.ssm_d_inner() == 8192 && big.ssm_n_v_heads == 128 && big.ssm_n_k_heads == 8 &&
           big.ssm_head_k == 128 && big.n_layer_kv() == 0));

    // Each of these leaves llama.cpp's logits (max |diff| / range on the reference backend and the CPU backend's
    // generic kernels, against 1e-5 above).
    auto check_mutant = [](const char* what, const std::function<void(ModelConfig&, Weights&)>& mutate) {
        const std::vector<double> e = test::mutant_error(kShape, kCtx, mutate);
        INFO(what << ": " << e[0] << ", " << e[1]);
        CHECK((e[0] > 1e-2 && e[1] > 1e-2));
    };
    auto each_layer = [](const std::function<void(LayerWeights&)>& f) {
        return [f](ModelConfig&, Weights& w) {
            for (LayerWeights& L : w.layers) f(L);
        };
    };
    check_mutant("no D skip", each_layer([](LayerWeights& L) { std::fill(L.ssm_d.begin(), L.ssm_d.end(), 0.0f); }));
    check_mutant("no dt bias", each_layer([](LayerWeights& L) { std::fill(L.ssm_dt.begin(), L.ssm_dt.end(), 0.0f); }));
    // the file's A (-exp(A_log), as the converter stores it) taken for A_log
    check_mutant("A from A_log twice", each_layer([](LayerWeights& L) {
                     for (float& a : L.ssm_a) a = -std::exp(a);
                 }));
    check_mutant("no grouped norm", each_layer([](LayerWeights& L) { L.ssm_norm.clear(); }));
}

TEST_CASE("mamba2: a prompt in one batch gives its tokens one at a time bit for bit, a token's logits in any batch "
          "as alone", "[arch][cpu]") {
    test::check_prompt_equals_stepwise(kShape);
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

// (check_chat_turns_continue_state is not run here: this shape's greedy replies begin with bytes of no character,
// whose rendering in the next turn is other tokens, so no turn continues the state of the one before; quill chat's
// two turns run in the CLI test below.)
TEST_CASE("mamba2: a slot's state continues only from where it stands, or starts again at 0",
          "[arch][cpu][reference]") {
    test::check_state_continues_or_restarts(kShape);
}

TEST_CASE("mamba2 files quill cannot run are refused with one line naming what is wrong", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_mamba2_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"groups", [](GgufWriter& w) { w.set("mamba2.ssm.group_count", uint32_t(3)); },
         "metadata 'mamba2.ssm.inner_size' 256 is not a multiple of 'mamba2.ssm.time_step_rank' 8, or that of "
         "'mamba2.ssm.group_count' 3"},
        {"state", [](GgufWriter& w) { w.set("mamba2.ssm.state_size", uint32_t(0)); },
         "metadata 'mamba2.ssm.state_size' is 0, expected 1..1024"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a mamba2 file, --device auto runs it on the CPU, two CPU ranges "
          "give one backend's text and --lookup is refused", "[arch][cli]") {
    // (base models: no chat template of their own; the synthetic file's, ChatML)
    test::check_run_and_chat(kShape, "",
                             {"Mamba-2 in 3 layers, no attention, no FFN: conv=4 n_group=2 n_head=8 head_dim=32 "
                              "d_state=64"});
    const fs::path file = test::temp_dir("arch_mamba2_cli") / "tiny.gguf";
    SyntheticModel::make(synthetic_config(kShape), GgmlType::F32, 42)->save(file.string());
    test::check_split_over_two_cpus(file.string(), "2 of 3 layers on cpu (layers 0-1");
    auto lookup =
        test::run_quill({"run", "-m", file.string(), "-p", "Why is the sky blue?", "-n", "4", "--lookup", "4"});
    CHECK(lookup.status != 0);
    CHECK(lookup.err.find("--lookup and --draft-model cannot run on mamba2 models") != std::string::npos);
}

}  // namespace test_arch_mamba2
