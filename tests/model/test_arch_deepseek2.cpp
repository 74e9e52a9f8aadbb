// deepseek2 (DeepSeek-V2/V3, Kimi-K2, GLM-4.7-Flash: Multi-head Latent Attention and DeepSeek's routing) against
// llama.cpp: the synthetic deepseek2-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic
// deepseek2-tiny --dtype f32|f16 --save FILE` writes it: 3 layers, 4 heads of 32 + 16 RoPE query dims and 32 value
// dims, a low-rank query of 64, a latent of 64, the first layer dense, then 8 experts of 64 in 4 groups of which 2
// are kept, 2 experts a token by sigmoid gating with a selection bias, renormalized and scaled by 2.5, a shared
// expert, YaRN of factor 4 over 64 positions with mscale_all_dim 0.707) regenerated, saved and loaded back, then run
// on the reference backend and the CPU backend of every kernel family this machine has. References in
// tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens
// below, made with tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ...
// 202.
#include "engine/cpu/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>

namespace test_arch_deepseek2 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

// The limit on max |diff| / range. Measured: at most 3.9e-7 (F32) and 4.3e-4 (F16) on every backend and shape.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

}  // namespace

TEST_CASE("deepseek2 tiny model: the reference and CPU backends give llama.cpp's logits and greedy tokens",
          "[arch][reference][cpu]") {
    test::check_shape_against_llama_cpp("deepseek2-tiny", kCases, kCtx, false);
    test::check_shape_against_llama_cpp("deepseek2-tiny", kCases, kCtx, true);
}

// deepseek2-lite-tiny: DeepSeek-V2-Lite's form (a plain Wq, softmax routing whose weights are the chosen experts'
// shares of the softmax over all of them, two shared experts, no YaRN), the same prompt.
TEST_CASE("deepseek2 V2-Lite-style tiny model: the reference and CPU backends give llama.cpp's logits and greedy "
          "tokens", "[arch][reference][cpu]") {
    test::check_shape_against_llama_cpp("deepseek2-lite-tiny", kCases, kCtx, false);
    test::check_shape_against_llama_cpp("deepseek2-lite-tiny", kCases, kCtx, true);
}

// deepseek2-fused-tiny: deepseek2-lite-tiny as files converted before llama.cpp split attn_kv_b have it (the heads'
// key and value matrices in one attn_kv_b, the heads' sizes in key_length and value_length), which llama.cpp runs
// as plain multi-head attention over decompressed keys and values: quill runs it as MLA all the same.
TEST_CASE("deepseek2 file with the older fused attn_kv_b: the reference and CPU backends give llama.cpp's logits and "
          "greedy tokens", "[arch][reference][cpu]") {
    test::check_shape_against_llama_cpp("deepseek2-fused-tiny", kCases, kCtx, false);
    test::check_shape_against_llama_cpp("deepseek2-fused-tiny", kCases, kCtx, true);
    auto m = test::saved_synthetic("deepseek2-fused-tiny", GgmlType::F16);
    CHECK((m->config.mla_fused_kv_b && m->config.head_dim == 48 && m->config.head_dim_v == 32 &&
           m->config.kv_head_dim() == 80 && m->weights.layers[0].wkv_b.data));
}

// mistral4-tiny: Mistral Small 4's files (architecture mistral4, deepseek2's layers) with Mistral Large 3's Llama 4
// attention temperature (its files are deepseek2's): the absorbed queries scaled by 1 + 0.25 ln(floor(pos / 8) + 1),
// softmax routing renormalized and scaled, YaRN.
TEST_CASE("mistral4 tiny model with an attention temperature: the reference and CPU backends give llama.cpp's logits "
          "and greedy tokens", "[arch][reference][cpu]") {
    test::check_shape_against_llama_cpp("mistral4-tiny", kCases, kCtx, false);
    test::check_shape_against_llama_cpp("mistral4-tiny", kCases, kCtx, true);
    auto m = test::saved_synthetic("mistral4-tiny", GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "deepseek2" && c.file_arch == "mistral4" && c.attn_temp_scale == 0.25f &&
           c.attn_temp_floor == 8 && !c.moe_gating_sigmoid && c.moe_norm_weights && c.moe_weights_scale == 1.5f));
    CHECK((c.attn_temp(7) == 1.0 && c.attn_temp(8) == Approx(1.0 + 0.25 * std::log(2.0))));
    // Without the temperature either backend is 100 times the F32 limit off llama.cpp's logits (measured: 6.9e-3).
    const auto no_temp = [](ModelConfig& mc, Weights&) { mc.attn_temp_scale = 0; };
    for (double e : test::mutant_error("mistral4-tiny", kCtx, no_temp)) CHECK(e > 1e-3);
    test::check_mixed_batches(synthetic_config("mistral4-tiny"), {GgmlType::Q4_0}, kCtx);
    // The temperature's steps: llama.cpp reads them without a default and divides by them.
    const std::vector<test::RefusedMetadata> cases = {
        {"temperature", [](GgufWriter& w) { w.set("mistral4.attention.temperature_length", uint32_t(0)); },
         "metadata 'mistral4.attention.temperature_length' is 0, expected 1..1073741824"}};
    test::check_refused_metadata(test::temp_dir("arch_mistral4_refused"), "mistral4-tiny", cases);
}

