// The ungated FFNs against llama.cpp: arcee (Arcee's AFM-4.5B: llama's layers with W2 max(W3 xn, 0)^2) and apertus
// (Swiss AI's Apertus 8B, 70B: qwen3's attention, per-head Q/K norms before NEOX RoPE, with W2 xielu(W3 xn), each
// layer with its own alpha_n, alpha_p, beta and eps). The synthetic models (engine/model/synthetic.cpp, seed 42, as
// `quill bench --synthetic SHAPE --dtype f32|f16 --save FILE` writes them) regenerated, saved and loaded back, then
// run on the reference backend and the CPU backend of every kernel family this machine has:
// - arcee-tiny: 4 layers of 128, 4 heads of 32, 2 KV heads, adjacent RoPE pairs with Llama 3's RoPE divisors, ReLU²
//   FFNs of 320;
// - apertus-tiny: the same widths with Llama 3's divisors, an output bias, xIELU FFNs whose parameters differ between
//   layers.
// References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over
// the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1
// 300 45 72 ... 202.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_ungated_ffn {

using namespace quill;

namespace {

constexpr int64_t kCtx = 256;

// The limits on max |diff| / range: 1e-5 with F32 weights, 1e-3 with F16 (llama.cpp rounds each product's input to
// fp16). Measured: see the commits.
constexpr test::ArchFiles kFiles[] = {{"arcee-tiny", 1e-3}, {"apertus-tiny", 1e-3}};

using Mutant = std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>;

// llama's SwiGLU in place of the ungated activation, the up matrix as its gate
void silu_gated(ModelConfig& c, Weights& w) {
    c.ffn_act = ModelConfig::Activation::silu;
    for (LayerWeights& L : w.layers) L.ffn_gate = L.ffn_up;
}

}  // namespace

TEST_CASE("arcee and apertus tiny models: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_files_against_llama_cpp(kFiles, kCtx, false);
}

TEST_CASE("arcee and apertus tiny models: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_files_against_llama_cpp(kFiles, kCtx, true);
}

TEST_CASE("arcee and apertus: a SiLU-gated FFN, layer 0's xIELU parameters everywhere or no Q/K norms each leave "
          "llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature undone is far outside their tolerance on either backend.
    const std::vector<std::pair<const char*, std::vector<Mutant>>> shapes = {
        {"arcee-tiny", {{"SiLU-gated", silu_gated}}},
        {"apertus-tiny",
         {{"SiLU-gated", silu_gated},
          {"layer 0's parameters",
           [](ModelConfig& c, Weights&) {
               for (auto* v : {&c.xielu_alpha_n, &c.xielu_alpha_p, &c.xielu_beta, &c.xielu_eps})
                   std::fill(v->begin(), v->end(), v->front());
           }},
          {"no Q/K norms",
           [](ModelConfig&, Weights& w) {
               for (LayerWeights& L : w.layers) {
                   L.attn_q_norm.clear();
                   L.attn_k_norm.clear();
               }
           }}}},
    };
    for (const auto& [shape, mutants] : shapes)
        for (const auto& [name, mutate] : mutants) {
            INFO(shape << ": " << name);
            for (double e : test::mutant_error(shape, kCtx, mutate)) CHECK(e > 1e-2);
        }
}

TEST_CASE("arcee and apertus settings and apertus's xIELU parameters a layer are read from the file as llama.cpp "
          "reads them", "[arch][model]") {
    auto a = test::saved_synthetic("arcee-tiny", GgmlType::F16);
    CHECK((a->config.arch == "llama" && a->config.file_arch == "arcee" && !a->config.ffn_gated()));
    CHECK((a->config.ffn_act == ModelConfig::Activation::relu_sqr && a->config.rope == ModelConfig::Rope::adjacent));
    CHECK(a->weights.rope_freqs.size() == 16);
    for (const LayerWeights& L : a->weights.layers) CHECK((L.ffn_gate.data == nullptr && L.bo.empty()));
    auto m = test::saved_synthetic("apertus-tiny", GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen3" && c.file_arch == "apertus" && c.ffn_act == ModelConfig::Activation::xielu));
    CHECK((c.rope == ModelConfig::Rope::neox && m->weights.rope_freqs.size() == 16 && !m->weights.output_tied));
    CHECK((c.xielu_alpha_n.size() == 4 && c.xielu_eps[1] == -1e-4f));
    CHECK_THAT(c.xielu_alpha_n[1], Catch::WithinRel(0.7f, 1e-6f));
    // (llama.cpp's effective parameters: softplus(alpha_p), beta + softplus(alpha_n), in float)
    const ModelConfig::Xielu x = c.xielu_params(1);
    CHECK_THAT(x.ap, Catch::WithinRel(std::log1p(std::exp(0.9)), 1e-6));
    CHECK_THAT(x.an, Catch::WithinRel(0.6 + std::log1p(std::exp(0.7)), 1e-6));
    for (const LayerWeights& L : m->weights.layers)
        CHECK((L.ffn_gate.data == nullptr && L.attn_q_norm.size() == 32 && L.bo.size() == 128));
    // AFM-4.5B's and Apertus-8B's shapes (their config.json as we read them)
    const ModelConfig afm = synthetic_config("afm-4.5b-4l"), ap8 = synthetic_config("apertus-8b-4l");
    CHECK((afm.n_embd == 2560 && afm.n_head == 20 && afm.n_head_kv == 4 && afm.n_ff == 18432 &&
           afm.n_vocab == 128004));
    CHECK((ap8.n_embd == 4096 && ap8.n_head_kv == 8 && ap8.n_ff == 21504 && ap8.n_vocab == 131072));
}

TEST_CASE("arcee and apertus: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("arcee-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
    test::check_mixed_batches(synthetic_config("apertus-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("quill run and chat work end to end on arcee and apertus files (Apertus's template), and --device auto runs "
          "them on the CPU", "[arch][cli]") {
    // (no AFM template in the corpus: the file's own, the synthetic model's ChatML-like one)
    test::check_run_and_chat("arcee-tiny", "", {"relu_sqr, ungated"});
    test::check_run_and_chat("apertus-tiny", "Apertus-8B-Instruct.jinja", {"xielu, ungated"});
}

}  // namespace test_arch_ungated_ffn
