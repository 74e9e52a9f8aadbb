// gemma4 (Gemma 4) against llama.cpp: the synthetic gemma4-tiny model (engine/model/synthetic.cpp, seed 42, as
// `quill bench --synthetic gemma4-tiny --dtype f32|f16 --save FILE` writes it) saved and loaded back, then run on
// the reference backend and the CPU backend of every kernel family this machine has. Its local layers have their own
// head size, KV heads and RoPE base, its global layers take V from K and rotate a quarter of their dims (rope_freqs);
// Q, K and V norms, attention scale 1, post-norms, layer output scales and soft-capped logits. References in
// tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256, one thread) over the
// 32 tokens of tests/data/arch/dump_logits.cpp's header, which made them.
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/fault_util.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

using namespace quill;
using quill::cpu::Isa;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;  // llama.cpp's context for the references

// The synthetic model of `shape` (gemma4-tiny, gemma4-moe-tiny) in `type`, saved as GGUF and loaded back.
std::unique_ptr<Model> saved_model(GgmlType type, const std::string& shape = "gemma4-tiny") {
    const fs::path file = test::temp_dir("arch_" + shape + "_" + std::string(type_name(type))) / (shape + ".gguf");
    SyntheticModel::make(synthetic_config(shape), type, 42)->save(file.string());
    return Model::load(file.string());
}

// The limits on max |diff| / range per case, on the reference backend and the CPU backend. Measured: F32 3.9e-3 on
// both, F16 1.35e-2 and at most 5.2e-3 (every path; the greedy tokens the same everywhere). Gemma 4's attention scale is 1 over normed Q and K heads, so its softmax is sharp and passes on
// small differences of the scores. F32: llama.cpp's CPU GELU is a table of fp16 values looked up by the
// fp16-rounded input (ggml's GGML_GELU_FP16) where quill computes it in float; with that rounding in the reference
// backend the difference falls to 3.0e-4. F16: llama.cpp also rounds every product's input to fp16, as the CPU
// backend does and the reference backend does not.
// gemma4-moe-tiny: F32 2.3e-3 on both, F16 6.6e-3 and at most 4.5e-3.
struct Case {
    const char* shape;
    GgmlType type;
    double ref_tol, cpu_tol;
};
constexpr Case kCases[] = {{"gemma4-tiny", GgmlType::F32, 5e-3, 5e-3},
                           {"gemma4-tiny", GgmlType::F16, 2e-2, 8e-3},
                           {"gemma4-moe-tiny", GgmlType::F32, 5e-3, 5e-3},
                           {"gemma4-moe-tiny", GgmlType::F16, 2e-2, 8e-3}};

std::string stem(const Case& c) { return fmt::format("{}-{}", c.shape, type_name(c.type)); }

// The CPU backend's prefill and decode (a step a call) of the references' prompt on the F32 model against the
// reference backend's prefill, both with a cache of `kv`, each within tol of the logits' RMS: on each kernel family
// here, and on the scalar path too with `scalar`.
void check_cpu_matches_reference(KvType kv, bool scalar, double tol) {
    auto m = saved_model(GgmlType::F32);
    const test::RefLogits ref = test::read_ref_logits(test::arch_ref_path("gemma4-tiny-f32.prompt_logits.txt"));
    ReferenceBackend reference(m->config, m->weights, ReferenceBackendOptions{64, 1, kv});
    const auto want = test::prefill_logits(reference, ref.tokens);
    std::vector<std::optional<Isa>> isas;
    if (scalar) isas.push_back(std::nullopt);
    for (Isa isa : test::available_isas()) isas.push_back(isa);
    for (const auto& isa : isas) {
        INFO((isa ? cpu::isa_name(*isa) : "reference path"));
        auto prefill = test::arch_cpu_backend(m->config, m->weights, isa, 64, 1, kv);
        auto decode = test::arch_cpu_backend(m->config, m->weights, isa, 64, 1, kv);
        CHECK(test::max_diff(test::prefill_logits(*prefill, ref.tokens), want) / test::rms(want) < tol);
        CHECK(test::max_diff(test::stepwise_logits(*decode, ref.tokens), want) / test::rms(want) < tol);
    }
}

}  // namespace

TEST_CASE("gemma4 tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    for (const Case& c : kCases) {
        INFO(stem(c));
        auto m = saved_model(c.type, c.shape);
        ReferenceBackend b(m->config, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
        test::check_against_llama_cpp(b, stem(c), c.ref_tol);
    }
}

