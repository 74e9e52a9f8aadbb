// mamba (Mamba-1: state-spaces' mamba-130m..2.8b, TII's falcon-mamba-7b; every layer its Mamba-1 mixer alone,
// x = x + mamba1(rms_norm(x)), no attention and no FFN) against llama.cpp: the synthetic mamba-tiny and
// falcon-mamba-tiny models (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic SHAPE --dtype f32|f16
// --save FILE` writes them: 3 layers of 256 channels, d_state 16, dt of rank 32, a conv of 4 taps and its bias;
// falcon-mamba's with ssm.dt_b_c_rms, the RMS norms of dt, B and C) regenerated, saved and loaded back, then run on
// the reference backend and the CPU backend of every kernel family this machine has. References in
// tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, n_ctx 256) over the 32 tokens below,
// made with tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
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
#include <functional>
#include <string>
#include <vector>

namespace test_arch_mamba {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "mamba-tiny";
constexpr const char* kFalcon = "falcon-mamba-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's (measured: see the commit).
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 2e-3, 1e-3}};

// Each of these leaves llama.cpp's logits of `shape` (max |diff| / range on the reference backend and the CPU
// backend's generic kernels, against 1e-5 above).
void check_mutant(const char* shape, const char* what, const std::function<void(ModelConfig&, Weights&)>& mutate) {
    const std::vector<double> e = test::mutant_error(shape, kCtx, mutate);
    INFO(shape << ", " << what << ": " << e[0] << ", " << e[1]);
    CHECK((e[0] > 1e-2 && e[1] > 1e-2));
}

std::function<void(ModelConfig&, Weights&)> each_layer(const std::function<void(LayerWeights&)>& f) {
    return [f](ModelConfig&, Weights& w) {
        for (LayerWeights& L : w.layers) f(L);
    };
}

}  // namespace

TEST_CASE("mamba tiny models (with and without falcon-mamba's norms): the reference backend gives llama.cpp's "
          "logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
    test::check_shape_against_llama_cpp(kFalcon, kCases, kCtx, false);
}

TEST_CASE("mamba tiny models (with and without falcon-mamba's norms): the CPU backend gives llama.cpp's logits and "
          "greedy tokens on every ISA", "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
    test::check_shape_against_llama_cpp(kFalcon, kCases, kCtx, true);
}

TEST_CASE("mamba settings and tensors are read from the file as llama.cpp reads them (no attention, no FFN), and "
          "each part of the mixer is what llama.cpp runs", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "mamba" && c.n_layer == 3 && c.mamba1() && !c.mamba2() && c.recurrent()));
    for (int64_t l = 0; l < 3; ++l) {
        INFO("layer " << l);
        CHECK((c.layer_is_recurrent(l) && c.layer_has_mixer(l) && !c.layer_has_attention(l) && !c.layer_has_ffn(l)));
    }
    CHECK((c.n_layer_kv() == 0 && c.n_ff == 0 && c.rms_eps == 1e-5f && !c.ssm_dt_b_c_rms));
    CHECK((c.ssm_conv == 4 && c.ssm_head_k == 16 && c.ssm_dt_rank == 32 && c.ssm_d_inner() == 256 &&
           c.ssm_conv_channels() == 256));
    const LayerWeights& L = m->weights.layers[1];
    CHECK((L.ssm_a.size() == 256 * 16 && L.ssm_d.size() == 256 && L.ssm_dt.size() == 256 &&
           L.ssm_conv1d_b.size() == 256 && L.ssm_dt_norm.empty()));
    auto names = [](const LayerWeights& w) {
        std::vector<std::string> n;
        for (const TensorView* t : layer_matrices(w)) n.push_back(t->name);
        return n;
    };
    CHECK(names(L) == std::vector<std::string>{"blk.1.ssm_in.weight", "blk.1.ssm_x.weight", "blk.1.ssm_dt.weight",
                                               "blk.1.ssm_out.weight"});
    CHECK(test::saved_synthetic(kFalcon, GgmlType::F32)->config.ssm_dt_b_c_rms);
    // state-spaces/mamba-2.8b's and falcon-mamba-7b's widths
    const ModelConfig big = synthetic_config("mamba-2.8b-4l"), falcon = synthetic_config("falcon-mamba-7b-4l");
    CHECK((big.n_embd == 2560 && big.ssm_d_inner() == 5120 && big.ssm_dt_rank == 160 && !big.ssm_dt_b_c_rms));
    CHECK((falcon.n_embd == 4096 && falcon.ssm_dt_rank == 256 && falcon.ssm_dt_b_c_rms));

    check_mutant(kShape, "no D skip",
                 each_layer([](LayerWeights& w) { std::fill(w.ssm_d.begin(), w.ssm_d.end(), 0.0f); }));
    // (on falcon-mamba's shape, whose normed B and C give the scan its weight beside the D skip)
    check_mutant(kFalcon, "no dt bias",
                 each_layer([](LayerWeights& w) { std::fill(w.ssm_dt.begin(), w.ssm_dt.end(), 0.0f); }));
    // the file's A (-exp(A_log), as the converter stores it) taken for A_log
    check_mutant(kFalcon, "A from A_log twice", each_layer([](LayerWeights& w) {
                     for (float& a : w.ssm_a) a = -std::exp(a);
                 }));
    check_mutant(kFalcon, "no dt/B/C norms", [](ModelConfig& mc, Weights&) { mc.ssm_dt_b_c_rms = false; });
    check_mutant(kShape, "dt/B/C norms where the file has none",
                 [](ModelConfig& mc, Weights&) { mc.ssm_dt_b_c_rms = true; });
}

