// qwen3next (Qwen3-Next, which Qwen3.5 descends from: qwen35moe's layers with plain NEOX RoPE and its delta nets
// grouped by key head) against llama.cpp: the synthetic qwen3next-tiny model (engine/model/synthetic.cpp, seed 42, as
// `quill bench --synthetic qwen3next-tiny --dtype f32|f16 --save FILE` writes it: qwen35moe-tiny's shape, 5 layers,
// 0-2 and 4 delta nets of 2 key heads for 4 value heads, layer 0's q, k, v and z in one ssm_in as the older files
// have them, the others in attn_qkv and attn_gate, beta and alpha in one ssm_ba; 3 full attention; 8 experts of 64,
// 2 a token, and a gated shared expert of 96) regenerated, saved and loaded back, then run on the reference backend
// and the CPU backend of every kernel family this machine has. References in tests/data/arch/: llama.cpp
// (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with
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

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace test_arch_qwen3next {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: F32 1.3e-6 to 3.2e-6 on
// every backend; F16 2.1e-3 on the reference backend (it does not round the F16 products' inputs to fp16, which
// llama.cpp does, and the recurrence carries the difference on: its greedy tokens leave llama.cpp's after the third,
// so only those are compared there), 6.0e-4 to 7.7e-4 on the CPU backend's paths (all 24 greedy tokens).
constexpr test::ArchCase kReferenceCases[] = {{GgmlType::F32, 1e-4, 1e-4}, {GgmlType::F16, 4e-3, 1.5e-3, 3}};
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-4, 1e-4}, {GgmlType::F16, 4e-3, 1.5e-3}};

// The largest max |diff| / range over the prompt positions of `b` against llama.cpp's F32 logits.
double worst_against_llama_cpp(Backend& b, const test::RefLogits& ref, int64_t n_vocab) {
    const std::vector<float> got = test::prefill_logits(b, ref.tokens);
    double worst = 0;
    for (size_t p = 0; p < ref.tokens.size(); ++p) {
        const auto [lo, hi] = std::minmax_element(ref.logits[p].begin(), ref.logits[p].end());
        worst = std::max(worst, test::max_diff(test::rows(got, n_vocab, p, p + 1), ref.logits[p]) / (*hi - *lo));
    }
    return worst;
}

}  // namespace

TEST_CASE("qwen3next tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp("qwen3next-tiny", kReferenceCases, kCtx, false);
}

TEST_CASE("qwen3next tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp("qwen3next-tiny", kCases, kCtx, true);
}

