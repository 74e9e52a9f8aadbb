// Per-architecture settings: qwen2 (NEOX RoPE, Q/K/V biases) and llama with attention biases, on random tiny
// models; tensors a model carries that quill would not use are refused, not ignored. (Fast path vs the reference on
// these models: the tiny_cases loops of test_reference.cpp and test_cpu_backend.cpp.)
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/reference/reference_backend.h"
#include "tests/backend_checks.h"

#include <catch2/catch.hpp>

#include <string>

using namespace quill;

namespace {

std::vector<float> reference_logits(const Model& m, const std::vector<int32_t>& tokens) {
    ReferenceBackend b(m.config, m.weights, ReferenceBackendOptions{64, 1, KvType::f32});
    return test::prefill_logits(b, tokens);
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
    w.set("general.architecture", "gemma3");
    CHECK(load_error(w.to_bytes()).find("architecture 'gemma3' is not supported (supported: llama, qwen2)") !=
          std::string::npos);
}
