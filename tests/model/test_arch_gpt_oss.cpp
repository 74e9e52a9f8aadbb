// gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE) against llama.cpp: the synthetic gpt-oss-tiny model
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic gpt-oss-tiny --dtype f32|f16 --save FILE` writes
// it: 4 layers alternating local (window 8) and global, attention sinks, Q/K/V/O biases, 8 experts of 64 features
// with biased router and products, 4 used, the clamped SwiGLU, YaRN 4x over an original context of 64) regenerated,
// saved and loaded back, then run on the reference backend and the CPU backend of every kernel family this machine
// has. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, no flash
// attention) over the 32 tokens the other architectures' references use, made with
// /work/oracle/dump_logits FILE --tokens "..." -n 24 --logits ... --greedy ....
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>

namespace test_arch_gpt_oss {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

fs::path saved_file(GgmlType type, const std::string& dir_name = "arch_gpt_oss") {
    const fs::path file = test::temp_dir(dir_name + "_" + std::string(type_name(type))) / "gpt-oss-tiny.gguf";
    SyntheticModel::make(synthetic_config("gpt-oss-tiny"), type, 42)->save(file.string());
    return file;
}

// The limit on max |diff| / range. Measured: the CPU backend's every path 3.8e-7 to 4.0e-7 (F32) and 1.2e-4 to
// 1.4e-4 (F16); the reference backend 3.2e-7 and 4.1e-4 (F16: it does not round the products' inputs to fp16).
struct Case {
    GgmlType type;
    double tol;
};
constexpr Case kCases[] = {{GgmlType::F32, 1e-3}, {GgmlType::F16, 1e-3}};

std::string stem(const Case& c) { return fmt::format("gpt-oss-tiny-{}", type_name(c.type)); }

}  // namespace

TEST_CASE("gpt-oss tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    for (const Case& c : kCases) {
        INFO(stem(c));
        auto m = Model::load(saved_file(c.type).string());
        ReferenceBackend b(m->config, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
        test::check_against_llama_cpp(b, stem(c), c.tol);
    }
}

TEST_CASE("gpt-oss tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    for (const Case& c : kCases) {
        // (the local layers' window ring too: the tokens run past the window)
        auto m = Model::load(saved_file(c.type).string());
        test::check_cpu_against_llama_cpp(m->config, m->weights, stem(c), c.tol, kCtx);
    }
}

TEST_CASE("gpt-oss settings, sinks and biases are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = Model::load(saved_file(GgmlType::F16).string());
    const ModelConfig& c = m->config;
    CHECK(c.arch == "gpt-oss");
    CHECK(c.rope == ModelConfig::Rope::neox);
    CHECK(c.ffn_act == ModelConfig::Activation::swiglu_oai);
    CHECK((c.swiglu_alpha == 1.702f && c.swiglu_limit == 7.0f));
    CHECK((c.n_expert == 8 && c.n_expert_used == 4 && c.n_ff_exp == 64 && c.head_dim == 64 && c.n_embd == 128));
    // Local layers 0 and 2 over a window of 8, global layers 1 and 3.
    CHECK(c.sliding_window == 8);
    CHECK((c.layer_is_local(0) && !c.layer_is_local(1) && c.layer_is_local(2) && !c.layer_is_local(3)));
    CHECK((c.rope_yarn && c.rope_freq_scale == 0.25f && c.yarn_n_ctx_orig == 64));
    CHECK(c.rope_mscale == Approx(1.0 + 0.1 * std::log(4.0)));
    CHECK(c.attn_scale == Approx(0.125));
    const LayerWeights& L = m->weights.layers[3];
    CHECK(L.attn_sinks.size() == 4);
    CHECK((L.bq.size() == 256 && L.bk.size() == 128 && L.bv.size() == 128 && L.bo.size() == 128));
    CHECK(L.ffn_gate_inp_b.size() == 8);
    CHECK((L.ffn_gate_exps_b.size() == 8 * 64 && L.ffn_up_exps_b.size() == 8 * 64));
    CHECK(L.ffn_down_exps_b.size() == 8 * 128);
    CHECK(L.experts.size() == 8);
    // The saved model's values, read back: the FFN's norm is the file's post_attention_norm.
    auto made = SyntheticModel::make(synthetic_config("gpt-oss-tiny"), GgmlType::F16, 42);
    const LayerWeights& M = made->weights.layers[3];
    CHECK(L.ffn_norm == M.ffn_norm);
    CHECK(L.attn_sinks == M.attn_sinks);
    CHECK(L.ffn_up_exps_b == M.ffn_up_exps_b);
    CHECK(L.ffn_down_exps_b == M.ffn_down_exps_b);

    // The released shape: gpt-oss-20b.
    const ModelConfig big = synthetic_config("gpt-oss-20b");
    CHECK((big.arch == "gpt-oss" && big.n_embd == 2880 && big.n_layer == 24 && big.n_head == 64 &&
           big.n_head_kv == 8 && big.head_dim == 64 && big.n_expert == 32 && big.n_expert_used == 4 &&
           big.n_ff_exp == 2880 && big.n_vocab == 201088 && big.sliding_window == 128));
}

TEST_CASE("a gpt-oss file without one of its sinks or biases is refused, naming the tensor", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_gpt_oss_bad");
    const ModelConfig config = synthetic_config("gpt-oss-tiny");
    struct Drop {
        const char* tensor;
        void (*drop)(LayerWeights&);
    };
    const Drop drops[] = {
        {"blk.0.attn_sinks.weight", [](LayerWeights& L) { L.attn_sinks.clear(); }},
        {"blk.0.attn_output.bias", [](LayerWeights& L) { L.bo.clear(); }},
        {"blk.0.ffn_gate_inp.bias", [](LayerWeights& L) { L.ffn_gate_inp_b.clear(); }},
        {"blk.0.ffn_gate_exps.bias", [](LayerWeights& L) { L.ffn_gate_exps_b.clear(); }},
        {"blk.0.ffn_up_exps.bias", [](LayerWeights& L) { L.ffn_up_exps_b.clear(); }},
        {"blk.0.ffn_down_exps.bias", [](LayerWeights& L) { L.ffn_down_exps_b.clear(); }},
    };
    for (const Drop& d : drops) {
        INFO(d.tensor);
        auto m = SyntheticModel::make(config, GgmlType::F32, 1);
        d.drop(m->weights.layers[0]);
        const fs::path file = dir / "missing.gguf";
        m->save(file.string());
        CHECK_THROWS_WITH(Model::load(file.string()), Catch::Contains(fmt::format("missing tensor '{}'", d.tensor)));
    }
    // No window: llama.cpp requires attention.sliding_window for gpt-oss.
    auto m = SyntheticModel::make(config, GgmlType::F32, 1);
    m->config.sliding_window = 0;
    const fs::path file = dir / "no-window.gguf";
    m->save(file.string());
    CHECK_THROWS_WITH(Model::load(file.string()),
                      Catch::Contains("missing metadata 'gpt-oss.attention.sliding_window'"));
}

TEST_CASE("gpt-oss: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    // As qwen3moe's test: decode steps of two sequences and a prompt arriving in chunks, one batch per step, the
    // experts' tokens grouped across all of them (past the window of the local layers, with the sinks; MXFP4 as real
    // files' experts).
    test::check_mixed_batches(synthetic_config("gpt-oss-tiny"), {GgmlType::F32, GgmlType::F16, GgmlType::MXFP4}, kCtx);
}

TEST_CASE("quill run, chat and info work end to end on a gpt-oss file", "[arch][cli]") {
    const fs::path file = test::temp_dir("arch_cli_gpt_oss") / "gpt-oss-tiny.gguf";
    auto save = test::run_quill({"bench", "--synthetic", "gpt-oss-tiny", "--dtype", "f16", "--save", file.string(),
                                 "-p", "4", "-n", "2", "-r", "1"});
    REQUIRE(save.status == 0);
    auto info = test::run_quill({"info", "-m", file.string()});
    CHECK(info.status == 0);
    CHECK(info.out.find("gpt-oss") != std::string::npos);
    CHECK(info.out.find("n_expert=8 n_expert_used=4 n_ff_exp=64") != std::string::npos);
    CHECK(info.out.find("sliding_window=8 swa_pattern=2 sinks") != std::string::npos);
    auto run = test::run_quill({"run", "-m", file.string(), "-p", "Why is the sky blue?", "--temp", "0", "-n", "12",
                                "--json"});
    CHECK(run.status == 0);
    CHECK(run.out.find("\"completion_tokens\":12") != std::string::npos);
    auto chat = test::run_quill({"chat", "-m", file.string(), "--temp", "0", "-n", "6"}, "Hello there\nAnd again\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
}

}  // namespace test_arch_gpt_oss
