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
#include "engine/runtime/split_backend.h"
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

namespace test_arch_gemma4 {

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
// gemma4-e-tiny: F32 5.9e-3 on both, F16 2.1e-2 and at most 1.1e-2 (the greedy tokens the same everywhere). Its
// per-layer blocks put a GELU after every layer's FFN: with llama.cpp's fp16 table in the reference backend F32 falls
// to 3.1e-3, of which about 3e-4 at every position comes with the per-layer inputs (the same file without them gives
// 3e-6 at position 0, with them 3e-4: a rounding of llama.cpp's in that path that the reference does not make).
struct Case {
    const char* shape;
    GgmlType type;
    double ref_tol, cpu_tol;
};
constexpr Case kCases[] = {{"gemma4-tiny", GgmlType::F32, 5e-3, 5e-3},
                           {"gemma4-tiny", GgmlType::F16, 2e-2, 8e-3},
                           {"gemma4-moe-tiny", GgmlType::F32, 5e-3, 5e-3},
                           {"gemma4-moe-tiny", GgmlType::F16, 2e-2, 8e-3},
                           {"gemma4-e-tiny", GgmlType::F32, 8e-3, 8e-3},
                           {"gemma4-e-tiny", GgmlType::F16, 3e-2, 1.5e-2}};

std::string stem(const Case& c) { return fmt::format("{}-{}", c.shape, type_name(c.type)); }

// The CPU backend's prefill and decode (a step a call) of the references' prompt on the F32 model of `shape` against
// the reference backend's prefill, both with a cache of `kv`, each within tol of the logits' RMS: on each kernel
// family here, and on the scalar path too with `scalar`.
void check_cpu_matches_reference(KvType kv, bool scalar, double tol, const std::string& shape) {
    auto m = saved_model(GgmlType::F32, shape);
    const test::RefLogits ref = test::read_ref_logits(test::arch_ref_path(shape + "-f32.prompt_logits.txt"));
    ReferenceBackend reference(m->config, m->weights, ReferenceBackendOptions{64, 1, kv});
    const auto want = test::prefill_logits(reference, ref.tokens);
    std::vector<std::optional<Isa>> isas;
    if (scalar) isas.push_back(std::nullopt);
    for (Isa isa : test::model_test_isas()) isas.push_back(isa);
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
    check_cpu_matches_reference(KvType::f32, true, 1e-4, "gemma4-tiny");
}

TEST_CASE("gemma4 with an F16 KV cache: the CPU backend's prefill and decode match the reference backend's",
          "[arch][cpu]") {
    // The default cache type (K, V, q and the probabilities in fp16 on both sides). Measured: 4.2e-3 of the logits'
    // RMS (AVX2), above test_reference.cpp's 3e-3 for F32 weights with an F16 cache for the sharp softmax's sake.
    check_cpu_matches_reference(KvType::f16, false, 6e-3, "gemma4-tiny");
}

TEST_CASE("gemma4: a sequence's decode steps give the same logits in mixed batches as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("gemma4-tiny"), {GgmlType::F32, GgmlType::Q8_0}, 64);
    // (the mixture: a token's experts, and so its sum, do not depend on the batch's other tokens)
    test::check_mixed_batches(synthetic_config("gemma4-moe-tiny"), {GgmlType::F32, GgmlType::Q8_0}, 64);
    // (E2B's per-layer inputs: a token's own, whatever its company)
    test::check_mixed_batches(synthetic_config("gemma4-e-tiny"), {GgmlType::F32, GgmlType::Q8_0}, 64);
}

TEST_CASE("gemma4 E2B/E4B's per-layer inputs and shared KV layers are read from the file as llama.cpp reads them",
          "[arch][model]") {
    auto m = saved_model(GgmlType::F32, "gemma4-e-tiny");
    const ModelConfig& c = m->config;
    CHECK((c.n_embd_per_layer == 32 && c.n_kv_shared == 3 && c.n_layer_kv() == 3));
    // layers local, local, global, then the shared ones: local (reading layer 1's cache), local (1), global (2)
    CHECK((c.layer_is_local(1) && !c.layer_is_local(2) && c.layer_is_local(4) && !c.layer_is_local(5)));
    CHECK((c.kv_layer(0) == 0 && c.kv_layer(2) == 2 && c.kv_layer(3) == 1 && c.kv_layer(4) == 1 &&
           c.kv_layer(5) == 2));
    CHECK((c.layer_has_kv(2) && !c.layer_has_kv(3)));
    CHECK(c.n_ff_layers == std::vector<int64_t>{256, 256, 256, 512, 512, 512});
    CHECK((c.n_ff == 512 && c.layer_n_ff(0) == 256 && c.layer_n_ff(5) == 512));
    const Weights& w = m->weights;
    CHECK((w.per_layer_tok_embd.ne[0] == 6 * 32 && w.per_layer_tok_embd.ne[1] == 320));
    CHECK((w.per_layer_model_proj.ne[0] == 128 && w.per_layer_model_proj.n_rows() == 6 * 32));
    CHECK(w.per_layer_proj_norm.size() == 32);
    const LayerWeights& shared = w.layers[4];
    CHECK((shared.wq.data != nullptr && shared.wk.data == nullptr && shared.attn_k_norm.empty()));
    CHECK((shared.ffn_gate.n_rows() == 512 && w.layers[1].ffn_down.ne[0] == 256));
    CHECK((shared.per_layer_inp_gate.n_rows() == 32 && shared.per_layer_proj.n_rows() == 128 &&
           shared.per_layer_post_norm.size() == 128));
    CHECK(!w.layers[2].v_from_k());  // (V in every layer with a cache, as in E2B)
}

TEST_CASE("gemma4 E2B/E4B: the CPU backend's prefill and decode match the reference backend's", "[arch][cpu]") {
    // F32 cache: within float rounding on every path; F16 cache: the half-precision attention on both sides.
    check_cpu_matches_reference(KvType::f32, true, 1e-4, "gemma4-e-tiny");
    check_cpu_matches_reference(KvType::f16, false, 6e-3, "gemma4-e-tiny");
}

TEST_CASE("gemma4 E2B/E4B: the KV cache holds the layers with a cache of their own, and is sized so",
          "[arch][cpu]") {
    auto m = saved_model(GgmlType::F32, "gemma4-e-tiny");
    const ModelConfig& c = m->config;
    const size_t row = static_cast<size_t>(c.n_embd_kv()) * sizeof(float);
    // without rings (a context under the ring's size): three layers of 64 positions, K and V
    CHECK(cpu::kv_cache_bytes(c, KvType::f32, 64, 1) == 2 * 3 * 64 * row);
    // with rings: the two local layers with a cache keep a ring each, the global one the whole context
    const int64_t ring = cpu::window_ring_for(c, KvType::f32, 4096);
    REQUIRE(ring > 0);
    CHECK(cpu::kv_cache_bytes(c, KvType::f32, 4096, 2) == 2 * 2 * static_cast<size_t>(2 * ring + 4096) * row);
    auto cpu = test::arch_cpu_backend(c, m->weights, Isa::generic, 64);
    CHECK(cpu->kv_shape().n_layer == 3);
    ReferenceBackend reference(c, m->weights, ReferenceBackendOptions{64, 1, KvType::f32});
    CHECK(reference.kv_shape().n_layer == 3);
}

TEST_CASE("gemma4 E2B/E4B: a prefix copied to another slot continues as if that slot had run it", "[arch][cpu]") {
    // Slot 0 runs 40 tokens; slot 1 takes its first 30 positions (copy_kv) and runs the last 10: their logits are
    // slot 0's, bit for bit (the shared layers read the copied caches of layers 1 and 2). With a context of 1024 the
    // local layers keep rings, with 64 the whole context.
    auto m = saved_model(GgmlType::F32, "gemma4-e-tiny");
    const std::vector<int32_t> tokens = test::some_tokens(40, 320, 5);
    const std::vector<int32_t> tail(tokens.begin() + 30, tokens.end());
    auto check = [&](Backend& b) {
        const auto all = test::prefill_logits(b, tokens, 0);
        b.copy_kv(0, 1, 0, 30);
        Batch batch;
        for (int32_t p = 30; p < 40; ++p) batch.add(tokens[p], p, 1, true);
        std::vector<float> got(10 * 320);
        b.forward(batch, got);
        CHECK(got == test::rows(all, 320, 30, 40));
    };
    for (const int64_t n_ctx : {64, 1024}) {
        INFO("context " << n_ctx);
        check(*test::arch_cpu_backend(m->config, m->weights, test::model_test_isas().back(), n_ctx, 2));
        ReferenceBackend reference(m->config, m->weights, ReferenceBackendOptions{n_ctx, 2, KvType::f32});
        check(reference);
    }
}

TEST_CASE("gemma4 E2B/E4B: a split forward keeps each shared layer with the cache it reads", "[arch][cpu]") {
    auto m = saved_model(GgmlType::Q8_0, "gemma4-e-tiny");
    auto range = [&](LayerRange layers) {
        cpu::CpuBackendOptions o;
        o.n_threads = 2;
        o.n_ctx = 64;
        o.layers = layers;
        return std::make_unique<cpu::CpuBackend>(m->config, m->weights, o);
    };
    // layers 1-5 hold the caches of 1 and 2 that 3, 4 and 5 read: the split gives the whole model's logits
    std::vector<std::unique_ptr<Backend>> ranges;
    ranges.push_back(range({0, 1}));
    ranges.push_back(range({1, 6}));
    CHECK(ranges[1]->kv_shape().n_layer == 2);
    SplitBackend split(std::move(ranges), "plan");
    auto whole = range({});
    const std::vector<int32_t> tokens = test::some_tokens(20, 320, 3);
    CHECK(test::prefill_logits(split, tokens) == test::prefill_logits(*whole, tokens));
    // from layer 2 on, layer 3 would read layer 1's cache, which the range before holds
    for (int64_t first = 2; first < 6; ++first) {
        INFO("layers " << first << "-5");
        CHECK_THROWS_WITH(range({first, 6}), Catch::Contains("attends over the KV cache of layer") &&
                                                 Catch::Contains("which another range holds"));
    }
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
    // The template Google ships with Gemma 4 31B (tests/data/templates/src, rendered byte for byte as Jinja2 does
    // by test_template_corpus.cpp); E2B's turns are the same.
    const std::string tmpl =
        (fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" / "google-gemma-4-31B-it.jinja").string();
    for (const std::string shape : {"gemma4-tiny", "gemma4-e-tiny"}) {
        INFO(shape);
        const std::string file = (test::temp_dir("arch_cli_" + shape) / (shape + ".gguf")).string();
        auto save = test::run_quill(
            {"bench", "--synthetic", shape, "--dtype", "f16", "--save", file, "-p", "4", "-n", "2", "-r", "1"});
        REQUIRE(save.status == 0);
        auto shown = test::run_quill({"template", "-m", file, "--chat-template", tmpl}, "");
        CHECK(shown.status == 0);
        CHECK(shown.out.find("<|turn>model\n") != std::string::npos);
        auto run = test::run_quill({"run", "-m", file, "--chat-template", tmpl, "-p", "Why is the sky blue?",
                                    "--temp", "0", "-n", "8", "--json"});
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
}

TEST_CASE("gemma4 files with features quill lacks are refused with one line naming the feature", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_gemma4_refused");
    const std::vector<test::RefusedMetadata> cases = {
        // (layers local, global, local, global: the one shared layer, global, would read layer 2's cache, a local
        // layer's, as llama.cpp maps it)
        {"shared-kv-kind", [](GgufWriter& w) { w.set("gemma4.attention.shared_kv_layers", uint32_t(1)); },
         "metadata 'gemma4.attention.shared_kv_layers' 1: shared layer 3 (global) would read the cache of layer 2, "
         "which is local (expected the last layer with a cache global, the one before it local)"},
        {"ff-array-length",
         [](GgufWriter& w) {
             std::vector<GgufValue> ff(3, GgufValue(uint32_t(256)));
             w.set("gemma4.feed_forward_length", GgufValue::array(GgufType::U32, ff));
         },
         "metadata 'gemma4.feed_forward_length' is an array of 3 u32 values, expected 4 integers (one a layer)"},
        {"per-layer-tensors", [](GgufWriter& w) { w.set("gemma4.embedding_length_per_layer_input", uint32_t(32)); },
         "missing tensor 'per_layer_proj_norm.weight' [32]"},
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

}  // namespace test_arch_gemma4
