// qwen3moe (mixture of experts) against llama.cpp: the synthetic qwen3moe-tiny model (engine/model/synthetic.cpp,
// seed 42, as `quill bench --synthetic qwen3moe-tiny --dtype f32|f16 --save FILE` writes it: 3 layers, 8 experts of
// 64 features, 2 used, qwen3's Q/K norms) regenerated, saved and loaded back, then run on the reference backend and
// the CPU backend of every kernel family this machine has. References in tests/data/arch/: llama.cpp
// (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with
// /work/oracle/dump_logits FILE --tokens "..." -n 24 --logits ... --greedy ....
#include "engine/error.h"
#include "engine/model/layer_matrices.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "engine/runtime/bench.h"
#include "tests/support/arch_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

namespace test_arch_qwen3moe {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

std::unique_ptr<Model> saved_model(GgmlType type) {
    const fs::path dir = test::temp_dir("arch_qwen3moe_" + std::string(type_name(type)));
    const fs::path file = dir / "qwen3moe-tiny.gguf";
    SyntheticModel::make(synthetic_config("qwen3moe-tiny"), type, 42)->save(file.string());
    return Model::load(file.string());
}

// The limit on max |diff| / range. Measured: the CPU backend's every path 3.6e-7 (F32) and 2.1e-4 (F16: both round
// the F16 products' inputs to fp16, at other points); the reference backend 3.0e-7 and 2.9e-4 (F16: it does not
// round them).
struct Case {
    GgmlType type;
    double tol;
};
constexpr Case kCases[] = {{GgmlType::F32, 1e-3}, {GgmlType::F16, 1e-3}};

std::string stem(const Case& c) { return fmt::format("qwen3moe-tiny-{}", type_name(c.type)); }

}  // namespace

TEST_CASE("qwen3moe tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    for (const Case& c : kCases) {
        INFO(stem(c));
        auto m = saved_model(c.type);
        ReferenceBackend b(m->config, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
        test::check_against_llama_cpp(b, stem(c), c.tol);
    }
}

TEST_CASE("qwen3moe tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    for (const Case& c : kCases) {
        auto m = saved_model(c.type);
        test::check_cpu_against_llama_cpp(m->config, m->weights, stem(c), c.tol, kCtx);
    }
}

TEST_CASE("qwen3moe settings and expert tensors are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = saved_model(GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK(c.arch == "qwen3moe");
    CHECK(c.rope == ModelConfig::Rope::neox);
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.head_dim == 64));
    const LayerWeights& L = m->weights.layers[2];
    CHECK(L.attn_q_norm.size() == 64);
    CHECK(L.ffn_gate.data == nullptr);
    CHECK(L.ffn_gate_inp.type == GgmlType::F32);
    REQUIRE(L.experts.size() == 8);
    // Expert e: the e-th matrix of each 3-D tensor, in place in the file.
    const ExpertWeights& e3 = L.experts[3];
    CHECK((e3.gate.ne[0] == 128 && e3.gate.n_rows() == 64 && e3.down.ne[0] == 64 && e3.down.n_rows() == 128));
    CHECK(e3.gate.data == L.ffn_gate_exps.data + 3 * 64 * e3.gate.row_bytes());
    CHECK(e3.up.data == L.ffn_up_exps.data + 3 * 64 * e3.up.row_bytes());
    CHECK(e3.down.data == L.ffn_down_exps.data + 3 * 128 * e3.down.row_bytes());
    CHECK(e3.down.name == "blk.2.ffn_down_exps.weight (expert 3)");
    // The layer's matrices: attention's four, the router, each expert's three.
    const auto mats = layer_matrices(L);
    REQUIRE(mats.size() == 4 + 1 + 3 * 8);
    CHECK(mats[4]->name == "blk.2.ffn_gate_inp.weight");
    CHECK(mats[5 + 3 * 3 + 2] == &e3.down);
    // A decode step reads 2 of the 8 experts: the benchmark's bytes count a quarter of the experts' tensors.
    size_t bytes = m->weights.output.n_bytes;
    for (const LayerWeights& l : m->weights.layers)
        bytes += l.wq.n_bytes + l.wk.n_bytes + l.wv.n_bytes + l.wo.n_bytes + l.ffn_gate_inp.n_bytes +
                 (l.ffn_gate_exps.n_bytes + l.ffn_up_exps.n_bytes + l.ffn_down_exps.n_bytes) / 4;
    CHECK(decode_weight_bytes(m->weights) == bytes);

    // The released shape: Qwen3-30B-A3B.
    const ModelConfig big = synthetic_config("qwen3-30b-a3b");
    CHECK((big.arch == "qwen3moe" && big.n_embd == 2048 && big.n_layer == 48 && big.n_head == 32 &&
           big.n_head_kv == 4 && big.head_dim == 128 && big.n_expert == 128 && big.n_expert_used == 8 &&
           big.n_ff_exp == 768 && big.n_vocab == 151936));
}

