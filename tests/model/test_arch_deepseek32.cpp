// deepseek32 (DeepSeek-V3.2, V3.2-Exp, V3.2-Speciale: deepseek2's MLA and experts with DeepSeek Sparse Attention)
// against llama.cpp: the synthetic deepseek32-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench
// --synthetic deepseek32-tiny --dtype f32|f16 --save FILE` writes it: deepseek2-tiny's layers, 3 of them with 4
// heads, YaRN and DeepSeek-V3's routing, plus a lightning indexer of 16 heads of 64 keeping the top 10 positions)
// regenerated, saved and loaded back, then run on the reference backend and the CPU backend of every kernel family
// this machine has. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32,
// n_ctx 256, its fused lightning indexer) over the 32 tokens of tests/data/arch/dump_logits.cpp's header, made with
// it: dump_logits FILE STEM 24 1 300 45 72 ... 202. Positions 10 to 31 attend to 10 of their positions.
#include "engine/cpu/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>

namespace test_arch_deepseek32 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

// The limit on max |diff| / range (F16: llama.cpp rounds the activations of F16 products to fp16, as quill's CPU
// backend does and its reference backend does not).
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

// The backends a check runs: the reference one, the CPU backend's reference path and each kernel family here.
template <class Fn>
void each_backend(const ModelConfig& c, const Weights& w, int64_t n_slots, KvType kv, Fn&& fn) {
    ReferenceBackend r(c, w, ReferenceBackendOptions{64, n_slots, kv});
    fn(static_cast<Backend&>(r), "reference backend");
    std::vector<std::optional<cpu::Isa>> isas{std::nullopt};
    for (cpu::Isa isa : test::model_test_isas()) isas.push_back(isa);
    for (const auto& isa : isas) {
        auto b = test::arch_cpu_backend(c, w, isa, 64, n_slots, kv);
        fn(static_cast<Backend&>(*b), isa ? cpu::isa_name(*isa) : "CPU reference path");
    }
}

}  // namespace