TEST_CASE("mamba: a prompt in one batch gives its tokens one at a time bit for bit, a token's logits in any batch "
          "as alone", "[arch][cpu]") {
    test::check_prompt_equals_stepwise(kFalcon);
    test::check_mixed_batches(synthetic_config(kFalcon), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

// (check_chat_turns_continue_state is not run here, as for mamba2: this shape's greedy replies are bytes of no
// character, whose rendering in the next turn is other tokens; quill chat's two turns run in the CLI test below.)
TEST_CASE("mamba: a slot's state continues only from where it stands, or starts again at 0",
          "[arch][cpu][reference]") {
    test::check_state_continues_or_restarts(kShape);
}

TEST_CASE("mamba files quill cannot run are refused with one line naming what is wrong", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_mamba_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"inner", [](GgufWriter& w) { w.set("mamba.ssm.inner_size", uint32_t(384)); },
         "metadata 'mamba.ssm.inner_size' is 384, expected twice embedding_length 128 (as llama.cpp requires)"},
        {"rank", [](GgufWriter& w) { w.set("mamba.ssm.time_step_rank", uint32_t(0)); },
         "metadata 'mamba.ssm.time_step_rank' is 0, expected 1..65536"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a mamba file, --device auto runs it on the CPU, two CPU ranges "
          "give one backend's text and --lookup is refused", "[arch][cli]") {
    // (base models: no chat template of their own; the synthetic file's, ChatML)
    test::check_run_and_chat(kFalcon, "",
                             {"Mamba-1 in 3 layers, no attention, no FFN: conv=4 d_inner=256 d_state=16 dt_rank=32, "
                              "dt/B/C RMS-normed"});
    const fs::path file = test::temp_dir("arch_mamba_cli") / "tiny.gguf";
    SyntheticModel::make(synthetic_config(kShape), GgmlType::F32, 42)->save(file.string());
    test::check_split_over_two_cpus(file.string(), "2 of 3 layers on cpu (layers 0-1");
    auto lookup =
        test::run_quill({"run", "-m", file.string(), "-p", "Why is the sky blue?", "-n", "4", "--lookup", "4"});
    CHECK(lookup.status != 0);
    CHECK(lookup.err.find("--lookup and --draft-model cannot run on mamba models") != std::string::npos);
}

}  // namespace test_arch_mamba