// (No Mistral Small 4 template is in tests/data/templates: Ministral 3's, of the same family's format.)
TEST_CASE("quill run and chat work end to end on a mistral4 file with Ministral 3's chat template", "[arch][cli]") {
    test::check_run_and_chat("mistral4-tiny", "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
                             {"architecture    mistral4", "attention.temperature_scale=0.25",
                              "multi-head latent (MLA): a latent of 64 cached a position"});
}

TEST_CASE("deepseek2 settings are read from the file as llama.cpp reads them, and its cache is MLA's latent",
          "[arch][model]") {
    auto m = test::saved_synthetic("deepseek2-tiny", GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "deepseek2" && c.mla() && c.kv_lora_rank == 64 && c.q_lora_rank == 64 && c.head_dim == 48 &&
           c.head_dim_v == 32 && c.n_rot == 16 && c.rope == ModelConfig::Rope::adjacent));
    CHECK((c.n_leading_dense == 1 && !c.layer_moe(0) && c.layer_moe(1) && c.layer_n_ff(0) == 192 &&
           c.layer_n_ff(1) == 64));
    CHECK((c.moe_gating_sigmoid && c.moe_norm_weights && c.moe_weights_scale == 2.5f && c.moe_n_group == 4 &&
           c.moe_n_group_used == 2));
    const ModelConfig made = synthetic_config("deepseek2-tiny");
    CHECK((c.attn_scale == made.attn_scale && c.rope_mscale == made.rope_mscale && c.rope_mscale == 1.0f));
    // (mscale = 1 + 0.0707 ln 4: the scores scaled by its square over sqrt(48))
    CHECK(c.attn_scale == Approx(std::pow(1.0 + 0.0707 * std::log(4.0), 2) / std::sqrt(48.0)).epsilon(1e-6));
    CHECK((m->weights.layers[1].ffn_exp_probs_b.size() == 8 && m->weights.layers[0].ffn_exp_probs_b.empty()));
    // One row of kv_lora_rank + n_rot a position and layer, no V: 3 layers of 256 positions of 80 F16 values.
    CHECK((c.kv_heads() == 1 && c.kv_head_dim() == 80));
    CHECK(cpu::kv_cache_bytes(c, KvType::f16, kCtx, 1) == size_t{3} * 256 * 80 * 2);
    auto b = test::arch_cpu_backend(c, m->weights, cpu::best_isa(), kCtx, 1, KvType::f16);
    CHECK(b->kv_bytes() == size_t{3} * 256 * 80 * 2);
    // GLM-4.7-Flash's files end with a NextN (multi-token prediction) block: its tensors are loaded and not run.
    const std::string mtp = test::synthetic_with_metadata(test::temp_dir("arch_deepseek2_nextn"), "deepseek2-tiny",
                                                          "nextn", [](GgufWriter& w) {
                                                              w.set("deepseek2.nextn_predict_layers", uint32_t(1));
                                                          });
    auto trunk = Model::load(mtp);
    CHECK((trunk->config.n_layer == 2 && trunk->weights.layers.size() == 2));
    const ModelConfig lite = synthetic_config("deepseek-v2-lite");
    CHECK((lite.q_lora_rank == 0 && !lite.moe_gating_sigmoid && !lite.moe_norm_weights && lite.n_expert == 64 &&
           lite.n_expert_used == 6 && lite.layer_n_ff(1) == 2 * 1408 && lite.kv_head_dim() == 576));
    const ModelConfig glm = synthetic_config("glm-4.7-flash");
    CHECK((glm.n_layer == 47 && glm.q_lora_rank == 768 && glm.head_dim == 256 && glm.head_dim_v == 256 &&
           glm.moe_gating_sigmoid && glm.moe_weights_scale == 1.8f && glm.kv_head_dim() == 576));
}

TEST_CASE("deepseek2: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("deepseek2-tiny"), {GgmlType::Q4_0}, kCtx);
}

