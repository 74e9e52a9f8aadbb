// granitehybrid (IBM Granite 4.0 H: Mamba-2 layers beside a few attention layers) against llama.cpp: the synthetic
// granitehybrid-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic granitehybrid-tiny
// --dtype f32|f16 --save FILE` writes it: 5 layers, 1 and 3 GQA attention without RoPE, 0, 2 and 4 Mamba-2 of 8
// heads of 32 over 2 groups of B and C of d_state 64, a conv of 4 taps with its bias, Granite's embedding, residual,
// attention and logit multipliers) regenerated, saved and loaded back, then run on the reference backend and the CPU
// backend of every kernel family this machine has. References in tests/data/arch/: llama.cpp (llama-cpp-python
// 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with tests/data/arch/dump_logits.cpp
// (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/error.h"
#include "engine/model/layer_matrices.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/recurrent_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_granitehybrid {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "granitehybrid-tiny";

std::unique_ptr<Model> saved_model(GgmlType type) { return test::saved_synthetic(kShape, type); }

// The limits on max |diff| / range, the reference backend's and the CPU backend's (measured: see the commit).
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 6e-4}};


std::string with_metadata(const fs::path& dir, const std::string& name, const std::function<void(GgufWriter&)>& edit) {
    return test::synthetic_with_metadata(dir, kShape, name, edit);
}

}  // namespace