// F16 on the reference backend: position 12's choice in layer 1 is a near tie (its 10th and 11th scores 1.6e-4 of
// the scores' range apart in the reference's doubles) that llama.cpp's fp16-rounded activations turn the other way,
// and the positions after it read position 12's changed latent (measured: max |diff| / range 0.106 at position 12,
// 0.012-0.054 at 13, 14, 19, 24, 25, 31): its logits are compared up to position 11, and the greedy tokens (all 24
// equal) after the whole prompt. The CPU backend, whose F16 products round their activations too, matches every
// position.
TEST_CASE("deepseek32 tiny model: the reference and CPU backends give llama.cpp's logits and greedy tokens",
          "[arch][reference][cpu]") {
    test::check_shape_against_llama_cpp("deepseek32-tiny", std::span(kCases, 1), kCtx, false);
    auto m = test::saved_synthetic("deepseek32-tiny", GgmlType::F16);
    ReferenceBackend b(m->config, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
    test::check_against_llama_cpp(b, "deepseek32-tiny-f16", 1e-3, 24, 12);
    test::check_shape_against_llama_cpp("deepseek32-tiny", kCases, kCtx, true);
}

// While a sequence is no longer than top_k its query sees every position, and the layers are deepseek2's exactly:
// the same weights run with the indexer off (deepseek2's attention) give the same bits at positions 0-9 on every
// backend, and other logits from position 10 on, where the indexer leaves out positions.
TEST_CASE("deepseek32: up to top_k positions the attention is deepseek2's bit for bit, then the indexer selects",
          "[arch][reference][cpu]") {
    auto m = test::saved_synthetic("deepseek32-tiny", GgmlType::F32);
    ModelConfig dense = m->config;
    dense.indexer_top_k = 0;
    const int64_t nv = m->config.n_vocab;
    const auto p = test::some_tokens(16, static_cast<int>(nv), 5);
    std::vector<std::vector<float>> sparse, plain;
    each_backend(m->config, m->weights, 1, KvType::f32,
                 [&](Backend& b, std::string_view) { sparse.push_back(test::prefill_logits(b, p)); });
    each_backend(dense, m->weights, 1, KvType::f32,
                 [&](Backend& b, std::string_view) { plain.push_back(test::prefill_logits(b, p)); });
    for (size_t i = 0; i < sparse.size(); ++i) {
        INFO("backend " << i);
        CHECK(test::max_diff(test::rows(sparse[i], nv, 0, 10), test::rows(plain[i], nv, 0, 10)) == 0.0);
        CHECK(test::max_diff(test::rows(sparse[i], nv, 10, 16), test::rows(plain[i], nv, 10, 16)) > 1e-3);
    }
}

// Each feature of the indexer turned off leaves llama.cpp's logits (measured max |diff| / range on the reference
// backend and the CPU backend's generic kernels; 3.9e-7 and 3.5e-7 as they are): attention over every position 0.486,
// 9 positions kept 0.290, 11 kept 0.356, the key's norm without its weight and bias 0.294 (without the LayerNorm at
// all, measured once by editing it out: 0.439). The Hadamard rotation cannot be checked this way: it is orthonormal
// and turns both the queries and the keys, so the scores and the choice stay the same without it (measured once by
// editing it out: the logits unchanged to the last digit shown, 3.9e-7 and 3.5e-7).
TEST_CASE("deepseek32: without the indexer's selection, its top_k or its key norm's weights the logits are not "
          "llama.cpp's", "[arch][reference][cpu]") {
    const auto dense = [](ModelConfig& c, Weights&) { c.indexer_top_k = 1 << 20; };
    for (double e : test::mutant_error("deepseek32-tiny", kCtx, dense)) CHECK(e > 1e-3);
    const auto fewer = [](ModelConfig& c, Weights&) { c.indexer_top_k = 9; };
    for (double e : test::mutant_error("deepseek32-tiny", kCtx, fewer)) CHECK(e > 1e-3);
    const auto more = [](ModelConfig& c, Weights&) { c.indexer_top_k = 11; };
    for (double e : test::mutant_error("deepseek32-tiny", kCtx, more)) CHECK(e > 1e-3);
    const auto no_norm = [](ModelConfig&, Weights& w) {
        for (LayerWeights& L : w.layers) {
            std::fill(L.idx_k_norm.begin(), L.idx_k_norm.end(), 1.0f);
            std::fill(L.idx_k_norm_b.begin(), L.idx_k_norm_b.end(), 0.0f);
        }
    };
    for (double e : test::mutant_error("deepseek32-tiny", kCtx, no_norm)) CHECK(e > 1e-4);
}

TEST_CASE("deepseek32 settings are read from the file as llama.cpp reads them, its indexer keys cached beside MLA's",
          "[arch][model]") {
    auto m = test::saved_synthetic("deepseek32-tiny", GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "deepseek2" && c.file_arch == "deepseek32" && c.mla() && c.dsa() && c.indexer_n_head == 16 &&
           c.indexer_head_dim == 64 && c.indexer_top_k == 10 && c.q_lora_rank == 64 && c.moe_gating_sigmoid));
    CHECK((m->weights.layers[0].idx_proj.type == GgmlType::F32 && m->weights.layers[2].idx_k_norm_b.size() == 64));
    // A row a position and layer: the latent and RoPE key (80), then the indexer key (64).
    CHECK((c.kv_heads() == 1 && c.kv_head_dim() == 144));
    CHECK(cpu::kv_cache_bytes(c, KvType::f16, kCtx, 1) == size_t{3} * 256 * 144 * 2);
    // DeepSeek-V3.2's files end with a NextN (multi-token prediction) block: its tensors, the indexer's among them,
    // are loaded and not run.
    const std::string mtp = test::synthetic_with_metadata(test::temp_dir("arch_deepseek32_nextn"), "deepseek32-tiny",
                                                          "nextn", [](GgufWriter& w) {
                                                              w.set("deepseek32.nextn_predict_layers", uint32_t(1));
                                                          });
    auto trunk = Model::load(mtp);
    CHECK((trunk->config.n_layer == 2 && trunk->weights.layers.size() == 2 && trunk->config.dsa()));
    const ModelConfig v32 = synthetic_config("deepseek-v3.2-2l");
    CHECK((v32.n_embd == 7168 && v32.indexer_n_head == 64 && v32.indexer_head_dim == 128 &&
           v32.indexer_top_k == 2048 && v32.kv_head_dim() == 576 + 128));
    const fs::path dir = test::temp_dir("arch_deepseek32_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"key-length", [](GgufWriter& w) { w.set("deepseek32.attention.indexer.key_length", uint32_t(96)); },
         "metadata 'deepseek32.attention.indexer.key_length' 96 is not a power of two from 64 up and at least "
         "rope.dimension_count 16 (the indexer's Hadamard rotation)"},
        {"top-k", [](GgufWriter& w) { w.set("deepseek32.attention.indexer.top_k", uint32_t(0)); },
         "metadata 'deepseek32.attention.indexer.top_k' is 0, expected 1..1073741824"},
        {"q-lora", [](GgufWriter& w) { w.set("deepseek32.attention.q_lora_rank", uint32_t(0)); },
         "deepseek32 without 'deepseek32.attention.q_lora_rank' or with a fused attn_kv_b (no "
         "'deepseek32.attention.key_length_mla') is not supported, as llama.cpp's loader requires both"},
    };
    test::check_refused_metadata(dir, "deepseek32-tiny", cases);
}

