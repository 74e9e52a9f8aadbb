// Per-architecture settings: qwen2 (NEOX RoPE, Q/K/V biases) and llama with attention biases, on random tiny
// models; tensors a model carries that quill would not use are refused, not ignored. (Fast path vs the reference on
// these models: the tiny_cases loops of test_reference.cpp and test_cpu_backend.cpp.)
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/backend_checks.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace test_architectures {

using namespace quill;

namespace {

std::vector<float> reference_logits(const Model& m, const std::vector<int32_t>& tokens) {
    ReferenceBackend b(m.config, m.weights, ReferenceBackendOptions{64, 1, KvType::f32});
    return test::prefill_logits(b, tokens);
}

std::vector<float> fast_logits(const Model& m, const std::vector<int32_t>& tokens) {
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = 64;
    cpu::CpuBackend b(m.config, m.weights, o);
    return test::prefill_logits(b, tokens);
}

// A random gemma3 model: window 4, global RoPE base 1e6 (the local layers' is 10,000).
test::TinySpec gemma3_spec(int64_t n_layer) {
    test::TinySpec spec;
    spec.arch = "gemma3";
    spec.n_layer = n_layer;
    spec.sliding_window = 4;
    spec.rope_base = 1e6f;
    return spec;
}

std::string load_error(const std::vector<uint8_t>& bytes) {
    try {
        GgufFile file = GgufFile::parse("tiny.gguf", bytes);
        ModelConfig config = ModelConfig::from_gguf(file);
        Weights::from_gguf(file, config);
    } catch (const FileError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("qwen2 differs from llama by its RoPE layout only: equal at position 0, apart after", "[model]") {
    test::TinySpec spec;  // the same random weights under either architecture name
    spec.arch = "qwen2";
    auto qwen2 = test::make_tiny_model(spec);
    spec.arch = "llama";
    auto llama = test::make_tiny_model(spec);
    CHECK(qwen2->config.rope == ModelConfig::Rope::neox);
    CHECK(llama->config.rope == ModelConfig::Rope::adjacent);
    const std::vector<int32_t> tokens = test::some_tokens(6, static_cast<int>(spec.n_vocab), 3);
    const std::vector<float> lq = reference_logits(*qwen2, tokens), ll = reference_logits(*llama, tokens);
    const int64_t nv = spec.n_vocab;
    // Position 0 rotates by angle 0 in both layouts: the same function there.
    CHECK(test::rows(lq, nv, 0, 1) == test::rows(ll, nv, 0, 1));
    // Later positions rotate other dimension pairs: the outputs part.
    CHECK(test::max_diff(test::rows(lq, nv, 5, 6), test::rows(ll, nv, 5, 6)) > 1e-3 * test::rms(ll));
}

TEST_CASE("attention biases are loaded and applied", "[model]") {
    test::TinySpec spec;
    spec.biases = true;
    auto model = test::make_tiny_model(spec);
    for (const LayerWeights& L : model->weights.layers) {
        CHECK(static_cast<int64_t>(L.bq.size()) == model->config.n_embd_q());
        CHECK(static_cast<int64_t>(L.bk.size()) == model->config.n_embd_kv());
        CHECK(static_cast<int64_t>(L.bv.size()) == model->config.n_embd_kv());
        CHECK(static_cast<int64_t>(L.bo.size()) == model->config.n_embd);
    }
    const std::vector<int32_t> tokens = test::some_tokens(4, static_cast<int>(spec.n_vocab), 1);
    const std::vector<float> with = reference_logits(*model, tokens);
    for (LayerWeights& L : model->weights.layers) L.bq.clear(), L.bk.clear(), L.bv.clear(), L.bo.clear();
    CHECK(test::max_diff(reference_logits(*model, tokens), with) > 1e-3 * test::rms(with));
}

TEST_CASE("a tensor the architecture does not use is refused, naming it", "[model]") {
    test::TinySpec spec;
    const std::vector<uint8_t> bytes = test::make_tiny_gguf(spec);
    CHECK(load_error(bytes).empty());
    // The same file with one more tensor (a gemma3-style Q norm): running without it would be a different model.
    GgufFile file = GgufFile::parse("tiny.gguf", bytes);
    GgufWriter w;
    for (const auto& [key, value] : file.metadata()) w.set(key, value);
    for (const GgufTensorInfo& t : file.tensors()) {
        const uint8_t* d = file.tensor_data(t);
        w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(d, d + t.n_bytes));
    }
    w.add_tensor("blk.0.attn_q_norm.weight", GgmlType::F32, {16}, std::vector<uint8_t>(64, 0));
    const std::string err = load_error(w.to_bytes());
    CHECK(err.find("tensor 'blk.0.attn_q_norm.weight' is not used by quill's llama architecture") !=
          std::string::npos);
    // An architecture quill does not know names the ones it does.
    w.set("general.architecture", "frobnicator");
    CHECK(load_error(w.to_bytes()).find("architecture 'frobnicator' is not supported (supported: llama, qwen2, "
                                        "qwen2moe, qwen3, qwen3moe, qwen35, qwen35moe, gemma, gemma2, gemma3, "
                                        "gemma3n, gemma4, phi3, smollm3, mistral3, gpt-oss, glm4, glm4moe, granite, "
                                        "granitehybrid, nemotron_h, olmo2, exaone, exaone4, ernie4_5, seed_oss, lfm2, "
                                        "lfm2moe, "
                                        "deepseek2, llama4, mistral4, granitemoe, command-r, cohere2, qwen2vl, "
                                        "qwen3vl, qwen3vlmoe, qwen3next, minimax-m2, ernie4_5-moe, olmoe, "
                                        "nemotron_h_moe, falcon-h1, hunyuan-dense, hunyuan-moe, arcee, apertus, "
                                        "bailingmoe2, dots1, afmoe, exaone-moe, cohere2moe, granite_swa, deepseek32, "
                                        "glm-dsa, step35, laguna, mamba2, mamba)") !=
          std::string::npos);
}

TEST_CASE("gemma3 settings are read from the file and Gemma's definitions", "[model]") {
    test::TinySpec spec = gemma3_spec(13);
    spec.head_dim = 32;
    auto m = test::make_tiny_model(spec);
    const ModelConfig& c = m->config;
    CHECK(c.rope == ModelConfig::Rope::neox);
    CHECK(c.ffn_act == ModelConfig::Activation::gelu_tanh);
    CHECK(c.embd_scale == Approx(8.0f));                    // sqrt(n_embd = 64)
    CHECK(c.attn_scale == Approx(1.0f / std::sqrt(32.0f)));  // 1 / sqrt(head_dim), not n_embd / n_head
    CHECK(c.head_dim == 32);
    CHECK(c.n_embd_q() == 128);
    CHECK(c.rope_base == 1e6f);
    CHECK(c.rope_base_local == 10000.0f);
    CHECK(c.two_ropes());
    CHECK(c.final_logit_softcap == 0.0f);
    // Every sixth layer is global.
    std::string pattern;
    for (int64_t l = 0; l < c.n_layer; ++l) pattern += c.layer_is_local(l) ? 'L' : 'G';
    CHECK(pattern == "LLLLLGLLLLLGL");
    CHECK(c.first_visible(0, 3) == 0);
    CHECK(c.first_visible(0, 4) == 1);
    CHECK(c.first_visible(0, 10) == 7);
    CHECK(c.first_visible(5, 10) == 0);
    for (const LayerWeights& L : m->weights.layers) {
        CHECK(L.attn_q_norm.size() == 32);
        CHECK(L.attn_k_norm.size() == 32);
        CHECK(L.attn_post_norm.size() == 64);
        CHECK(L.ffn_post_norm.size() == 64);
    }
    // A llama file with a window: every layer local, one RoPE.
    test::TinySpec llama;
    llama.sliding_window = 7;
    auto ml = test::make_tiny_model(llama);
    CHECK(ml->config.layer_is_local(0));
    CHECK(ml->config.layer_is_local(1));
    CHECK_FALSE(ml->config.two_ropes());
    CHECK(ml->config.ffn_act == ModelConfig::Activation::silu);
    CHECK(ml->config.embd_scale == 1.0f);
}

TEST_CASE("gemma3 without one of its norms, its GELU, scaling or RoPE bases is a different model", "[model]") {
    const test::TinySpec spec = gemma3_spec(6);
    auto m = test::make_tiny_model(spec);
    const std::vector<int32_t> tokens = test::some_tokens(8, static_cast<int>(spec.n_vocab), 5);
    const std::vector<float> full = reference_logits(*m, tokens);
    REQUIRE(test::rms(full) > 0.1);
    auto differs = [&](const Model& changed) {
        return test::max_diff(reference_logits(changed, tokens), full) > 1e-3 * test::rms(full);
    };
    for (int which = 0; which < 4; ++which) {
        auto changed = test::make_tiny_model(spec);
        for (LayerWeights& L : changed->weights.layers) {
            std::vector<float>& v = which == 0   ? L.attn_q_norm
                                    : which == 1 ? L.attn_k_norm
                                    : which == 2 ? L.attn_post_norm
                                                 : L.ffn_post_norm;
            for (float& x : v) x *= 1.5f;
        }
        INFO("norm " << which);
        CHECK(differs(*changed));
    }
    auto silu = test::make_tiny_model(spec);
    silu->config.ffn_act = ModelConfig::Activation::silu;
    CHECK(differs(*silu));
    auto unscaled = test::make_tiny_model(spec);
    unscaled->config.embd_scale = 1.0f;
    CHECK(differs(*unscaled));
    // The local layers' RoPE base matters from position 1 on.
    auto one_rope = test::make_tiny_model(spec);
    one_rope->config.rope_base_local = one_rope->config.rope_base;
    CHECK(differs(*one_rope));
    // Soft-capping bounds the logits by the cap, on both paths.
    auto capped = test::make_tiny_model(spec);
    capped->config.final_logit_softcap = 2.0f;
    CHECK(differs(*capped));
    CHECK(test::max_abs(reference_logits(*capped, tokens)) < 2.0);
    CHECK(test::max_abs(fast_logits(*capped, tokens)) < 2.0);
    // The fast path follows each of these too (its match with the reference: the tiny_cases loops).
    CHECK(test::max_diff(fast_logits(*one_rope, tokens), fast_logits(*m, tokens)) > 1e-3 * test::rms(full));
}

TEST_CASE("a sliding window hides exactly the keys before it", "[model]") {
    // One layer, window 3: the logits at position p depend on tokens p-2..p only (RoPE is relative), so changing
    // token 0 changes positions 0-2 and leaves 3 on bit for bit; without the window it changes every position.
    test::TinySpec spec;
    spec.n_layer = 1;
    spec.sliding_window = 3;
    spec.type = spec.ffn_down_type = GgmlType::Q8_0;
    std::vector<int32_t> a = test::some_tokens(9, static_cast<int>(spec.n_vocab), 7), b = a;
    b[0] = (a[0] + 1) % static_cast<int32_t>(spec.n_vocab);
    const int64_t nv = spec.n_vocab;
    for (bool windowed : {true, false}) {
        test::TinySpec s = spec;
        s.sliding_window = windowed ? 3 : 0;
        auto m = test::make_tiny_model(s);
        for (bool reference : {true, false}) {
            INFO((windowed ? "window 3" : "no window") << (reference ? ", reference" : ", fast CPU"));
            const std::vector<float> la = reference ? reference_logits(*m, a) : fast_logits(*m, a);
            const std::vector<float> lb = reference ? reference_logits(*m, b) : fast_logits(*m, b);
            for (int64_t p = 0; p < 9; ++p) {
                INFO("position " << p);
                const bool same = std::equal(la.begin() + p * nv, la.begin() + (p + 1) * nv, lb.begin() + p * nv);
                CHECK(same == (windowed && p >= 3));
            }
        }
    }
}

}  // namespace test_architectures
