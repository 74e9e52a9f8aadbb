// lfm2 (LFM2, a hybrid of short gated convolution and GQA attention layers) against llama.cpp: the synthetic
// lfm2-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic lfm2-tiny --dtype f32|f16 --save
// FILE` writes it: 5 layers, 0, 2 and 4 short convs of 3 taps, 1 and 3 attention with Q/K norms, 2 KV heads for 4
// query heads, NEOX RoPE; the final norm named token_embd_norm; an output matrix, which real files tie) regenerated,
// saved and loaded back, then run on the reference backend and the CPU backend of every kernel family this machine
// has. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256)
// over the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says how):
// dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/error.h"
#include "engine/model/layer_matrices.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/fault_util.h"
#include "tests/support/recurrent_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace test_arch_lfm2 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: F32 3.1e-7 to 4.5e-7 on
// every backend; F16 4.9e-4 on the reference backend (it does not round the F16 products' inputs to fp16, which
// llama.cpp does), 2.2e-4 to 3.8e-4 on the CPU backend's paths.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1.5e-3, 1.5e-3}};


// attention.head_count_kv as one value a layer
GgufValue kv_heads(std::initializer_list<uint32_t> v) {
    std::vector<GgufValue> a;
    for (uint32_t x : v) a.emplace_back(x);
    return GgufValue::array(GgufType::U32, a);
}

}  // namespace

TEST_CASE("lfm2 tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp("lfm2-tiny", kCases, kCtx, false);
}

TEST_CASE("lfm2 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA", "[arch][cpu]") {
    test::check_shape_against_llama_cpp("lfm2-tiny", kCases, kCtx, true);
}

TEST_CASE("lfm2 settings and short conv tensors are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = test::saved_synthetic("lfm2-tiny", GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK(c.arch == "lfm2");
    CHECK(c.rope == ModelConfig::Rope::neox);
    CHECK((c.n_layer == 5 && c.recurrent() && !c.attn_out_gate && c.full_attn_interval == 0));
    CHECK((c.ssm_conv == 3 && c.ssm_conv_channels() == 128 && c.n_head == 4 && c.n_head_kv == 2 && c.head_dim == 32));
    for (int64_t l = 0; l < 5; ++l) {
        CHECK(c.layer_is_short_conv(l) == (l % 2 == 0));
        CHECK(c.layer_is_recurrent(l) == (l % 2 == 0));
    }
    CHECK(!m->weights.output_tied);
    CHECK(m->weights.output_norm.size() == 128);  // (the file's token_embd_norm)
    const LayerWeights& r = m->weights.layers[4];
    CHECK((r.recurrent() && r.wq.data == nullptr && r.ssm_z.data == nullptr && r.attn_q_norm.empty()));
    CHECK((r.ssm_conv1d.size() == 128 * 3 && r.ssm_in.n_rows() == 3 * 128 && r.ffn_norm.size() == 128));
    const auto mats = layer_matrices(r);
    REQUIRE(mats.size() == 2 + 3);
    CHECK(mats[0]->name == "blk.4.shortconv.in_proj.weight");
    CHECK(mats[1]->name == "blk.4.shortconv.out_proj.weight");
    const LayerWeights& a = m->weights.layers[3];
    CHECK((!a.recurrent() && a.wq.n_rows() == 128 && a.wk.n_rows() == 64 && a.attn_q_norm.size() == 32 &&
           a.attn_k_norm.size() == 32));
}

TEST_CASE("lfm2: a prompt in one batch gives the logits of its tokens one at a time, bit for bit", "[arch][cpu]") {
    test::check_prompt_equals_stepwise("lfm2-tiny");
}