TEST_CASE("a file whose experts' tensors or counts are wrong is refused, naming the key or tensor", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_qwen3moe_bad");
    // A llama file (Mixtral's architecture name) with experts: not supported.
    ModelConfig llama = synthetic_config("qwen3moe-tiny");
    llama.arch = "llama";
    const fs::path mixtral = dir / "llama-experts.gguf";
    SyntheticModel::make(llama, GgmlType::F32, 1)->save(mixtral.string());
    CHECK_THROWS_WITH(Model::load(mixtral.string()), Catch::Contains("of architecture 'llama' are not supported"));
    // More experts used than the file has.
    auto moe = SyntheticModel::make(synthetic_config("qwen3moe-tiny"), GgmlType::F32, 1);
    moe->config.n_expert_used = 9;
    const fs::path used = dir / "used.gguf";
    moe->save(used.string());
    CHECK_THROWS_WITH(Model::load(used.string()), Catch::Contains("'qwen3moe.expert_used_count' is 9, expected 1..8"));
    // An expert width the tensors do not have.
    moe->config.n_expert_used = 2;
    moe->config.n_ff_exp = 32;
    const fs::path width = dir / "width.gguf";
    moe->save(width.string());
    CHECK_THROWS_WITH(Model::load(width.string()), Catch::Contains("tensor 'blk.0.ffn_gate_exps.weight' has shape "
                                                                   "[128, 64, 8], expected [128, 32, 8]"));
}

TEST_CASE("qwen3moe: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    // Decode steps of two sequences and a prompt arriving in chunks, in one batch per step, the experts' tokens
    // grouped across all of them: each decode step's logits equal its own alone, bit for bit (the routing and each
    // expert's products are a token's own; its expert outputs are summed in the same order: three used, so that the
    // order shows in the sum's bits).
    ModelConfig config = synthetic_config("qwen3moe-tiny");
    config.n_expert_used = 3;
    test::check_mixed_batches(config, {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("quill run and quill chat work end to end on a qwen3moe file", "[arch][cli]") {
    const fs::path file = test::temp_dir("arch_cli_qwen3moe") / "qwen3moe-tiny.gguf";
    auto save = test::run_quill({"bench", "--synthetic", "qwen3moe-tiny", "--dtype", "f16", "--save", file.string(),
                                 "-p", "4", "-n", "2", "-r", "1"});
    REQUIRE(save.status == 0);
    auto info = test::run_quill({"info", "-m", file.string()});
    CHECK(info.status == 0);
    CHECK(info.out.find("n_expert=8 n_expert_used=2 n_ff_exp=64") != std::string::npos);
    auto run = test::run_quill({"run", "-m", file.string(), "-p", "Why is the sky blue?", "--temp", "0", "-n", "8",
                                "--json"});
    CHECK(run.status == 0);
    CHECK(run.out.find("\"completion_tokens\":8") != std::string::npos);
    auto chat = test::run_quill({"chat", "-m", file.string(), "--temp", "0", "-n", "6"}, "Hello there\nAnd again\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
}

}  // namespace test_arch_qwen3moe
