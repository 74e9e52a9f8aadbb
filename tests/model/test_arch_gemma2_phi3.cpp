// gemma (Gemma 1), gemma2 and phi3 against llama.cpp: the synthetic gemma-tiny, gemma2-tiny and phi3-tiny models
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic SHAPE --dtype f32|f16 --save FILE` writes them)
// regenerated, saved and loaded back, then run on the reference backend and the CPU backend of every kernel family
// this machine has. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32,
// n_ctx 256) over the 32 tokens below, made with /work/oracle/dump_logits FILE --tokens "..." -n 24 --logits ...
// --greedy ... (gemma-tiny-*: with tests/data/arch/dump_logits.cpp, its header says how).
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/fault_util.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace test_arch_gemma2_phi3 {

using namespace quill;
using quill::cpu::Isa;
namespace fs = std::filesystem;

namespace {

// llama.cpp's context for the references: 24 + 32 + 8 positions, padded to 256. phi3-tiny's original context is
// 128, so both rotate by the long RoPE factors.
constexpr int64_t kCtx = 256;

using test::saved_synthetic;

std::unique_ptr<Backend> cpu_backend(const Model& m, std::optional<Isa> isa, int64_t n_ctx = kCtx) {
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.kv_type = KvType::f32;
    o.isa = isa;
    o.reference = !isa;
    return std::make_unique<cpu::CpuBackend>(m.config, m.weights, o);
}

std::unique_ptr<Backend> reference_backend(const Model& m, int64_t n_ctx = kCtx) {
    return std::make_unique<ReferenceBackend>(m.config, m.weights, ReferenceBackendOptions{n_ctx, 1, KvType::f32});
}

// The limit on max |diff| / range per case. Measured on the reference backend and every CPU path: phi3 F32 3.2e-7
// (float summation order), phi3 F16 2.7e-4 (both round the F16 products' inputs to fp16, at other points);
// gemma2 F32 5.9e-4 and F16 1.25e-3: llama.cpp's CPU GELU is a table of fp16 values looked up by the fp16-rounded
// input (ggml's GGML_GELU_FP16) where quill computes it in float; with that rounding put into the reference backend
// the F32 difference falls to 1.5e-4. So 1e-3, and 2e-3 for gemma2 F16. gemma (the same GELU, no caps, 3 layers):
// F32 1.4e-5, F16 6.5e-5 to 8.7e-5, so 1e-4 and 2e-4. (gemma-tiny's greedy tokens repeat the last prompt token: its
// output is its embeddings, as Gemma's, and with random weights a token's own row wins.)
struct Case {
    const char* shape;
    GgmlType type;
    double tol;
};
constexpr Case kCases[] = {{"gemma-tiny", GgmlType::F32, 1e-4},
                           {"gemma-tiny", GgmlType::F16, 2e-4},
                           {"gemma2-tiny", GgmlType::F32, 1e-3},
                           {"gemma2-tiny", GgmlType::F16, 2e-3},
                           {"phi3-tiny", GgmlType::F32, 1e-3},
                           {"phi3-tiny", GgmlType::F16, 1e-3}};

std::string stem(const Case& c) { return fmt::format("{}-{}", c.shape, type_name(c.type)); }

}  // namespace

TEST_CASE("gemma, gemma2 and phi3 tiny models: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    for (const Case& c : kCases) {
        INFO(stem(c));
        auto m = saved_synthetic(c.shape, c.type);
        test::check_against_llama_cpp(*reference_backend(*m), stem(c), c.tol);
    }
}

TEST_CASE("gemma, gemma2 and phi3 tiny models: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    for (const Case& c : kCases) {
        auto m = saved_synthetic(c.shape, c.type);
        std::vector<std::optional<Isa>> isas{std::nullopt};  // the scalar reference path, then each kernel family
        for (Isa isa : test::model_test_isas()) isas.push_back(isa);
        for (const auto& isa : isas) {
            INFO(stem(c) << ", " << (isa ? cpu::isa_name(*isa) : "reference path"));
            test::check_against_llama_cpp(*cpu_backend(*m, isa), stem(c), c.tol);
        }
    }
}

TEST_CASE("gemma, gemma2 and phi3 settings are read from the file as llama.cpp reads them", "[arch][model]") {
    auto g1 = saved_synthetic("gemma-tiny", GgmlType::F32);
    const ModelConfig& c1 = g1->config;
    CHECK((c1.arch == "gemma" && c1.rope == ModelConfig::Rope::neox));
    CHECK((c1.ffn_act == ModelConfig::Activation::gelu_tanh && c1.embd_scale == Approx(std::sqrt(128.0f))));
    CHECK((c1.head_dim == 48 && c1.n_head_kv == 1 && c1.attn_scale == Approx(1.0f / std::sqrt(48.0f))));
    CHECK((c1.sliding_window == 0 && c1.attn_logit_softcap == 0.0f && c1.final_logit_softcap == 0.0f));
    CHECK((g1->weights.output_tied && g1->weights.layers[2].attn_post_norm.empty() &&
           g1->weights.layers[2].ffn_norm.size() == 128));
    // Its output is its embeddings whatever the file holds (as llama.cpp reads it): an output.weight is refused, as
    // llama.cpp refuses a tensor too many.
    const fs::path dir = test::temp_dir("arch_gemma_output");
    const std::string src = (dir / "gemma-tiny.gguf").string(), bad = (dir / "gemma-output.gguf").string();
    SyntheticModel::make(synthetic_config("gemma-tiny"), GgmlType::F32, 42)->save(src);
    test::rewrite_gguf(src, bad, [](GgufWriter& w) {
        w.add_tensor("output.weight", GgmlType::F32, {128, 320}, std::vector<uint8_t>(128 * 320 * 4, 0));
    });
    CHECK_THROWS_WITH(Model::load(bad), Catch::Contains("tensor 'output.weight' is not used by quill's gemma"));
    const ModelConfig g7 = synthetic_config("gemma-7b");
    CHECK((g7.arch == "gemma" && g7.n_embd == 3072 && g7.n_layer == 28 && g7.n_head_kv == 16 && g7.head_dim == 256 &&
           g7.n_ff == 24576 && g7.n_vocab == 256000));


    auto g = saved_synthetic("gemma2-tiny", GgmlType::F32);
    const ModelConfig& gc = g->config;
    CHECK(gc.rope == ModelConfig::Rope::neox);
    CHECK(gc.ffn_act == ModelConfig::Activation::gelu_tanh);
    CHECK(gc.embd_scale == Approx(std::sqrt(128.0f)));
    CHECK(gc.head_dim == 48);  // key_length: n_embd_q 192 beside n_embd 128
    CHECK(gc.attn_scale == Approx(1.0f / std::sqrt(48.0f)));
    CHECK(gc.sliding_window == 8);
    CHECK((gc.layer_is_local(0) && !gc.layer_is_local(1) && gc.layer_is_local(2) && !gc.layer_is_local(3)));
    CHECK(!gc.two_ropes());
    CHECK(gc.attn_logit_softcap == 0.1f);
    CHECK(gc.final_logit_softcap == 0.5f);
    CHECK(g->weights.output_tied);
    CHECK(g->weights.layers[3].attn_post_norm.size() == 128);
    CHECK(g->weights.layers[3].ffn_post_norm.size() == 128);
    CHECK(g->weights.layers[3].attn_q_norm.empty());

    auto p = saved_synthetic("phi3-tiny", GgmlType::F16);
    const ModelConfig& pc = p->config;
    CHECK(pc.rope == ModelConfig::Rope::neox);
    CHECK(pc.ffn_act == ModelConfig::Activation::silu);
    CHECK(pc.n_rot == 24);  // partial: 24 of head_dim 32
    CHECK(pc.head_dim == 32);
    CHECK(pc.yarn_n_ctx_orig == 128);
    CHECK(pc.rope_mscale == Approx(std::sqrt(1.0 + std::log(8.0) / std::log(128.0))));
    CHECK(pc.sliding_window == 0);
    CHECK(p->weights.rope_factors_long.size() == 12);
    CHECK(p->weights.rope_factors_short.size() == 12);
    // The fused tensors' parts: Q, K, V rows of attn_qkv and gate, up halves of ffn_up, in place in the file.
    const LayerWeights& L = p->weights.layers[1];
    CHECK(L.wq.n_rows() == 128);
    CHECK(L.wk.n_rows() == 64);
    CHECK(L.wv.n_rows() == 64);
    CHECK(L.wk.data == L.wq.data + 128 * L.wq.row_bytes());
    CHECK(L.wv.data == L.wk.data + 64 * L.wk.row_bytes());
    CHECK(L.ffn_gate.n_rows() == 192);
    CHECK(L.ffn_up.data == L.ffn_gate.data + 192 * L.ffn_gate.row_bytes());
    CHECK(L.wq.name == "blk.1.attn_qkv.weight (q)");
    // The divisors by context: short within the original context, long beyond it.
    CHECK(&p->weights.rope_divisors(pc, 128) == &p->weights.rope_factors_short);
    CHECK(&p->weights.rope_divisors(pc, 129) == &p->weights.rope_factors_long);

    // The released models' shapes (bench --synthetic gemma2-2b, phi-4-mini).
    const ModelConfig g2 = synthetic_config("gemma2-2b");
    CHECK((g2.arch == "gemma2" && g2.n_embd == 2304 && g2.n_layer == 26 && g2.head_dim == 256 && g2.n_ff == 9216 &&
           g2.n_vocab == 256000 && g2.sliding_window == 4096 && g2.attn_logit_softcap == 50.0f &&
           g2.final_logit_softcap == 30.0f));
    const ModelConfig p4 = synthetic_config("phi-4-mini");
    CHECK((p4.arch == "phi3" && p4.n_embd == 3072 && p4.n_layer == 32 && p4.n_head_kv == 8 && p4.n_rot == 96 &&
           p4.n_ff == 8192 && p4.n_vocab == 200064 && p4.yarn_n_ctx_orig == 4096));
    CHECK(p4.rope_mscale == Approx(1.19024).epsilon(1e-4));
}

TEST_CASE("phi3 rotates by the short RoPE factors within its original context, the long ones beyond it",
          "[arch][cpu]") {
    auto m = saved_synthetic("phi3-tiny", GgmlType::F32);
    const std::vector<int32_t> tokens{1, 300, 45, 72, 101, 260, 311, 99, 13, 280, 290, 33};
    const int64_t nv = m->config.n_vocab;
    // Within 128 positions (short) and beyond (long): the CPU backend as the reference backend, in each.
    const auto short_ref = test::prefill_logits(*reference_backend(*m, 128), tokens);
    const auto long_ref = test::prefill_logits(*reference_backend(*m, 129), tokens);
    CHECK(test::max_diff(short_ref, long_ref) > 1e-2);
    for (Isa isa : test::model_test_isas()) {
        INFO(cpu::isa_name(isa));
        CHECK(test::max_diff(test::prefill_logits(*cpu_backend(*m, isa, 128), tokens), short_ref) < 1e-5);
        CHECK(test::max_diff(test::prefill_logits(*cpu_backend(*m, isa, 129), tokens), long_ref) < 1e-5);
    }
    // The first position rotates by no angle: the factors cannot change it.
    CHECK(test::max_diff(test::rows(short_ref, nv, 0, 1), test::rows(long_ref, nv, 0, 1)) < 1e-6);
}

TEST_CASE("quill run and quill chat work end to end on gemma2 and phi3 files", "[arch][cli]") {
    for (const char* shape : {"gemma2-tiny", "phi3-tiny"}) {
        INFO(shape);
        const fs::path file = test::temp_dir(std::string("arch_cli_") + shape) / (std::string(shape) + ".gguf");
        auto save = test::run_quill({"bench", "--synthetic", shape, "--dtype", "f16", "--save", file.string(), "-p",
                                     "4", "-n", "2", "-r", "1"});
        REQUIRE(save.status == 0);
        auto run = test::run_quill({"run", "-m", file.string(), "-p", "Why is the sky blue?", "--temp", "0", "-n",
                                    "8", "--json"});
        CHECK(run.status == 0);
        CHECK(run.out.find("\"completion_tokens\":8") != std::string::npos);
        // The file's template (the family's turn markers) frames the prompt.
        auto tmpl = test::run_quill({"template", "-m", file.string()}, "");
        CHECK(tmpl.status == 0);
        CHECK(tmpl.out.find(std::string(shape) == "phi3-tiny" ? "<|assistant|>" : "<start_of_turn>model") !=
              std::string::npos);
        auto chat = test::run_quill({"chat", "-m", file.string(), "--temp", "0", "-n", "6"}, "Hello there\nAnd again\n");
        CHECK(chat.status == 0);
        CHECK(chat.err.find("error") == std::string::npos);
    }
}

TEST_CASE("gemma2 with an F16 KV cache: the CPU backend's prefill and decode match the reference backend's",
          "[arch][cpu]") {
    // The default cache type: K, V, q and the probabilities in fp16 on both sides, and soft-capped scores. The
    // limit is test_reference.cpp's for F32 weights with an F16 cache (3e-3 of the logits' RMS).
    auto m = saved_synthetic("gemma2-tiny", GgmlType::F32);
    const test::RefLogits ref = test::read_ref_logits(test::arch_ref_path("gemma2-tiny-f32.prompt_logits.txt"));
    ReferenceBackend reference(m->config, m->weights, ReferenceBackendOptions{64, 1, KvType::f16});
    const auto want = test::prefill_logits(reference, ref.tokens);
    for (Isa isa : test::model_test_isas()) {
        INFO(cpu::isa_name(isa));
        cpu::CpuBackendOptions o;
        o.n_threads = 2;
        o.n_ctx = 64;
        o.kv_type = KvType::f16;
        o.isa = isa;
        cpu::CpuBackend prefill(m->config, m->weights, o), decode(m->config, m->weights, o);
        CHECK(test::max_diff(test::prefill_logits(prefill, ref.tokens), want) / test::rms(want) < 3e-3);
        CHECK(test::max_diff(test::stepwise_logits(decode, ref.tokens), want) / test::rms(want) < 3e-3);
    }
}

TEST_CASE("gemma2 decode over a long cache (the attention split over key blocks) matches the reference backend",
          "[arch][cpu]") {
    // 300 prompt positions, then decode steps: a global layer's row spans 5 key blocks of 64, so a one-sequence
    // decode on 2 threads spreads them (the split form), each block's scores soft-capped before the softmax.
    auto m = saved_synthetic("gemma2-tiny", GgmlType::F32);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 304; ++i) tokens.push_back(1 + (i * 37) % 317);
    const int64_t nv = m->config.n_vocab;
    ReferenceBackend reference(m->config, m->weights, ReferenceBackendOptions{512, 1, KvType::f32});
    const auto want = test::prefill_logits(reference, tokens);
    for (Isa isa : test::model_test_isas()) {
        INFO(cpu::isa_name(isa));
        auto b = cpu_backend(*m, isa, 512);
        const std::vector<int32_t> prompt(tokens.begin(), tokens.end() - 4);
        const auto first = test::prefill_logits(*b, prompt);
        CHECK(test::max_diff(first, test::rows(want, nv, 0, 300)) / test::rms(want) < 1e-5);
        for (int32_t pos = 300; pos < 304; ++pos) {
            Batch step;
            step.add(tokens[pos], pos, 0, true);
            std::vector<float> logits(nv);
            b->forward(step, logits);
            CHECK(test::max_diff(logits, test::rows(want, nv, pos, pos + 1)) / test::rms(want) < 1e-5);
        }
    }
}

TEST_CASE("gemma: without its embedding scale the logits leave llama.cpp's", "[arch][reference][cpu]") {
    // The checks above can fail: gemma-tiny with its embeddings unscaled (llama's way) is far outside their limit.
    auto m = saved_synthetic("gemma-tiny", GgmlType::F32);
    ModelConfig unscaled = m->config;
    unscaled.embd_scale = 1.0f;
    const test::RefLogits ref = test::read_ref_logits(test::arch_ref_path("gemma-tiny-f32.prompt_logits.txt"));
    ReferenceBackend reference(unscaled, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
    auto cpu = test::arch_cpu_backend(unscaled, m->weights, Isa::generic, kCtx);
    for (Backend* b : {static_cast<Backend*>(&reference), static_cast<Backend*>(cpu.get())}) {
        INFO(b->name());
        const std::vector<float> got = test::prefill_logits(*b, ref.tokens);
        double worst = 0;
        for (size_t p = 0; p < ref.tokens.size(); ++p) {
            const auto [lo, hi] = std::minmax_element(ref.logits[p].begin(), ref.logits[p].end());
            worst = std::max(worst, test::max_diff(test::rows(got, unscaled.n_vocab, p, p + 1), ref.logits[p]) /
                                        (*hi - *lo));
        }
        CHECK(worst > 0.05);
    }
}

}  // namespace test_arch_gemma2_phi3