TEST_CASE("deepseek2 files whose MLA or routing settings quill does not run are refused with one line",
          "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_deepseek2_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"gating", [](GgufWriter& w) { w.set("deepseek2.expert_gating_func", uint32_t(3)); },
         "metadata 'deepseek2.expert_gating_func' is 3, expected 0..2"},
        {"key-length", [](GgufWriter& w) { w.set("deepseek2.attention.key_length", uint32_t(48)); },
         "metadata 'deepseek2.attention.key_length' 48 and value_length 64 are not kv_lora_rank + "
         "rope.dimension_count (80) and kv_lora_rank (64) (MLA)"},
        {"groups", [](GgufWriter& w) { w.set("deepseek2.expert_group_count", uint32_t(3)); },
         "metadata 'deepseek2.expert_group_count' 3 does not divide expert_count 8 or expert_group_used_count is 0"},
    };
    test::check_refused_metadata(dir, "deepseek2-tiny", cases);
}

TEST_CASE("quill run, chat and batch work end to end on a deepseek2 file with DeepSeek-V3.1's chat template",
          "[arch][cli]") {
    const fs::path dir = test::temp_dir("arch_cli_deepseek2");
    const std::string file = (dir / "deepseek2-tiny.gguf").string();
    auto save = test::run_quill({"bench", "--synthetic", "deepseek2-tiny", "--dtype", "f16", "--save", file, "-p",
                                 "4", "-n", "2", "-r", "1"});
    REQUIRE(save.status == 0);
    const std::string tmpl = (fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" /
                              "deepseek-ai-DeepSeek-V3.1.jinja").string();
    auto info = test::run_quill({"info", file});
    CHECK(info.status == 0);
    CHECK(info.out.find("multi-head latent (MLA): a latent of 64 cached a position, query rank 64") !=
          std::string::npos);
    CHECK(info.out.find("KV cache 0.47 KiB a position (3 of 3 layers, f16)") != std::string::npos);
    auto prompt = test::run_quill({"template", "-m", file, "--chat-template", tmpl});
    CHECK(prompt.out.find("<s><\uff5cUser\uff5c>Hello<\uff5cAssistant\uff5c><think></think>") == 0);
    // --device auto: on the CPU (the CUDA backend refuses MLA with one line where there is a GPU).
    test::check_run_auto_on_cpu(file, tmpl,
                                "the CUDA backend cannot run deepseek2 models (Multi-head Latent Attention)");
    // Layers split over two CPU ranges (each with its layers' latent cache) give the text of one backend.
    test::check_split_over_two_cpus(file, "2 of 3 layers on cpu (layers 0-1");
    auto chat = test::run_quill({"chat", "-m", file, "--chat-template", tmpl, "--temp", "0", "-n", "6"},
                                "Hello there\nAnd again\nOnce more\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
    // Batch: two prompts with a long common prefix (copied between slots) and a short one, each its text alone.
    test::check_batch_texts_alone(file, {"a", "The longer prompt of the two here", "The longer prompt of the two "
                                                                                       "there"});
}

TEST_CASE("deepseek2: a prompt prefix copied to another slot's MLA cache continues as the whole prompt alone",
          "[arch][cpu][reference]") {
    auto m = SyntheticModel::make(synthetic_config("deepseek2-tiny"), GgmlType::F16, 7);
    const int64_t nv = m->config.n_vocab;
    const auto p = test::some_tokens(12, static_cast<int>(nv), 41);
    const std::vector<int32_t> head(p.begin(), p.begin() + 8), tail(p.begin() + 8, p.end());
    auto continued = [&](Backend& b) {  // p's first 8 in slot 0, copied to slot 1, the last 4 there
        test::prefill_logits(b, head, 0);
        b.copy_kv(0, 1, 0, 8);
        Batch batch;
        for (int i = 0; i < 4; ++i) batch.add(tail[i], 8 + i, 1, true);
        std::vector<float> out(4 * nv);
        b.forward(batch, out);
        return out;
    };
    std::vector<std::optional<cpu::Isa>> isas{std::nullopt, cpu::best_isa()};
    for (const auto& isa : isas) {
        INFO((isa ? cpu::isa_name(*isa) : "reference path"));
        auto b = test::arch_cpu_backend(m->config, m->weights, isa, 64, 2, KvType::f16);
        const auto got = continued(*b);
        const auto want = test::rows(test::prefill_logits(*test::arch_cpu_backend(m->config, m->weights, isa, 64, 1,
                                                                                  KvType::f16), p), nv, 8, 12);
        CHECK(test::max_diff(got, want) == 0.0);
    }
    ReferenceBackend r(m->config, m->weights, ReferenceBackendOptions{64, 2, KvType::f16});
    ReferenceBackend alone(m->config, m->weights, ReferenceBackendOptions{64, 1, KvType::f16});
    CHECK(test::max_diff(continued(r), test::rows(test::prefill_logits(alone, p), nv, 8, 12)) <= 1e-9);
}

}  // namespace test_arch_deepseek2
