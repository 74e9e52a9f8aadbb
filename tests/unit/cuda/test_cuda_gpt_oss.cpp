// The CUDA backend on gpt-oss: the synthetic gpt-oss-tiny model (tests/model/test_arch_gpt_oss.cpp: 4 layers
// alternating a window of 8 and global, attention sinks, Q/K/V/O biases, 8 experts of 64 features with a biased
// router and biased products, 4 used, the clamped SwiGLU, YaRN) against the reference backend in F32 and F16 at every
// prompt position, stepwise and as a prompt, through the decode kernel and (an 80-token prompt, f16 cache) flash
// attention, past the window; in a prompt long enough that experts take cuBLAS; llama.cpp's logits and greedy tokens
// (tests/data/arch/gpt-oss-tiny-*); a decode step's logits the same bits in any batch; check_model and the memory
// plan, which need no device; `quill bench` on the device.
#include "cuda/cuda_backend.h"
#include "cuda/dequant.h"
#include "cuda/gemm.h"
#include "cuda/memory_plan.h"
#include "cuda/moe.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/backend_checks.h"
#include "tests/support/test_util.h"
#include "tests/unit/cuda/cuda_checks.h"

#include <catch2/catch.hpp>

#include <filesystem>

namespace test_cuda_gpt_oss {

using namespace quill;
using namespace quill::cuda_test;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<Model> saved_gpt_oss(GgmlType type, uint64_t seed) {
    const fs::path path = test::temp_dir("cuda-gpt-oss") / fmt::format("gpt-oss-tiny-{}-{}.gguf", type_name(type), seed);
    SyntheticModel::make(synthetic_config("gpt-oss-tiny"), type, seed)->save(path.string());
    return Model::load(path.string());
}

// The worst row's max |got - want| / rms(want) over the first n positions.
double worst(const std::vector<float>& got, const std::vector<float>& want, int64_t nv, int64_t n) {
    double w = 0;
    for (int64_t p = 0; p < n; ++p)
        w = std::max(w, relative_error(test::rows(got, nv, p, p + 1), test::rows(want, nv, p, p + 1)));
    return w;
}

}  // namespace

TEST_CASE("the CUDA backend takes gpt-oss's sinks, biases and clamped SwiGLU, planning their memory", "[cuda]") {
    // No device needed: check_model reads the config and weights only.
    auto m = SyntheticModel::make(synthetic_config("gpt-oss-tiny"), GgmlType::F16, 42);
    const ModelConfig& c = m->config;
    REQUIRE((c.moe() && c.ffn_act == ModelConfig::Activation::swiglu_oai));
    REQUIRE(!m->weights.layers[0].attn_sinks.empty());
    CHECK_NOTHROW(cuda::check_model(c, m->weights));
    // Still refused: the clamped SwiGLU in a dense FFN, qwen3moe's experts with it, gpt-oss's with plain SwiGLU.
    ModelConfig dense = c;
    dense.n_expert = dense.n_expert_used = dense.n_ff_exp = 0;
    CHECK_THROWS_WITH(cuda::check_model(dense, m->weights), Catch::Contains("dense clamped SwiGLU"));
    ModelConfig other = c;
    other.arch = "qwen3moe";
    CHECK_THROWS_WITH(cuda::check_model(other, m->weights), Catch::Contains("mixture of experts (8 experts"));
    ModelConfig silu = c;
    silu.ffn_act = ModelConfig::Activation::silu;
    CHECK_THROWS_WITH(cuda::check_model(silu, m->weights), Catch::Contains("mixture of experts (8 experts"));
    // The sinks and the router's and experts' biases are uploaded: their bytes are in the weights' plan, each at a
    // 256-byte boundary.
    auto gpt_oss_vectors = [](LayerWeights& L) {
        return std::vector<std::vector<float>*>{&L.attn_sinks, &L.ffn_gate_inp_b, &L.ffn_gate_exps_b,
                                                &L.ffn_up_exps_b, &L.ffn_down_exps_b};
    };
    size_t vectors = 0;
    for (LayerWeights& L : m->weights.layers)
        for (const std::vector<float>* v : gpt_oss_vectors(L)) vectors += cuda::align_up(sizeof(float) * v->size());
    auto stripped = SyntheticModel::make(synthetic_config("gpt-oss-tiny"), GgmlType::F16, 42);
    for (LayerWeights& L : stripped->weights.layers)
        for (std::vector<float>* v : gpt_oss_vectors(L)) v->clear();
    CHECK(cuda::weight_bytes(c, m->weights) == cuda::weight_bytes(c, stripped->weights) + vectors);
    // The routing's four int arrays (rows, slots, weights, owners) of n k each are in the experts' workspace.
    const int64_t n = 100;
    const size_t arrays =
        sizeof(float) * (n * 8 + 2 * (4 * n * 128) + 2 * (4 * n * 64)) + 4 * sizeof(int32_t) * (4 * n);
    CHECK(cuda::moe_workspace_bytes(c, n) >= arrays);
}