TEST_CASE("gemma4 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA", "[arch][cpu]") {
    for (const Case& c : kCases) {
        auto m = saved_model(c.type, c.shape);
        test::check_cpu_against_llama_cpp(m->config, m->weights, stem(c), c.cpu_tol, kCtx);
    }
}

TEST_CASE("gemma4 settings are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = saved_model(GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK(c.rope == ModelConfig::Rope::neox);
    CHECK(c.ffn_act == ModelConfig::Activation::gelu_tanh);
    CHECK(c.embd_scale == Approx(std::sqrt(128.0f)));
    CHECK(c.attn_scale == 1.0f);
    CHECK(c.v_norm);
    CHECK(c.sliding_window == 8);
    CHECK((c.layer_is_local(0) && !c.layer_is_local(1) && c.layer_is_local(2) && !c.layer_is_local(3)));
    // local layers: head size 32, two KV heads, all 32 dims rotated with base 10,000; global: 64, one, 64 with 1e6
    CHECK((c.layer_head_dim(0) == 32 && c.layer_n_head_kv(0) == 2 && c.layer_n_rot(0) == 32));
    CHECK((c.layer_head_dim(1) == 64 && c.layer_n_head_kv(1) == 1 && c.layer_n_rot(1) == 64));
    CHECK((c.layer_n_embd_q(0) == 128 && c.layer_n_embd_q(1) == 256 && c.n_embd_q() == 256));
    CHECK((c.layer_n_embd_kv(0) == 64 && c.layer_n_embd_kv(1) == 64 && c.n_embd_kv() == 64));
    CHECK((c.rope_base == 1e6f && c.rope_base_local == 10000.0f && c.two_ropes()));
    CHECK(c.final_logit_softcap == 0.5f);
    const Weights& w = m->weights;
    CHECK(w.output_tied);
    REQUIRE(w.rope_freqs.size() == 32);
    CHECK((w.rope_freqs[7] == 1.0f && w.rope_freqs[8] == 1e30f));
    // the local layers' RoPE has no divisors, the global layers' has them
    CHECK(w.rope_inv_freq(c, true, kCtx).size() == 16);
    CHECK(w.rope_inv_freq(c, false, kCtx)[8] < 1e-30);
    CHECK((!w.layers[0].v_from_k() && w.layers[1].v_from_k()));
    CHECK((w.layers[1].attn_q_norm.size() == 64 && w.layers[2].attn_k_norm.size() == 32));
    CHECK((w.layers[3].out_scale.size() == 1 && w.layers[3].attn_post_norm.size() == 128));
}

TEST_CASE("gemma4: the CPU backend's prefill and decode match the reference backend's to float rounding",
          "[arch][cpu]") {
    // With an F32 cache, every path (the scalar one and each kernel family) within float rounding of the reference
    // backend's double sums: the llama.cpp comparison's tolerance cannot see a small slip of one layer kind.
    // Measured: 1.2e-5 (scalar path) to 3.7e-5 (AVX2) of the logits' RMS; the sharp softmax (attention scale 1)
    // passes float rounding on more than other architectures' 1e-5.
    check_cpu_matches_reference(KvType::f32, true, 1e-4);
}

TEST_CASE("gemma4 with an F16 KV cache: the CPU backend's prefill and decode match the reference backend's",
          "[arch][cpu]") {
    // The default cache type (K, V, q and the probabilities in fp16 on both sides). Measured: 4.2e-3 of the logits'
    // RMS (AVX2), above test_reference.cpp's 3e-3 for F32 weights with an F16 cache for the sharp softmax's sake.
    check_cpu_matches_reference(KvType::f16, false, 6e-3);
}

TEST_CASE("gemma4: a sequence's decode steps give the same logits in mixed batches as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("gemma4-tiny"), {GgmlType::F32, GgmlType::Q8_0}, 64);
    // (the mixture: a token's experts, and so its sum, do not depend on the batch's other tokens)
    test::check_mixed_batches(synthetic_config("gemma4-moe-tiny"), {GgmlType::F32, GgmlType::Q8_0}, 64);
}

