// The CUDA backend on the architecture settings its kernels took last: smollm3's layers without RoPE, mistral3's
// attention temperature, RoPE's magnitude scale (YaRN's, phi3's attention factor) with YaRN's frequency ramp, and
// gemma2's attention and final logit soft-caps. check_model takes them and layer_heads hands them to the kernels
// (no device needed); on a GPU, the synthetic tiny models of tests/model/test_arch_*.cpp (seed 42, saved and loaded
// back) give the reference backend's logits at every prompt position and llama.cpp's greedy tokens
// (tests/data/arch/*.greedy.txt), with F32 and F16 weights, an F32 cache (the references') and an F16 one through
// flash attention and the decode kernel.
#ifdef QUILL_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/dequant.h"  // (cuda_checks.h: uses_q8)
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/backend_checks.h"
#include "tests/support/test_util.h"
#include "tests/unit/cuda/cuda_checks.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

namespace test_cuda_arch_features {

using namespace quill;
using namespace quill::cuda_test;
namespace fs = std::filesystem;

namespace {

// The shapes with the settings, and what each exercises.
const char* const kShapes[] = {
    "smollm3-tiny",     // layer 3 of 5 without RoPE
    "mistral3-tiny",    // YaRN (factor 16 over 16 positions) and the query temperature (floor 16); mscale 1
    "qwen3-tiny-yarn",  // YaRN (factor 4 over 64 positions) with its magnitude scale 1 + 0.1 ln 4
    "gemma2-tiny",      // scores capped at 0.1, logits at 0.5; window 8 on alternate layers; head_dim 48
    "phi3-tiny",        // the long RoPE factors with their attention factor (mscale); 24 of 32 dims rotated
};

std::unique_ptr<Model> saved_synthetic(const std::string& shape, GgmlType type, const fs::path& dir) {
    const fs::path path = dir / fmt::format("{}-{}.gguf", shape, type_name(type));
    SyntheticModel::make(synthetic_config(shape), type, 42)->save(path.string());
    return Model::load(path.string());
}

// The greedy tokens of `b` after the prompt, and at each step the gap between its two largest logits over the
// row's range (a gap under rounding's reach is a near-tie either token may win).
struct Greedy {
    std::vector<int32_t> tokens;
    std::vector<double> gap;
};
Greedy greedy_with_gaps(Backend& b, const std::vector<int32_t>& prompt, int n) {
    const int64_t nv = b.config().n_vocab;
    Greedy g;
    std::vector<int32_t> seq = prompt;
    for (int i = 0; i < n; ++i) {
        const auto row = test::rows(test::prefill_logits(b, seq), nv, static_cast<int64_t>(seq.size()) - 1,
                                    static_cast<int64_t>(seq.size()));
        std::vector<float> sorted = row;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
        g.gap.push_back((sorted[0] - sorted[1]) / (*hi - *lo));
        g.tokens.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
        seq.push_back(g.tokens.back());
    }
    return g;
}

// max |got - want| / rms(want) of each position's row: the worst.
double worst_row_error(const std::vector<float>& got, const std::vector<float>& want, int64_t nv) {
    REQUIRE(got.size() == want.size());
    double worst = 0.0;
    for (int64_t p = 0; p < static_cast<int64_t>(want.size()) / nv; ++p)
        worst = std::max(worst, relative_error(test::rows(got, nv, p, p + 1), test::rows(want, nv, p, p + 1)));
    return worst;
}

}  // namespace

TEST_CASE("the CUDA backend takes layers without RoPE, the query temperature, RoPE magnitude scales and soft-capped "
          "scores, and still refuses the shapes its kernels do not take",
          "[cuda]") {
    // No device needed: check_model reads the config and weights only.
    for (const char* shape : kShapes) {
        INFO(shape);
        auto m = SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 42);
        CHECK_NOTHROW(cuda::check_model(m->config, m->weights));
    }
    auto m = SyntheticModel::make(synthetic_config("qwen3-tiny"), GgmlType::F32, 42);
    ModelConfig wide = m->config;
    wide.head_dim = 640;
    CHECK_THROWS_WITH(cuda::check_model(wide, m->weights), Catch::Contains("head_dim <= 512"));
    ModelConfig odd = m->config;
    odd.n_rot = 63;
    CHECK_THROWS_WITH(cuda::check_model(odd, m->weights), Catch::Contains("an even rope dimension"));
    // gemma4 has no kernels (its per-layer head sizes, V norm and output scale): one line, and auto takes the CPU.
    auto g4 = SyntheticModel::make(synthetic_config("gemma4-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(g4->config, g4->weights),
                      "the CUDA backend cannot run gemma4 (Gemma 4) models (the CPU backend can: --device cpu)");
    // nor glm4, granite, olmo2, exaone4, ernie4_5, seed_oss and gemma, which no GPU session has checked
    for (const char* shape : {"glm4-tiny", "granite-tiny", "olmo2-tiny", "exaone4-tiny", "ernie4_5-tiny",
                              "seed_oss-tiny", "gemma-tiny"}) {
        auto d = SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 42);
        CHECK_THROWS_WITH(cuda::check_model(d->config, d->weights),
                          fmt::format("the CUDA backend cannot run {} models; --device cpu runs it", d->config.arch));
    }
    // Nor Cohere's LayerNorms and parallel blocks (cohere2, command-r), which have no kernels.
    for (const char* shape : {"cohere2-tiny", "command-r-tiny"}) {
        auto d = SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 42);
        CHECK_THROWS_WITH(cuda::check_model(d->config, d->weights),
                          fmt::format("the CUDA backend cannot run {} models (LayerNorm, attention and FFN in "
                                      "parallel); --device cpu runs it", d->config.arch));
    }
    // Nor has qwen35 (its gated delta nets, a recurrent state per sequence).
    auto q35 = SyntheticModel::make(synthetic_config("qwen35-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(q35->config, q35->weights),
                      "the CUDA backend cannot run qwen35 models (recurrent gated delta net layers); --device cpu "
                      "runs it");
    // Nor granitehybrid's Mamba-2 layers.
    auto gh = SyntheticModel::make(synthetic_config("granitehybrid-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(gh->config, gh->weights),
                      "the CUDA backend cannot run granitehybrid models (recurrent Mamba-2 layers); --device cpu runs "
                      "it");
    // Nor nemotron_h's (its layers of one block among them), nemotron_h_moe's and falcon-h1's (beside attention).
    for (const char* shape : {"nemotron_h-tiny", "nemotron_h_moe-tiny", "falcon-h1-tiny"}) {
        auto nh = SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 42);
        CHECK_THROWS_WITH(cuda::check_model(nh->config, nh->weights),
                          fmt::format("the CUDA backend cannot run {} models (recurrent Mamba-2 layers); --device cpu "
                                      "runs it", nh->config.gguf_arch()));
    }
    // Nor mamba2's and mamba's mixers alone (Mamba-2, Mamba-1).
    auto m2 = SyntheticModel::make(synthetic_config("mamba2-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(m2->config, m2->weights),
                      "the CUDA backend cannot run mamba2 models (recurrent Mamba-2 layers); --device cpu runs it");
    auto m1 = SyntheticModel::make(synthetic_config("mamba-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(m1->config, m1->weights),
                      "the CUDA backend cannot run mamba models (recurrent Mamba-1 layers); --device cpu runs it");
    // Nor lfm2 (its short convolutions, a recurrent state per sequence).
    auto lfm2 = SyntheticModel::make(synthetic_config("lfm2-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(lfm2->config, lfm2->weights),
                      "the CUDA backend cannot run lfm2 models (recurrent short convolution layers); --device cpu "
                      "runs it");
    // Nor qwen35moe, nor qwen2moe's shared expert beside the routed ones.
    auto q35moe = SyntheticModel::make(synthetic_config("qwen35moe-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(q35moe->config, q35moe->weights),
                      "the CUDA backend cannot run qwen35moe models (recurrent gated delta net layers); --device cpu "
                      "runs it");
    auto q3next = SyntheticModel::make(synthetic_config("qwen3next-tiny"), GgmlType::F32, 42);  // (named as its file)
    CHECK_THROWS_WITH(cuda::check_model(q3next->config, q3next->weights),
                      "the CUDA backend cannot run qwen3next models (recurrent gated delta net layers); --device cpu "
                      "runs it");
    auto q2moe = SyntheticModel::make(synthetic_config("qwen2moe-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(q2moe->config, q2moe->weights),
                      "the CUDA backend cannot run qwen2moe models (a shared expert beside the routed ones); --device "
                      "cpu runs it");
    // Nor glm4moe's DeepSeek-V3-style routing and leading dense layer, nor lfm2moe (its short convs first).
    auto glm = SyntheticModel::make(synthetic_config("glm4moe-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(glm->config, glm->weights),
                      "the CUDA backend cannot run glm4moe models (sigmoid expert routing with a selection bias, "
                      "leading dense layers); --device cpu runs it");
    auto lfm2moe = SyntheticModel::make(synthetic_config("lfm2moe-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(lfm2moe->config, lfm2moe->weights),
                      "the CUDA backend cannot run lfm2moe models (recurrent short convolution layers); --device "
                      "cpu runs it");
    // Nor minimax-m2 (qwen3moe's layers with glm4moe's routing), by the file's architecture.
    auto minimax = SyntheticModel::make(synthetic_config("minimax-m2-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(minimax->config, minimax->weights),
                      "the CUDA backend cannot run minimax-m2 models (sigmoid expert routing with a selection bias, "
                      "leading dense layers); --device cpu runs it");
    // Nor bailingmoe2 and dots1 (qwen3moe's layers with DeepSeek-V3's routing), nor afmoe's gated attention output.
    for (const char* shape : {"bailingmoe2-tiny", "dots1-tiny"}) {
        auto m = SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 42);
        CHECK_THROWS_WITH(cuda::check_model(m->config, m->weights),
                          fmt::format("the CUDA backend cannot run {} models (sigmoid expert routing with a selection "
                                      "bias, leading dense layers); --device cpu runs it", m->config.file_arch));
    }
    auto afmoe = SyntheticModel::make(synthetic_config("afmoe-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(afmoe->config, afmoe->weights),
                      "the CUDA backend cannot run afmoe models (a gated attention output); --device cpu runs it");
    // Nor exaone-moe (by name), cohere2moe (cohere2's parallel blocks) or granite_swa (granite's multipliers).
    const std::pair<const char*, const char*> variants[] = {
        {"exaone-moe-tiny", "the CUDA backend cannot run exaone-moe models; --device cpu runs it"},
        {"cohere2moe-tiny", "the CUDA backend cannot run cohere2moe models (LayerNorm, attention and FFN in parallel); "
                            "--device cpu runs it"},
        {"granite-swa-moe-tiny", "the CUDA backend cannot run granite_swa models; --device cpu runs it"}};
    for (const auto& [shape, what] : variants) {
        auto m = SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 42);
        CHECK_THROWS_WITH(cuda::check_model(m->config, m->weights), what);
    }
    // Nor step35's and laguna's local layers of their own head counts (step35's clamped SwiGLUs), nor laguna M.1's
    // gated attention output.
    for (const char* shape : {"step35-tiny", "laguna-tiny"}) {
        auto m = SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 42);
        CHECK_THROWS_WITH(cuda::check_model(m->config, m->weights),
                          fmt::format("the CUDA backend cannot run {} models (local layers of their own head counts, "
                                      "a clamped SwiGLU); --device cpu runs it", m->config.file_arch));
    }
    auto laguna_m = SyntheticModel::make(synthetic_config("laguna-m-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(laguna_m->config, laguna_m->weights),
                      "the CUDA backend cannot run laguna models (a gated attention output); --device cpu runs it");
    // Nor ernie4_5-moe (ernie4_5's layers, which CUDA has not been checked on), by the file's architecture.
    auto ernie = SyntheticModel::make(synthetic_config("ernie4_5-moe-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(ernie->config, ernie->weights),
                      "the CUDA backend cannot run ernie4_5-moe models; --device cpu runs it");
    // Nor olmoe's whole-projection Q/K norms and experts weighted by their unrenormalized softmax shares.
    auto olmoe = SyntheticModel::make(synthetic_config("olmoe-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(olmoe->config, olmoe->weights),
                      "the CUDA backend cannot run olmoe models (Q/K norms over the whole projection, experts' "
                      "weights not renormalized); --device cpu runs it");
    // Nor hunyuan's Q/K norms after RoPE, arcee's ungated ReLU² FFN, apertus's ungated xIELU one.
    for (const char* shape : {"hunyuan-dense-tiny", "hunyuan-moe-tiny", "arcee-tiny", "apertus-tiny"}) {
        const ModelConfig c = synthetic_config(shape);
        CHECK_THROWS_WITH(cuda::check_model(c, Weights{}),
                          fmt::format("the CUDA backend cannot run {} models (Q/K norms after RoPE, an ungated ReLU² "
                                      "or xIELU FFN); --device cpu runs it", c.gguf_arch()));
    }
    // Nor llama4 (Scout's shape without its layers: every expert layer; Maverick's: dense layers between).
    for (const char* shape : {"llama4-tiny", "llama4-scout", "llama4-maverick"}) {
        INFO(shape);
        CHECK_THROWS_WITH(cuda::check_model(synthetic_config(shape), Weights{}),
                          "the CUDA backend cannot run llama4 models (chunked attention, experts weighted on their "
                          "input); --device cpu runs it");
    }
    // Nor deepseek2's Multi-head Latent Attention.
    auto ds2 = SyntheticModel::make(synthetic_config("deepseek2-tiny"), GgmlType::F32, 42);
    CHECK_THROWS_WITH(cuda::check_model(ds2->config, ds2->weights),
                      "the CUDA backend cannot run deepseek2 models (Multi-head Latent Attention); --device cpu runs "
                      "it");
}

TEST_CASE("layer_heads gives the CUDA kernels each layer's RoPE, query temperature and score soft-cap", "[cuda]") {
    const ModelConfig smol = synthetic_config("smollm3-tiny");
    for (int64_t l = 0; l < smol.n_layer; ++l) {
        INFO("smollm3 layer " << l);
        const cuda::Heads h = cuda::layer_heads(smol, l);
        CHECK(h.n_rot == (l == 3 ? 0 : smol.n_rot));  // every fourth layer without RoPE
        CHECK((h.n_head == smol.n_head && h.n_head_kv == smol.n_head_kv && h.head_dim == smol.head_dim));
        CHECK((h.temp_scale == 0.0f && h.softcap == 0.0f));
    }
    const ModelConfig mistral = synthetic_config("mistral3-tiny");
    const cuda::Heads mh = cuda::layer_heads(mistral, 2);
    CHECK(mh.temp_scale == mistral.attn_temp_scale);
    CHECK(mh.temp_floor == mistral.attn_temp_floor);
    CHECK(mh.n_rot == mistral.n_rot);
    CHECK(!mh.neox);
    const ModelConfig gemma = synthetic_config("gemma2-tiny");
    for (int64_t l = 0; l < gemma.n_layer; ++l) CHECK(cuda::layer_heads(gemma, l).softcap == 0.1f);
    CHECK(cuda::layer_heads(gemma, 0).neox);
    CHECK(cuda::layer_heads(synthetic_config("qwen3-tiny"), 0).softcap == 0.0f);
}

TEST_CASE("the CUDA backend on smollm3, mistral3, qwen3 with YaRN, gemma2 and phi3 gives the reference backend's "
          "logits at every prompt position and llama.cpp's greedy tokens",
          "[cuda]") {
    if (!have_gpu()) return;
    const fs::path dir = test::temp_dir("cuda-arch-features");
    for (const char* shape : kShapes) {
        for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
            const std::string stem = fmt::format("{}-{}", shape, type_name(type));
            INFO(stem);
            auto m = saved_synthetic(shape, type, dir);
            const fs::path ref_file = test::arch_ref_path(stem + ".greedy.txt");
            const std::vector<int32_t> prompt = test::read_ref_ids(ref_file, "prompt_tokens");
            const std::vector<int32_t> oracle = test::read_ref_ids(ref_file, "generated_tokens");
            REQUIRE(prompt.size() >= 24);
            REQUIRE(oracle.size() == 24);
            // llama.cpp's F32 cache and context of 256 (beyond phi3-tiny's original 128: the long RoPE factors). The
            // prompts are shorter than kGemmMinTokens: the decode kernels take them.
            auto g = gpu(*m, KvType::f32, 1, 256);
            auto r = reference(*m, KvType::f32, 1, 256);
            std::vector<float> got, want;
            const std::vector<int32_t> greedy = test::greedy_tokens(*g, prompt, 24, &got);
            test::greedy_tokens(*r, prompt, 24, &want);
            // Float arithmetic against double over the same weights and cache: test_cuda.cpp's 1e-4 of the logits'
            // rms, at every position.
            CHECK(worst_row_error(got, want, m->config.n_vocab) < 1e-4);
            // llama.cpp's tokens up to the first near-tie of the reference backend's run (1e-3 of a row's range, as
            // tests/model/test_arch_qwen3.cpp): step 15 on mistral3, 20 on smollm3, none in 24 on the others.
            const Greedy exact = greedy_with_gaps(*r, prompt, 24);
            size_t compared = 0;
            while (compared < greedy.size() && exact.gap[compared] >= 1e-3) ++compared;
            CHECK(compared >= 15);
            CHECK(std::vector<int32_t>(greedy.begin(), greedy.begin() + compared) ==
                  std::vector<int32_t>(oracle.begin(), oracle.begin() + compared));
            CHECK(std::vector<int32_t>(exact.tokens.begin(), exact.tokens.begin() + compared) ==
                  std::vector<int32_t>(oracle.begin(), oracle.begin() + compared));
        }
    }
}

TEST_CASE("the same models with an F16 cache: a prompt through flash attention and the decode steps (graphs) match "
          "the reference backend at every position",
          "[cuda]") {
    if (!have_gpu()) return;
    const fs::path dir = test::temp_dir("cuda-arch-features-f16");
    for (const char* shape : kShapes) {
        INFO(shape);
        auto m = saved_synthetic(shape, GgmlType::F32, dir);
        // 80 tokens: at least kGemmMinTokens, so that prefill takes flash attention (and cuBLAS), past gemma2's
        // window and across five of mistral3's temperature steps.
        const int64_t n_ctx = 96;
        const std::vector<int32_t> tokens = test::some_tokens(80, static_cast<int>(m->config.n_vocab), 3);
        REQUIRE(static_cast<int64_t>(tokens.size()) >= cuda::kGemmMinTokens);
        const auto want = test::prefill_logits(*reference(*m, KvType::f16, 1, n_ctx), tokens);
        const int64_t nv = m->config.n_vocab;
        // test_cuda.cpp's limit with an F16 cache: 1e-2 of the logits' rms (q and the probabilities in fp16 too)
        CHECK(worst_row_error(test::prefill_logits(*gpu(*m, KvType::f16, 1, n_ctx), tokens), want, nv) < 1e-2);
        CHECK(worst_row_error(test::stepwise_logits(*gpu(*m, KvType::f16, 1, n_ctx), tokens), want, nv) < 1e-2);
        // Without flash attention the prompt takes the decode kernel, one block per (token, head)
        auto plain = gpu(*m, KvType::f16, 1, n_ctx, true, cuda::GemmMode::f32, false);
        CHECK(worst_row_error(test::prefill_logits(*plain, tokens), want, nv) < 1e-2);
    }
}

TEST_CASE("every setting at once on int8 products: no-RoPE layers, YaRN with its scale, the query temperature and "
          "soft-capped scores, in prefill, decode graphs and mixed batches",
          "[cuda]") {
    if (!have_gpu()) return;
    // qwen3 with YaRN, every second layer without RoPE, the temperature rising every 8 positions and scores capped
    // at 1; Q8_0 weights take the int8 products with the attention's output quantized in its launch (head_dim 64).
    ModelConfig c = synthetic_config("qwen3-tiny-yarn");
    c.no_rope_step = 2;
    c.attn_temp_scale = 0.5f;
    c.attn_temp_floor = 8;
    c.attn_logit_softcap = 1.0f;
    auto m = SyntheticModel::make(c, GgmlType::Q8_0, 42);
    const std::vector<int32_t> tokens = test::some_tokens(40, static_cast<int>(c.n_vocab), 5);
    ReferenceBackend r(m->config, m->weights, ReferenceBackendOptions{64, 1, KvType::f32});
    const auto want = test::prefill_logits(r, tokens);
    cuda::CudaBackendOptions o;
    o.n_ctx = 64;
    o.kv_type = KvType::f32;
    o.tuning.gemm = cuda::GemmMode::f32;
    cuda::CudaBackend g(m->config, m->weights, o);
    // The int8 products compute the CPU backend's function: its limit in its measure, max |diff| / max |reference|
    // (cuda_checks.h reference_error)
    const auto got = test::prefill_logits(g, tokens);
    CHECK(test::max_diff(got, want) / test::max_abs(want) < 3e-2);
    cuda::CudaBackend steps(m->config, m->weights, o);
    const auto stepped = test::stepwise_logits(steps, tokens);
    CHECK(test::max_diff(stepped, want) / test::max_abs(want) < 3e-2);
    // Decode steps in company (another slot decoding, a third's prompt in chunks, each token at its own position
    // and temperature) equal the steps alone, as test_cuda_backend.cpp's mixed batches; the prompt's last row is
    // the reference's.
    const auto a = test::some_tokens(8, static_cast<int>(c.n_vocab), 6);
    const auto b = test::some_tokens(8, static_cast<int>(c.n_vocab), 7);
    const auto p = test::some_tokens(20, static_cast<int>(c.n_vocab), 8);
    const test::MixedDecode mixed = test::mixed_decode_steps(
        [&](int64_t n_slots) {
            cuda::CudaBackendOptions so = o;
            so.n_slots = n_slots;
            return std::make_unique<cuda::CudaBackend>(m->config, m->weights, so);
        },
        a, b, p);
    CHECK(relative_error(mixed.mixed, mixed.alone) <= 1e-5);
    ReferenceBackend rp(m->config, m->weights, ReferenceBackendOptions{64, 1, KvType::f32});
    const auto p_want = test::prefill_logits(rp, p);
    const auto p_last = test::rows(p_want, c.n_vocab, 19, 20);
    CHECK(test::max_diff(mixed.prompt_last, p_last) / test::max_abs(p_last) < 3e-2);
}
#endif

}  // namespace test_cuda_arch_features