TEST_CASE("gpt-oss on the CUDA backend matches the reference backend at every position in F32 and F16",
          "[cuda]") {
    if (!have_gpu()) return;
    for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
        INFO(type_name(type));
        auto m = saved_gpt_oss(type, 42);
        const int64_t nv = m->config.n_vocab;
        // f32 cache: 24 tokens (three windows of 8), every product and the attention through the kernels, in one
        // call and one token a call. f16 cache: 80 tokens, at least kGemmMinTokens, so that the prompt's attention
        // takes the flash tiles (sinks with the window of 8 in them) and the experts cuBLAS; stepwise the decode
        // kernel with an f16 cache.
        for (KvType kv : {KvType::f32, KvType::f16}) {
            INFO((kv == KvType::f32 ? "f32 cache, 24 tokens" : "f16 cache, 80 tokens: flash attention in the prompt"));
            const auto tokens = test::some_tokens(kv == KvType::f32 ? 24 : 80, static_cast<int>(nv), 3);
            REQUIRE((kv == KvType::f32 || static_cast<int64_t>(tokens.size()) >= cuda::kGemmMinTokens));
            const std::vector<float> want = test::prefill_logits(*reference(*m, kv, 1, 320), tokens);
            REQUIRE(test::rms(want) > 0.1);
            auto g = gpu(*m, kv, 1, 320);
            const double tol = kv == KvType::f32 ? 1e-4 : 1e-2;
            const auto n = static_cast<int64_t>(tokens.size());
            CHECK(worst(test::prefill_logits(*g, tokens), want, nv, n) <= tol);
            CHECK(worst(test::stepwise_logits(*g, tokens), want, nv, n) <= tol);
        }
        // 300 tokens: experts of more than 64 tokens through cuBLAS (f32), the windows' far past masked.
        INFO("300 tokens");
        const auto many = test::some_tokens(300, static_cast<int>(nv), 4);
        const std::vector<float> got = test::prefill_logits(*gpu(*m, KvType::f32, 1, 320), many);
        CHECK(worst(got, test::prefill_logits(*reference(*m, KvType::f32, 1, 320), many), nv, 300) <= 1e-4);
    }
}

TEST_CASE("gpt-oss on the CUDA backend gives llama.cpp's logits and greedy tokens", "[cuda]") {
    if (!have_gpu()) return;
    for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
        const std::string stem = fmt::format("gpt-oss-tiny-{}", type_name(type));
        INFO(stem);
        auto m = saved_gpt_oss(type, 42);
        // The CPU's limit (test_arch_gpt_oss.cpp): max |diff| / range 1e-3 at every prompt position
        test::check_against_llama_cpp(*gpu(*m, KvType::f32, 1, 256), stem, 1e-3);
    }
}

TEST_CASE("gpt-oss on the CUDA backend: a decode step's logits have the same bits in any batch as alone", "[cuda]") {
    if (!have_gpu()) return;
    for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
        INFO(type_name(type));
        // (12 and 10 tokens: past the local layers' window of 8, with the sinks)
        check_decode_batch_invariance(*saved_gpt_oss(type, 7), 12, 10);
    }
}

TEST_CASE("quill bench --device cuda runs the synthetic gpt-oss-tiny model", "[cuda]") {
    if (!have_gpu()) return;
    const auto r = test::run_quill({"bench", "--synthetic", "gpt-oss-tiny", "--device", "cuda", "--dtype", "f16", "-p",
                                    "80", "-n", "8", "-r", "1"});
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(r.out.find("| cuda") != std::string::npos);
}

}  // namespace test_cuda_gpt_oss