TEST_CASE("granitehybrid tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("granitehybrid tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

// Granite 4.0 H Tiny's and Small's layers: experts (feed_forward_length wide; the softmax of their logits over the
// top 2 renormalized) beside an ungated shared expert (expert_shared_feed_forward_length), times residual_scale.
TEST_CASE("granitehybrid with experts and a shared expert: both backends give llama.cpp's logits and greedy tokens",
          "[arch][reference][cpu]") {
    // With F16 weights llama.cpp rounds each product's input to fp16 and its 11th greedy token differs (249 in every
    // quill path, 57 in llama.cpp's) while every prompt position stays within 2.1e-4 of the range: the first 10.
    const test::ArchFiles files[] = {{"granitehybrid-moe-tiny", 1e-3, 10}};
    test::check_files_against_llama_cpp(files, kCtx, false);
    test::check_files_against_llama_cpp(files, kCtx, true);
    auto m = test::saved_synthetic("granitehybrid-moe-tiny", GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.n_ff == 96));
    CHECK((c.moe_shared_expert && !c.moe_shared_gate && c.moe_norm_weights));
    CHECK((m->weights.layers[1].ffn_gate.n_rows() == 96 && m->weights.layers[1].ffn_gate_inp_shexp.empty()));
    // Without the shared expert's output the logits leave llama.cpp's.
    Weights unshared = m->weights;
    for (LayerWeights& L : unshared.layers) L.ffn_down = TensorView{};
    ModelConfig no_shared = c;
    no_shared.moe_shared_expert = false;
    ReferenceBackend good(c, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
    ReferenceBackend bad(no_shared, unshared, ReferenceBackendOptions{kCtx, 1, KvType::f32});
    const auto tokens = test::some_tokens(8, static_cast<int>(c.n_vocab), 3);
    const auto want = test::prefill_logits(good, tokens);
    CHECK(test::max_diff(test::prefill_logits(bad, tokens), want) > 1e-2 * test::max_abs(want));
}

TEST_CASE("granitehybrid with experts: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("granitehybrid-moe-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("granitehybrid settings and Mamba-2 tensors are read from the file as llama.cpp reads them",
          "[arch][model]") {
    auto m = saved_model(GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK(c.arch == "granitehybrid");
    CHECK((c.n_layer == 5 && c.mamba2() && c.recurrent() && c.full_attn_interval == 0 && !c.attn_out_gate));
    for (int64_t l = 0; l < 5; ++l) CHECK(c.layer_is_recurrent(l) == (l % 2 == 0));
    // head_count_kv's attention entries; no RoPE (rope.scaling.finetuned false); Granite's multipliers
    CHECK((c.n_head == 4 && c.n_head_kv == 2 && c.head_dim == 32));
    for (int64_t l = 0; l < 5; ++l) CHECK(!c.layer_has_rope(l));
    CHECK((c.embd_scale == 12.0f && c.residual_scale == 0.22f && c.attn_scale == 1.0f / 32 && c.logit_scale == 8.0f));
    // d_state 64 (ssm_head_k), 2 groups (ssm_n_k_heads), 8 heads (ssm_n_v_heads) of 256 / 8 channels
    CHECK((c.ssm_conv == 4 && c.ssm_head_k == 64 && c.ssm_n_k_heads == 2 && c.ssm_n_v_heads == 8 &&
           c.ssm_head_v == 32 && c.ssm_d_inner() == 256 && c.ssm_conv_channels() == 256 + 2 * 2 * 64));
    const LayerWeights& r = m->weights.layers[2];
    CHECK((r.recurrent() && r.wq.data == nullptr && r.ssm_z.data == nullptr));
    CHECK((r.ssm_in.ne[0] == 128 && r.ssm_in.n_rows() == 2 * 256 + 2 * 2 * 64 + 8));
    CHECK((r.ssm_conv1d.size() == 512 * 4 && r.ssm_conv1d_b.size() == 512 && r.ssm_a.size() == 8 &&
           r.ssm_d.size() == 8 && r.ssm_dt.size() == 8 && r.ssm_norm.size() == 256 && r.ffn_norm.size() == 128));
    const auto mats = layer_matrices(r);
    REQUIRE(mats.size() == 2 + 3);
    CHECK(mats[0]->name == "blk.2.ssm_in.weight");
    CHECK(mats[1]->name == "blk.2.ssm_out.weight");
    const LayerWeights& a = m->weights.layers[3];
    CHECK((!a.recurrent() && a.wq.n_rows() == 128 && a.wk.n_rows() == 64 && a.wo.ne[0] == 128));
    // The shapes of the released dense models: 40 layers, every tenth attention.
    const ModelConfig micro = synthetic_config("granite-4.0-h-micro");
    CHECK((micro.n_embd == 2048 && micro.ssm_d_inner() == 4096 && micro.ssm_head_v == 64 && micro.ssm_head_k == 128));
    CHECK((micro.layer_is_recurrent(8) && !micro.layer_is_recurrent(9)));
}

TEST_CASE("granitehybrid: a prompt in one batch gives the logits of its tokens one at a time, bit for bit",
          "[arch][cpu]") {
    test::check_prompt_equals_stepwise(kShape);
}

TEST_CASE("granitehybrid: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("granitehybrid: a slot's Mamba-2 state continues only from where it stands, or starts again at 0",
          "[arch][cpu][reference]") {
    test::check_state_continues_or_restarts(kShape);
}

TEST_CASE("granitehybrid files quill cannot run are refused with one line naming what is missing", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_granitehybrid_refused");
    auto kv_heads = [](std::vector<uint32_t> v) {
        std::vector<GgufValue> a;
        for (uint32_t x : v) a.emplace_back(x);
        return GgufValue::array(GgufType::U32, a);
    };
    const std::vector<test::RefusedMetadata> cases = {
        {"inner", [](GgufWriter& w) { w.set("granitehybrid.ssm.inner_size", uint32_t(384)); },
         "metadata 'granitehybrid.ssm.inner_size' is 384, expected twice embedding_length 128 (as llama.cpp "
         "requires)"},
        {"groups", [](GgufWriter& w) { w.set("granitehybrid.ssm.group_count", uint32_t(3)); },
         "metadata 'granitehybrid.ssm.inner_size' 256 is not a multiple of 'granitehybrid.ssm.time_step_rank' 8, "
         "or that of 'granitehybrid.ssm.group_count' 3"},
        {"kv-heads", [&](GgufWriter& w) { w.set("granitehybrid.attention.head_count_kv", kv_heads({0, 2, 0, 4, 0})); },
         "metadata 'granitehybrid.attention.head_count_kv' differs between two attention layers (2 and 4; quill "
         "supports one value)"},
        {"conv", [](GgufWriter& w) { w.set("granitehybrid.ssm.conv_kernel", uint32_t(0)); },
         "metadata 'granitehybrid.ssm.conv_kernel' is 0, expected 1..64"},
    };
    test::check_refused_metadata(dir, kShape, cases);
    // Another pattern of layers, as head_count_kv says it: 0 and 1 attention, the rest Mamba-2 (whose tensors the
    // file then lacks for layer 1: refused by name, as llama.cpp refuses it).
    const std::string f = with_metadata(dir, "pattern", [&](GgufWriter& w) {
        w.set("granitehybrid.attention.head_count_kv", kv_heads({2, 2, 0, 2, 0}));
    });
    CHECK_THROWS_WITH(Model::load(f), Catch::Contains("missing tensor 'blk.0.attn_q.weight'"));
}

TEST_CASE("quill run, chat and batch work end to end on a granitehybrid file with Granite 4.0's chat template",
          "[arch][cli]") {
    const fs::path dir = test::temp_dir("arch_cli_granitehybrid");
    const fs::path saved = dir / "saved.gguf", file = dir / "granitehybrid-tiny.gguf";
    auto save = test::run_quill({"bench", "--synthetic", kShape, "--dtype", "f16", "--save", saved.string(), "-p", "4",
                                 "-n", "2", "-r", "1"});
    REQUIRE(save.status == 0);
    // The template IBM ships with Granite 4.0 (tests/data/templates/src, rendered byte for byte as Jinja2 does by
    // test_template_corpus.cpp), in the file.
    const fs::path corpus = fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src";
    const std::string tmpl = test::read_file(corpus / "ibm-granite-granite-4.0.jinja");
    test::rewrite_gguf(saved.string(), file.string(), [&](GgufWriter& w) { w.set("tokenizer.chat_template", tmpl); });
    auto info = test::run_quill({"info", file.string()});
    CHECK(info.status == 0);
    CHECK(info.out.find("Mamba-2 in 3 layers, the others attention: conv=4 n_group=2 n_head=8 head_dim=32 "
                        "d_state=64") != std::string::npos);
    auto shown = test::run_quill({"template", "-m", file.string()}, "Hello there\n");
    CHECK(shown.status == 0);
    // (Granite 4.0's default system message, then the turn and the generation prompt)
    CHECK(shown.out.find("professional, accurate, and safe.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>") !=
          std::string::npos);
    CHECK(shown.out.find("<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>") != std::string::npos);
    auto run = test::run_quill({"run", "-m", file.string(), "--device", "auto", "-p", "Why is the sky blue?", "--temp",
                                "0", "-n", "8", "--json"});
    CHECK(run.status == 0);
    CHECK(run.out.find("\"completion_tokens\":8") != std::string::npos);
    auto lookup =
        test::run_quill({"run", "-m", file.string(), "-p", "Why is the sky blue?", "-n", "4", "--lookup", "4"});
    CHECK(lookup.status != 0);
    CHECK(lookup.err.find("--lookup and --draft-model cannot run on granitehybrid models") != std::string::npos);
    auto chat = test::run_quill({"chat", "-m", file.string(), "--temp", "0", "-n", "6"},
                                "Hello there\nAnd again\nOnce more\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
    // Batch: sequences of different lengths side by side give each one's text alone.
    test::check_batch_texts_alone(file.string(), {"a", "The longer prompt of the two here", "mid length one"});
}

}  // namespace test_arch_granitehybrid