TEST_CASE("gemma4's mixture of experts is read from the file as llama.cpp reads it", "[arch][model]") {
    auto m = saved_model(GgmlType::F32, "gemma4-moe-tiny");
    const ModelConfig& c = m->config;
    CHECK((c.moe() && c.moe_shared_ffn && c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64));
    CHECK(c.n_ff == 128);
    const LayerWeights& L = m->weights.layers[2];
    // the dense FFN beside the experts, and each expert's gate and up as halves of one matrix
    CHECK((L.ffn_gate.n_rows() == 128 && L.ffn_down.ne[0] == 128));
    REQUIRE(L.experts.size() == 8);
    CHECK(L.experts[3].gate.n_rows() == 64);
    CHECK(L.experts[3].up.data == L.experts[3].gate.data + 64 * L.experts[3].gate.row_bytes());
    CHECK(L.experts[4].gate.data == L.experts[3].up.data + 64 * L.experts[3].up.row_bytes());
    CHECK((L.ffn_gate_inp_s.size() == 128 && L.ffn_pre_norm_2.size() == 128 && L.ffn_post_norm_1.size() == 128 &&
           L.ffn_post_norm_2.size() == 128 && L.ffn_down_exps_s.size() == 8));
}

TEST_CASE("quill run and quill chat work end to end on a gemma4 file with Gemma 4's chat template", "[arch][cli]") {
    const fs::path dir = test::temp_dir("arch_cli_gemma4");
    const std::string file = (dir / "gemma4-tiny.gguf").string();
    auto save = test::run_quill(
        {"bench", "--synthetic", "gemma4-tiny", "--dtype", "f16", "--save", file, "-p", "4", "-n", "2", "-r", "1"});
    REQUIRE(save.status == 0);
    // The template Google ships with Gemma 4 31B (tests/data/templates/src, rendered byte for byte as Jinja2 does
    // by test_template_corpus.cpp).
    const std::string tmpl =
        (fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" / "google-gemma-4-31B-it.jinja").string();
    auto shown = test::run_quill({"template", "-m", file, "--chat-template", tmpl}, "");
    CHECK(shown.status == 0);
    CHECK(shown.out.find("<|turn>model\n") != std::string::npos);
    auto run = test::run_quill({"run", "-m", file, "--chat-template", tmpl, "-p", "Why is the sky blue?", "--temp",
                                "0", "-n", "8", "--json"});
    CHECK(run.status == 0);
    CHECK(run.out.find("\"completion_tokens\":8") != std::string::npos);
    auto chat = test::run_quill({"chat", "-m", file, "--chat-template", tmpl, "--temp", "0", "-n", "6"},
                                "Hello there\nAnd again\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
    // The file's own template: Gemma 4's turns.
    auto own = test::run_quill({"template", "-m", file}, "");
    CHECK(own.status == 0);
    CHECK(own.out.find("<|turn>model\n") != std::string::npos);
}

TEST_CASE("gemma4 files with features quill lacks are refused with one line naming the feature", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_gemma4_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"per-layer", [](GgufWriter& w) { w.set("gemma4.embedding_length_per_layer_input", uint32_t(256)); },
         "per-layer token embeddings (Gemma 4 E2B/E4B) ('gemma4.embedding_length_per_layer_input') is not supported "
         "for gemma4"},
        {"shared-kv", [](GgufWriter& w) { w.set("gemma4.attention.shared_kv_layers", uint32_t(2)); },
         "KV layers shared across the last layers (Gemma 4 E2B/E4B) ('gemma4.attention.shared_kv_layers') is not "
         "supported for gemma4"},
        {"ff-array",
         [](GgufWriter& w) {
             std::vector<GgufValue> ff(4, GgufValue(uint32_t(256)));
             w.set("gemma4.feed_forward_length", GgufValue::array(GgufType::U32, ff));
         },
         "metadata 'gemma4.feed_forward_length' is an array (a width a layer), which quill does not support"},
        {"kv-heads-mixed",
         [](GgufWriter& w) {
             std::vector<GgufValue> kv{uint32_t(2), uint32_t(1), uint32_t(4), uint32_t(1)};
             w.set("gemma4.attention.head_count_kv", GgufValue::array(GgufType::U32, kv));
         },
         "metadata 'gemma4.attention.head_count_kv' differs between two local layers (2 and 4; quill supports one "
         "value for the local layers and one for the global ones)"},
        {"odd-swa-head",
         [](GgufWriter& w) {
             w.set("gemma4.attention.key_length_swa", uint32_t(33));
             w.set("gemma4.attention.value_length_swa", uint32_t(33));
         },
         "metadata 'gemma4.attention.key_length_swa' 33 or 'gemma4.rope.dimension_count_swa' 32 is odd, expected "
         "even numbers"},
    };
    test::check_refused_metadata(dir, "gemma4-tiny", cases);
}