// Decode steps past top_k (top_k 4: a's steps at positions 5-7 select) in mixed batches as alone, bit for bit.
TEST_CASE("deepseek32: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    ModelConfig c = synthetic_config("deepseek32-tiny");
    c.indexer_top_k = 4;
    test::check_mixed_batches(c, {GgmlType::Q4_0}, kCtx);
}

// The prompt in one batch, token by token, a prefix copied to another slot and continued there, and a sequence
// rewound and written over (its indexer keys and latents replaced): the same logits, on every backend (F16 cache).
TEST_CASE("deepseek32: prompt, decode, a copied prefix and a rewound sequence give the same logits",
          "[arch][cpu][reference]") {
    auto m = SyntheticModel::make(synthetic_config("deepseek32-tiny"), GgmlType::F16, 7);
    const int64_t nv = m->config.n_vocab;
    const auto p = test::some_tokens(16, static_cast<int>(nv), 41);
    const auto other = test::some_tokens(16, static_cast<int>(nv), 9);
    const std::vector<int32_t> head(p.begin(), p.begin() + 12), tail(p.begin() + 12, p.end());
    each_backend(m->config, m->weights, 2, KvType::f16, [&](Backend& b, std::string_view name) {
        INFO(name);
        const double tol = b.name() == "reference" ? 1e-9 : 0.0;
        const auto whole = test::prefill_logits(b, p, 1);
        // token by token in slot 0 over another sequence's first 16 positions, rewound to 0
        test::prefill_logits(b, other, 0);
        CHECK(test::max_diff(test::stepwise_logits(b, p), whole) <= tol);
        // p's first 12 in slot 0 over `other`, copied to slot 1 over p, the last 4 there
        test::prefill_logits(b, other, 1);
        test::prefill_logits(b, head, 0);
        b.copy_kv(0, 1, 0, 12);
        Batch batch;
        for (int i = 0; i < 4; ++i) batch.add(tail[static_cast<size_t>(i)], 12 + i, 1, true);
        std::vector<float> out(static_cast<size_t>(4 * nv));
        b.forward(batch, out);
        CHECK(test::max_diff(out, test::rows(whole, nv, 12, 16)) <= tol);
    });
}

TEST_CASE("quill run and chat work end to end on a deepseek32 file with DeepSeek-V3.2's chat template", "[arch][cli]") {
    test::check_run_and_chat("deepseek32-tiny", "deepseek-ai-DeepSeek-V3.2.jinja",
                             {"architecture    deepseek32",
                              "DeepSeek Sparse Attention: a lightning indexer of 16 heads of 64, the top 10 positions "
                              "attended",
                              "KV cache 0.84 KiB a position (3 of 3 layers, f16)"});
    // Layers split over two CPU ranges (each with its layers' latents and indexer keys) give one backend's text.
    const std::string file = (test::temp_dir("arch_split_deepseek32") / "deepseek32-tiny.gguf").string();
    REQUIRE(test::run_quill({"bench", "--synthetic", "deepseek32-tiny", "--dtype", "f16", "--save", file, "-p", "4",
                             "-n", "2", "-r", "1"}).status == 0);
    test::check_split_over_two_cpus(file, "2 of 3 layers on cpu (layers 0-1");
}

}  // namespace test_arch_deepseek32