TEST_CASE("lfm2: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("lfm2-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("lfm2: a slot's conv state continues only from where it stands, or starts again at 0",
          "[arch][cpu][reference]") {
    test::check_state_continues_or_restarts("lfm2-tiny");
}

TEST_CASE("lfm2 files whose layers quill cannot follow are refused with one line naming the key", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_lfm2_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"l-cache", [](GgufWriter& w) { w.set("lfm2.shortconv.l_cache", uint32_t(1)); },
         "metadata 'lfm2.shortconv.l_cache' is 1, expected 2..64"},
        {"kv-differ",
         [](GgufWriter& w) {
             w.set("lfm2.attention.head_count_kv", kv_heads({0, 2, 0, 4, 0}));
         },
         "metadata 'lfm2.attention.head_count_kv' differs between two attention layers (2 and 4; quill supports one "
         "KV head count)"},
        {"kv-none",
         [](GgufWriter& w) {
             w.set("lfm2.attention.head_count_kv", kv_heads({0, 0, 0, 0, 0}));
         },
         "metadata 'lfm2.attention.head_count_kv' is 0 at every layer, expected at least one attention layer"},
        {"window", [](GgufWriter& w) { w.set("lfm2.attention.sliding_window", uint32_t(8)); },
         "sliding-window attention ('lfm2.attention.sliding_window') is not supported for lfm2"},
        {"bidirectional", [](GgufWriter& w) { w.set("lfm2.attention.causal", false); },
         "bidirectional attention ('lfm2.attention.causal' false: an embedding model) is not supported for lfm2"},
    };
    test::check_refused_metadata(dir, "lfm2-tiny", cases);
}

TEST_CASE("quill run, chat and batch work end to end on an lfm2 file with LFM2.5-Instruct's chat template",
          "[arch][cli]") {
    const fs::path dir = test::temp_dir("arch_cli_lfm2");
    const std::string file = (dir / "lfm2-tiny.gguf").string();
    auto save = test::run_quill(
        {"bench", "--synthetic", "lfm2-tiny", "--dtype", "f16", "--save", file, "-p", "4", "-n", "2", "-r", "1"});
    REQUIRE(save.status == 0);
    // The template Liquid AI ships with LFM2.5-1.2B-Instruct (tests/data/templates/src, rendered byte for byte as
    // Jinja2 does by test_template_corpus.cpp).
    const std::string tmpl =
        (fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" / "LFM2.5-Instruct.jinja").string();
    auto info = test::run_quill({"info", file});
    CHECK(info.status == 0);
    CHECK(info.out.find("short gated convs at layers 0,2,4, the others attention: conv=3") != std::string::npos);
    auto prompt = test::run_quill({"template", "-m", file, "--chat-template", tmpl});
    CHECK(prompt.status == 0);
    CHECK(prompt.out == "<s><|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
    // --device auto: on the CPU (the CUDA backend refuses the short convs with one line where there is a GPU).
    test::check_run_auto_on_cpu(file, tmpl,
                                "the CUDA backend cannot run lfm2 models (recurrent short convolution layers)");
    // Layers split over two CPU ranges (each with its layers' conv windows) give the text of one backend.
    test::check_split_over_two_cpus(file, "3 of 5 layers on cpu (layers 0-2");
    auto lookup = test::run_quill({"run", "-m", file, "-p", "Why is the sky blue?", "-n", "4", "--lookup", "4"});
    CHECK(lookup.status != 0);
    CHECK(lookup.err.find("--lookup and --draft-model cannot run on lfm2 models") != std::string::npos);
    auto chat = test::run_quill({"chat", "-m", file, "--chat-template", tmpl, "--temp", "0", "-n", "6"},
                                "Hello there\nAnd again\nOnce more\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
    // Batch: sequences of different lengths side by side give each one's text alone.
    test::check_batch_texts_alone(file, {"a", "The longer prompt of the two here", "mid length one"});
}

TEST_CASE("lfm2: three chat turns give the replies of the conversation run from position 0 each turn, and "
          "continue the state where it stands", "[arch][chat]") {
    test::check_chat_turns_continue_state(*test::saved_synthetic("lfm2-tiny", GgmlType::F32));
}

}  // namespace test_arch_lfm2
