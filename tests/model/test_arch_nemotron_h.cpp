// nemotron_h (NVIDIA Nemotron-H: Nemotron Nano 9B/12B v2; each layer ONE block, a Mamba-2 mixer, GQA attention
// without RoPE or a ReLU-squared FFN without a gate) against llama.cpp: the synthetic nemotron_h-tiny model
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic nemotron_h-tiny --dtype f32|f16 --save FILE`
// writes it: 6 layers "-M*-M*", the FFNs of 256 features, Mamba-2 of 8 heads of 32 over 2 groups of B and C of
// d_state 64 with a conv of 4 taps and its bias, GQA 4/2 of 32) regenerated, saved and loaded back, then run on the
// reference backend and the CPU backend of every kernel family this machine has. References in tests/data/arch/:
// llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with
// tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/model/layer_matrices.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/recurrent_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace test_arch_nemotron_h {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "nemotron_h-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's (measured: see the commit).
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

GgufValue u32_array(const std::vector<uint32_t>& v) {
    std::vector<GgufValue> a;
    for (uint32_t x : v) a.emplace_back(x);
    return GgufValue::array(GgufType::U32, a);
}

}  // namespace

TEST_CASE("nemotron_h tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("nemotron_h tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("nemotron_h settings, layer blocks and tensors are read from the file as llama.cpp reads them",
          "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "nemotron_h" && c.n_layer == 6 && c.mamba2() && c.recurrent()));
    // "-M*-M*": head_count_kv and feed_forward_length a layer say each one's block
    const bool mixer[] = {false, true, true, false, true, true}, mamba[] = {false, true, false, false, true, false};
    for (int64_t l = 0; l < 6; ++l) {
        INFO("layer " << l);
        CHECK(c.layer_has_mixer(l) == mixer[l]);
        CHECK(c.layer_has_ffn(l) == !mixer[l]);
        CHECK(c.layer_is_recurrent(l) == mamba[l]);
        CHECK(c.layer_has_kv(l) == (l == 2 || l == 5));
        CHECK(c.layer_n_ff(l) == (mixer[l] ? 0 : 256));
        CHECK(!c.layer_has_rope(l));
    }
    CHECK((c.n_layer_kv() == 2 && c.n_head == 4 && c.n_head_kv == 2 && c.head_dim == 32));
    CHECK((c.ffn_act == ModelConfig::Activation::relu_sqr && !c.ffn_gated() &&
           c.attn_scale == 1.0f / std::sqrt(32.0f)));
    CHECK(c.rms_eps == 1e-5f);  // (attention.layer_norm_epsilon: the file has no layer_norm_rms_epsilon)
    CHECK((c.ssm_conv == 4 && c.ssm_head_k == 64 && c.ssm_n_k_heads == 2 && c.ssm_n_v_heads == 8 &&
           c.ssm_head_v == 32 && c.ssm_d_inner() == 256));
    const LayerWeights& ffn = m->weights.layers[0];
    CHECK((ffn.ffn_gate.data == nullptr && ffn.ffn_up.n_rows() == 256 && ffn.ffn_down.ne[0] == 256));
    CHECK((ffn.attn_norm.empty() && ffn.ffn_norm.size() == 128 && ffn.wq.data == nullptr && !ffn.recurrent()));
    auto names = [](const LayerWeights& L) {
        std::vector<std::string> n;
        for (const TensorView* t : layer_matrices(L)) n.push_back(t->name);
        return n;
    };
    CHECK(names(ffn) == std::vector<std::string>{"blk.0.ffn_up.weight", "blk.0.ffn_down.weight"});
    CHECK(names(m->weights.layers[1]) == std::vector<std::string>{"blk.1.ssm_in.weight", "blk.1.ssm_out.weight"});
    CHECK(names(m->weights.layers[2]) == std::vector<std::string>{"blk.2.attn_q.weight", "blk.2.attn_k.weight",
                                                                  "blk.2.attn_v.weight", "blk.2.attn_output.weight"});
    CHECK((m->weights.layers[2].ffn_norm.empty() && m->weights.layers[1].ffn_norm.empty()));
    // A wrong layer kind leaves llama.cpp's logits: layer 3's FFN not run (a layer of no block).
    ModelConfig wrong = c;
    wrong.layer_blocks[3] = 0;
    ReferenceBackend good(c, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
    ReferenceBackend bad(wrong, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
    const auto tokens = test::some_tokens(8, static_cast<int>(c.n_vocab), 3);
    const auto want = test::prefill_logits(good, tokens);
    CHECK(test::max_diff(test::prefill_logits(bad, tokens), want) > 1e-2 * test::max_abs(want));
    // Nemotron Nano 9B v2's widths
    const ModelConfig big = synthetic_config("nemotron-nano-9b-v2-4l");
    CHECK((big.n_embd == 4480 && big.ssm_d_inner() == 10240 && big.ssm_n_v_heads == 128 && big.layer_n_ff(1) == 15680 &&
           big.layer_is_recurrent(0) && big.layer_has_kv(2) && !big.layer_has_mixer(3)));
}

TEST_CASE("nemotron_h: a prompt in one batch gives its tokens one at a time bit for bit, a token's logits in any "
          "batch as alone", "[arch][cpu]") {
    test::check_prompt_equals_stepwise(kShape);
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("nemotron_h: a slot's Mamba-2 state continues only from where it stands, or starts again at 0, and chat "
          "turns continue it", "[arch][cpu][reference]") {
    test::check_state_continues_or_restarts(kShape);
    test::check_chat_turns_continue_state(*test::saved_synthetic(kShape, GgmlType::F32));
}

TEST_CASE("nemotron_h files quill cannot run are refused with one line naming what is wrong", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_nemotron_h_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"kv-heads", [](GgufWriter& w) { w.set("nemotron_h.attention.head_count_kv", u32_array({0, 0, 2, 0, 0, 4})); },
         "metadata 'nemotron_h.attention.head_count_kv' differs between two attention layers (2 and 4; quill "
         "supports one value)"},
        {"eps", [](GgufWriter& w) { w.set("nemotron_h.attention.layer_norm_epsilon", 2.0f); },
         "metadata 'nemotron_h.attention.layer_norm_epsilon' is 2, expected 0..1"},
        {"ff-length", [](GgufWriter& w) { w.set("nemotron_h.feed_forward_length", u32_array({256, 0, 0})); },
         "metadata 'nemotron_h.feed_forward_length' is an array of 3 u32 values, expected 6 integers (one a layer)"},
    };
    test::check_refused_metadata(dir, kShape, cases);
    // Another pattern of layers, as the arrays say it: layer 0 attention (its tensors missing: refused by name, as
    // llama.cpp refuses it).
    const std::string f = test::synthetic_with_metadata(dir, kShape, "pattern", [](GgufWriter& w) {
        w.set("nemotron_h.feed_forward_length", u32_array({0, 0, 0, 256, 0, 0}));
        w.set("nemotron_h.attention.head_count_kv", u32_array({2, 0, 2, 0, 0, 2}));
    });
    CHECK_THROWS_WITH(Model::load(f), Catch::Contains("missing tensor 'blk.0.attn_q.weight'"));
}

// Nemotron 3 Nano's layers (nemotron_h_moe): in each FFN layer 8 ReLU-squared experts of 64 without a gate, 2 a token
// by sigmoid routing with a selection bias, renormalized and scaled by 2.5, beside a shared expert of 96.
TEST_CASE("nemotron_h_moe tiny model: both backends give llama.cpp's logits and greedy tokens",
          "[arch][reference][cpu]") {
    const test::ArchFiles files[] = {{"nemotron_h_moe-tiny", 1e-3}};
    test::check_files_against_llama_cpp(files, kCtx, false);
    test::check_files_against_llama_cpp(files, kCtx, true);
}

TEST_CASE("nemotron_h_moe settings and experts are read from the file as llama.cpp reads them, and a token's logits "
          "are the same in any batch as alone", "[arch][model][cpu]") {
    auto m = test::saved_synthetic("nemotron_h_moe-tiny", GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "nemotron_h" && c.file_arch == "nemotron_h_moe" && !c.ffn_gated()));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_ff == 96 && c.moe_n_group == 1));
    CHECK((c.moe_gating_sigmoid && c.moe_selection_bias && c.moe_norm_weights && c.moe_weights_scale == 2.5f &&
           c.moe_shared_expert && !c.moe_shared_gate));
    for (int64_t l = 0; l < 6; ++l) CHECK(c.layer_moe(l) == (l == 0 || l == 3));
    const LayerWeights& e = m->weights.layers[3];
    CHECK((e.experts.size() == 8 && e.experts[0].gate.data == nullptr && e.experts[0].up.n_rows() == 64 &&
           e.ffn_exp_probs_b.size() == 8 && e.ffn_gate.data == nullptr && e.ffn_up.n_rows() == 96));
    CHECK((m->weights.layers[2].experts.empty() && m->weights.layers[2].ffn_exp_probs_b.empty()));
    CHECK(layer_matrices(e).size() == 2 + 1 + 8 * 2);  // (the shared expert's up and down, the router, 8 ups and downs)
    const ModelConfig nano = synthetic_config("nemotron-3-nano-30b-a3b-4l");
    CHECK((nano.n_embd == 2688 && nano.n_expert == 128 && nano.n_expert_used == 6 && nano.n_ff_exp == 1856 &&
           nano.n_ff == 3712 && nano.ssm_d_inner() == 4096 && nano.layer_moe(1) && !nano.layer_moe(2)));
    test::check_mixed_batches(synthetic_config("nemotron_h_moe-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
    // Nemotron 3 Super's latent projections are refused by name.
    const fs::path dir = test::temp_dir("arch_nemotron_h_moe_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"latent", [](GgufWriter& w) { w.set("nemotron_h_moe.moe_latent_size", uint32_t(64)); },
         "the experts' latent projections (Nemotron 3 Super) ('nemotron_h_moe.moe_latent_size') is not supported for "
         "nemotron_h_moe"},
    };
    test::check_refused_metadata(dir, "nemotron_h_moe-tiny", cases);
}

TEST_CASE("quill run and chat work end to end on a nemotron_h file with Nemotron Nano v2's chat template, --device "
          "auto runs it on the CPU and --lookup is refused", "[arch][cli]") {
    test::check_run_and_chat(kShape, "NVIDIA-Nemotron-Nano-v2.jinja",
                             {"Mamba-2 in 2 layers, attention in 2, an FFN alone in 2: conv=4 n_group=2 n_head=8 "
                              "head_dim=32 d_state=64"});
    const fs::path file = test::temp_dir("arch_nemotron_h_lookup") / "tiny.gguf";
    SyntheticModel::make(synthetic_config(kShape), GgmlType::F32, 42)->save(file.string());
    auto lookup =
        test::run_quill({"run", "-m", file.string(), "-p", "Why is the sky blue?", "-n", "4", "--lookup", "4"});
    CHECK(lookup.status != 0);
    CHECK(lookup.err.find("--lookup and --draft-model cannot run on nemotron_h models") != std::string::npos);
    test::check_run_and_chat("nemotron_h_moe-tiny", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
                             {"n_expert=8 n_expert_used=2 n_ff_exp=64 n_ff_shexp=96",
                              "gating=sigmoid with a selection bias, normalized=true scale=2.5"});
}

}  // namespace test_arch_nemotron_h