TEST_CASE("qwen3next: its delta nets read as qwen35moe's (key head h % n_k_heads) leave llama.cpp's logits",
          "[arch][reference][cpu]") {
    // The checks above can fail: the same file with value head h reading key head h % 2 (qwen35's tiling) rather than
    // h / 2 (its group's) is far outside their tolerance, on either backend.
    auto m = test::saved_synthetic("qwen3next-tiny", GgmlType::F32);
    ModelConfig tiled = m->config;
    tiled.ssm_grouped = false;
    const test::RefLogits ref = test::read_ref_logits(test::arch_ref_path("qwen3next-tiny-f32.prompt_logits.txt"));
    ReferenceBackend reference(tiled, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
    auto cpu = test::arch_cpu_backend(tiled, m->weights, cpu::Isa::generic, kCtx);
    for (Backend* b : {static_cast<Backend*>(&reference), static_cast<Backend*>(cpu.get())}) {
        INFO(b->name());
        CHECK(worst_against_llama_cpp(*b, ref, tiled.n_vocab) > 0.05);
    }
}

TEST_CASE("qwen3next settings and its grouped delta net tensors are read from the file as llama.cpp reads them",
          "[arch][model]") {
    auto m = test::saved_synthetic("qwen3next-tiny", GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen35moe" && c.file_arch == "qwen3next" && c.gguf_arch() == "qwen3next"));
    CHECK((c.rope == ModelConfig::Rope::neox && c.rope_sections[0] + c.rope_sections[1] + c.rope_sections[2] == 0));
    CHECK((c.ssm_grouped && c.full_attn_interval == 4 && c.attn_out_gate && c.ssm_n_k_heads == 2 &&
           c.ssm_n_v_heads == 4));
    CHECK((c.ssm_k_head(0) == 0 && c.ssm_k_head(1) == 0 && c.ssm_k_head(2) == 1 && c.ssm_k_head(3) == 1));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_ff == 96 && c.moe_shared_gate));
    // Layer 0: q, k, v and z in one ssm_in (256 + 128 rows), beta and alpha in one ssm_ba (8 rows).
    const LayerWeights& old = m->weights.layers[0];
    CHECK((old.ssm_in.name == "blk.0.ssm_in.weight" && old.ssm_in.n_rows() == 256 + 128 && !old.ssm_z.data));
    CHECK((old.ssm_beta.name == "blk.0.ssm_ba.weight" && old.ssm_beta.n_rows() == 8 && !old.ssm_alpha.data));
    CHECK(recurrent_matrices(old).size() == 3);
    // Layer 2: attn_qkv and attn_gate, and ssm_ba.
    const LayerWeights& split = m->weights.layers[2];
    CHECK((split.ssm_in.name == "blk.2.attn_qkv.weight" && split.ssm_in.n_rows() == 256 &&
           split.ssm_z.n_rows() == 128 && split.ssm_beta.n_rows() == 8 && !split.ssm_alpha.data));
    CHECK(recurrent_matrices(split).size() == 4);
    // A multi-token-prediction block after the layers (newer converters keep Qwen3-Next's) is loaded and not run.
    const std::string mtp = test::synthetic_with_metadata(test::temp_dir("arch_qwen3next_mtp"), "qwen3next-tiny",
                                                          "mtp", [](GgufWriter& w) {
        w.set("qwen3next.block_count", uint32_t(6));
        w.set("qwen3next.nextn_predict_layers", uint32_t(1));
        w.add_tensor("blk.5.nextn.eh_proj.weight", GgmlType::F32, {256, 128}, std::vector<uint8_t>(256 * 128 * 4, 0));
    });
    CHECK(Model::load(mtp)->config.n_layer == 5);
    // The released shape: Qwen3-Next-80B-A3B, and its first 8 layers.
    for (const char* shape : {"qwen3-next-80b-a3b", "qwen3-next-80b-a3b-8l"}) {
        const ModelConfig big = synthetic_config(shape);
        CHECK((big.gguf_arch() == "qwen3next" && big.ssm_grouped && big.n_embd == 2048 && big.n_head == 16 &&
               big.n_head_kv == 2 && big.head_dim == 256 && big.n_rot == 64 && big.n_expert == 512 &&
               big.n_expert_used == 10 && big.n_ff_exp == 512 && big.n_ff == 512 && big.ssm_n_k_heads == 16 &&
               big.ssm_n_v_heads == 32 && big.n_vocab == 151936));
        CHECK(big.n_layer == (std::string(shape).ends_with("-8l") ? 8 : 48));
    }
}

TEST_CASE("qwen3next: a prompt in one batch gives its tokens one at a time bit for bit, and a token's logits have "
          "the same bits in any batch", "[arch][cpu]") {
    test::check_prompt_equals_stepwise("qwen3next-tiny");
    test::check_mixed_batches(synthetic_config("qwen3next-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("qwen3next: a slot's recurrent state continues only from where it stands, and chat turns continue it",
          "[arch][chat]") {
    test::check_state_continues_or_restarts("qwen3next-tiny");
    test::check_chat_turns_continue_state(*test::saved_synthetic("qwen3next-tiny", GgmlType::F32));
}

TEST_CASE("quill run and chat work end to end on a qwen3next file with Qwen3's chat template, --device auto runs it "
          "on the CPU, and guessed tokens are refused", "[arch][cli]") {
    const fs::path dir = test::temp_dir("arch_cli_qwen3next");
    const std::string file = (dir / "qwen3next-tiny.gguf").string();
    auto save = test::run_quill({"bench", "--synthetic", "qwen3next-tiny", "--dtype", "f16", "--save", file, "-p",
                                 "4", "-n", "2", "-r", "1"});
    REQUIRE(save.status == 0);
    // No Qwen3-Next template is in tests/data/templates: Qwen3's (Qwen3-0.6B), whose ChatML Qwen3-Next's follows.
    const std::string tmpl =
        (fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" / "Qwen-Qwen3-0.6B.jinja").string();
    test::check_run_auto_on_cpu(file, tmpl,
                                "the CUDA backend cannot run qwen3next models (recurrent gated delta net layers)");
    auto chat = test::run_quill({"chat", "-m", file, "--chat-template", tmpl, "--temp", "0", "-n", "6"},
                                "Hello there\nAnd again\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
    auto lookup = test::run_quill({"run", "-m", file, "-p", "Why is the sky blue?", "-n", "4", "--lookup", "4"});
    CHECK(lookup.status != 0);
    CHECK(lookup.err.find("--lookup and --draft-model cannot run on qwen3next models") != std::string::npos);
    auto draft = test::run_quill({"run", "-m", test::tiny_model_file(test::TinyModel::spm).string(), "-p", "Hi",
                                  "-n", "4", "--draft-model", file});
    CHECK(draft.status != 0);
    CHECK(draft.err.find("--draft-model " + file + ": qwen3next models cannot draft") != std::string::npos);
}

}  // namespace test_arch_qwen3next
