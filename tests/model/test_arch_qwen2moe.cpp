// qwen2moe (Qwen1.5-MoE, Qwen2-MoE: qwen2's layers with a mixture of experts weighted by their shares of the softmax
// over all the router's logits, and a shared expert behind a sigmoid gate) against llama.cpp: the synthetic
// qwen2moe-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic qwen2moe-tiny --dtype
// f32|f16 --save FILE` writes it: 3 layers, GQA, Q/K/V biases, 8 experts of 64 features, 2 a token, a shared expert
// of 192 with its gate) regenerated, saved and loaded back, then run on the reference backend and the CPU backend of
// every kernel family this machine has. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's
// vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its
// header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <string>

namespace test_arch_qwen2moe {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

// The limit on max |diff| / range. Measured: at most 3.2e-7 (F32) and 2.7e-4 (F16) on every backend.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-4, 1e-4}, {GgmlType::F16, 1e-3, 1e-3}};


}  // namespace

TEST_CASE("qwen2moe tiny model: the reference and CPU backends give llama.cpp's logits and greedy tokens",
          "[arch][reference][cpu]") {
    test::check_shape_against_llama_cpp("qwen2moe-tiny", kCases, kCtx, false);
    test::check_shape_against_llama_cpp("qwen2moe-tiny", kCases, kCtx, true);
}

TEST_CASE("qwen2moe settings and shared expert are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = test::saved_synthetic("qwen2moe-tiny", GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "qwen2moe" && c.rope == ModelConfig::Rope::neox && c.sliding_window == 0));
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_ff == 192));
    CHECK((c.moe_shared_expert && c.moe_shared_gate && !c.moe_norm_weights));
    const LayerWeights& L = m->weights.layers[1];
    CHECK((L.bq.size() == 128 && L.bk.size() == 64 && L.ffn_gate_inp_shexp.size() == 128));
    CHECK((L.ffn_up.name == "blk.1.ffn_up_shexp.weight" && L.ffn_up.n_rows() == 192));
    // llama.cpp requires the output matrix: a file that ties it to the embeddings is refused.
    auto tied = SyntheticModel::make(synthetic_config("qwen2moe-tiny"), GgmlType::F32, 42);
    tied->weights.output = tied->weights.tok_embd;
    tied->weights.output_tied = true;
    const fs::path file = test::temp_dir("arch_qwen2moe_tied") / "tied.gguf";
    tied->save(file.string());
    CHECK_THROWS_WITH(Model::load(file.string()), Catch::Contains("missing tensor 'output.weight'"));
    const ModelConfig big = synthetic_config("qwen1.5-moe-a2.7b");
    CHECK((big.arch == "qwen2moe" && big.n_expert == 60 && big.n_expert_used == 4 && big.n_ff_exp == 1408 &&
           big.n_ff == 5632 && !big.moe_norm_weights));
}

TEST_CASE("qwen2moe: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("qwen2moe-tiny"), {GgmlType::Q4_0}, kCtx);
}

}  // namespace test_arch_qwen2moe
