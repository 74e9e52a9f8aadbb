// Dense architectures against llama.cpp: glm4 (GLM-4-0414, GLM-Z1), granite (IBM Granite 3.x dense), olmo2 (OLMo 2,
// and OLMo 3 as olmo3-tiny),
// exaone4 (EXAONE 4.0), ernie4_5 (ERNIE 4.5 0.3B) and seed_oss (Seed-OSS). The synthetic <arch>-tiny models
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic SHAPE --dtype f32|f16 --save FILE` writes them)
// saved and loaded back, then run on the reference backend and the CPU backend of every kernel family this machine
// has. glm4: partial rotary dims in adjacent pairs, Q/K/V biases, gate and up in one matrix, norms after the attention
// and the FFN; granite: embedding, residual, attention and logit multipliers; olmo2: no input norms, norms after each
// block, Q and K normalized over the whole projection (olmo3-tiny: a window of 8 on three layers in four, YaRN on the
// fourth only); exaone4: no input norms, post-norms, Q/K norms per head, a
// window of 8 on three layers in four and no RoPE on the fourth, RoPE divisors (64 layers: llama.cpp gives exaone4
// its sliding-window layers in the 32B's depth only); ernie4_5: llama's layers, adjacent RoPE pairs, a tied output;
// seed_oss: Q/K/V biases, a head size apart from n_embd / n_head, the FFN's norm named post_attention_norm.
// References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256, one
// thread) over the 32 tokens of tests/data/arch/dump_logits.cpp's header, which made them.
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/fault_util.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>

namespace test_arch_dense {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;  // llama.cpp's context for the references

// The limit on max |diff| / range per file, on the reference backend and every CPU path: 1e-5 with F32 weights
// (measured at most 1.5e-6 everywhere: float summation order), and with F16 weights each architecture's own. Measured
// with F16: glm4 5.1e-4, granite 1.6e-4, olmo2 5.5e-4, olmo3 4.9e-4, ernie4_5 3.2e-4, seed_oss 2.6e-4 and exaone4
// 1.6e-3: llama.cpp rounds every F16 product's input to fp16, as the CPU backend does at other points and the
// reference backend does not, and exaone4-tiny's 64 layers add that up.
constexpr test::ArchFiles kArchFiles[] = {{"glm4-tiny", 1e-3},     {"granite-tiny", 1e-3}, {"olmo2-tiny", 1e-3},
                                           {"olmo3-tiny", 1e-3},    {"exaone4-tiny", 3e-3}, {"ernie4_5-tiny", 1e-3},
                                           {"seed_oss-tiny", 1e-3}};

// The F32 model of `shape` with its metadata edited (or a tensor added), saved as name.gguf.
std::string with_metadata(const std::string& shape, const std::string& name,
                          const std::function<void(GgufWriter&)>& edit) {
    const fs::path dir = test::temp_dir("arch_dense_edits");
    const fs::path src = dir / (shape + ".gguf");
    if (!fs::exists(src)) SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 42)->save(src.string());
    const std::string path = (dir / (name + ".gguf")).string();
    test::rewrite_gguf(src.string(), path, edit);
    return path;
}

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in.good());
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST_CASE("glm4, granite, olmo2, exaone4, ernie4_5 and seed_oss tiny models: the reference backend gives "
          "llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_files_against_llama_cpp(kArchFiles, kCtx, false);
}

TEST_CASE("glm4, granite, olmo2, exaone4, ernie4_5 and seed_oss tiny models: the CPU backend gives llama.cpp's "
          "logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_files_against_llama_cpp(kArchFiles, kCtx, true);
}

TEST_CASE("glm4, granite, olmo2, exaone4, ernie4_5 and seed_oss settings are read from the file as llama.cpp reads "
          "them",
          "[arch][model]") {
    auto g = test::saved_synthetic("glm4-tiny", GgmlType::F32);
    CHECK(g->config.rope == ModelConfig::Rope::adjacent);
    CHECK((g->config.n_rot == 16 && g->config.head_dim == 32));
    CHECK(g->config.input_norms);
    const LayerWeights& gl = g->weights.layers[2];
    CHECK((gl.bq.size() == 128 && gl.bk.size() == 64 && gl.bv.size() == 64));
    CHECK((gl.attn_post_norm.size() == 128 && gl.ffn_post_norm.size() == 128));
    CHECK(gl.ffn_gate_up.n_rows() == 384);  // gate and up in one matrix, gate first, as phi3's
    CHECK(gl.ffn_up.data == gl.ffn_gate.data + 192 * gl.ffn_gate.row_bytes());
    CHECK(!g->weights.output_tied);

    auto gr = test::saved_synthetic("granite-tiny", GgmlType::F32);
    const ModelConfig& grc = gr->config;
    CHECK(grc.rope == ModelConfig::Rope::adjacent);
    CHECK((grc.embd_scale == 12.0f && grc.residual_scale == 0.22f && grc.logit_scale == 8.0f));
    CHECK(grc.attn_scale == 0.015625f);
    CHECK(grc.layer_has_rope(0));

    auto o = test::saved_synthetic("olmo2-tiny", GgmlType::F32);
    CHECK(o->config.rope == ModelConfig::Rope::neox);
    CHECK(!o->config.input_norms);
    const LayerWeights& ol = o->weights.layers[1];
    CHECK((ol.attn_norm.empty() && ol.ffn_norm.empty()));
    CHECK((ol.attn_q_norm.size() == 128 && ol.attn_k_norm.size() == 64));  // the whole Q and K
    CHECK((ol.attn_post_norm.size() == 128 && ol.ffn_post_norm.size() == 128));
    CHECK((o->config.sliding_window == 0 && !o->config.two_ropes()));
    // OLMo 3: the window on layers 0-2 (the pattern array its converter writes), YaRN on layer 3 alone
    auto o3 = test::saved_synthetic("olmo3-tiny", GgmlType::F32);
    const ModelConfig& o3c = o3->config;
    CHECK((o3c.sliding_window == 8 && o3c.swa_pattern == 4 && o3c.rope_yarn && o3c.rope_freq_scale == 0.25f));
    CHECK((o3c.rope_freq_scale_local == 1.0f && o3c.layer_rope_mscale(true) == 1.0f && o3c.two_ropes()));
    CHECK(o3c.layer_rope_mscale(false) == Approx(1.0 + 0.1 * std::log(4.0)));
    CHECK((o3c.layer_is_local(2) && !o3c.layer_is_local(3)));

    auto e = test::saved_synthetic("exaone4-tiny", GgmlType::F32);
    const ModelConfig& ec = e->config;
    CHECK(ec.rope == ModelConfig::Rope::neox);
    CHECK((!ec.input_norms && ec.n_layer == 64 && ec.sliding_window == 8 && ec.swa_pattern == 4));
    for (int64_t l : {0, 1, 2, 3, 62, 63}) {
        INFO("layer " << l);
        CHECK(ec.layer_is_local(l) == (l % 4 != 3));
        CHECK(ec.layer_has_rope(l) == ec.layer_is_local(l));  // the global layers rotate nothing
    }
    CHECK(e->weights.rope_freqs.size() == 16);
    CHECK(e->weights.layers[5].attn_q_norm.size() == 32);

    // The released models' shapes (bench --synthetic NAME).
    const ModelConfig g9 = synthetic_config("glm-4-9b");
    CHECK((g9.arch == "glm4" && g9.n_layer == 40 && g9.n_head_kv == 2 && g9.n_rot == 64 && g9.n_ff == 13696));
    const ModelConfig gr2 = synthetic_config("granite-3.3-2b");
    CHECK((gr2.arch == "granite" && gr2.n_embd == 2048 && gr2.n_layer == 40 && gr2.n_vocab == 49159));
    CHECK(synthetic_config("olmo-2-7b").n_vocab == 100352);
    CHECK(synthetic_config("olmo-3-7b").sliding_window == 4096);
    CHECK(synthetic_config("exaone-4.0-1.2b").sliding_window == 0);

    auto er = test::saved_synthetic("ernie4_5-tiny", GgmlType::F32);
    CHECK((er->config.rope == ModelConfig::Rope::adjacent && er->weights.output_tied));
    auto so = test::saved_synthetic("seed_oss-tiny", GgmlType::F32);
    CHECK((so->config.rope == ModelConfig::Rope::neox && so->config.head_dim == 48));
    const LayerWeights& sl = so->weights.layers[0];
    CHECK((sl.bq.size() == 192 && sl.bk.size() == 96 && sl.bv.size() == 96 && sl.bo.empty()));
    CHECK(sl.ffn_norm.size() == 128);  // (the file's post_attention_norm)
    CHECK(sl.attn_post_norm.empty());
    CHECK(synthetic_config("ernie-4.5-0.3b").n_layer == 18);
    CHECK(synthetic_config("seed-oss-36b").n_head == 80);
}

TEST_CASE("olmo3-tiny fails llama.cpp's logits with its local layers scaled as the global one or without the window",
          "[arch][model]") {
    // (the checks above can fail: each feature turned off leaves llama.cpp's logits by far more than the 1e-5 limit)
    const std::pair<const char*, std::function<void(ModelConfig&, Weights&)>> kMutants[] = {
        {"local layers with YaRN", [](ModelConfig& c, Weights&) {
             c.rope_local_plain = false;
             c.rope_freq_scale_local = c.rope_freq_scale;
         }},
        {"local layers with YaRN's magnitude only", [](ModelConfig& c, Weights&) { c.rope_local_plain = false; }},
        {"no window", [](ModelConfig& c, Weights&) { c.sliding_window = 0; }},
    };
    for (const auto& [what, mutate] : kMutants) {
        INFO(what);
        for (double e : test::mutant_error("olmo3-tiny", kCtx, mutate)) CHECK(e > 1e-3);
    }
}

TEST_CASE("glm4, granite, olmo2, exaone4, ernie4_5 and seed_oss files with features quill lacks are refused in one "
          "line naming them",
          "[arch][model]") {
    auto refused = [](const std::string& path, const std::string& what) {
        INFO(path);
        try {
            Model::load(path);
            FAIL("loaded");
        } catch (const FileError& e) {
            CHECK_THAT(e.what(), Catch::Contains(what));
        }
    };
    refused(with_metadata("glm4-tiny", "glm4-nextn",
                          [](GgufWriter& w) { w.set("glm4.nextn_predict_layers", uint32_t(1)); }),
            "NextN prediction layers ('glm4.nextn_predict_layers') is not supported for glm4");
    refused(with_metadata("granite-tiny", "granite-zero-logit-scale",
                          [](GgufWriter& w) { w.set("granite.logit_scale", 0.0f); }),
            "metadata 'granite.logit_scale' is 0, expected");
    refused(with_metadata("olmo3-tiny", "olmo3-odd-pattern",
                          [](GgufWriter& w) {
                              w.set("olmo2.attention.sliding_window_pattern",
                                    GgufValue::array(GgufType::BOOL, {GgufValue(true), GgufValue(false),
                                                                      GgufValue(true), GgufValue(true)}));
                          }),
            "metadata 'olmo2.attention.sliding_window_pattern' marks the local layers in a pattern quill does not "
            "support");
    refused(with_metadata("exaone4-tiny", "exaone4-nextn",
                          [](GgufWriter& w) { w.set("exaone4.nextn_predict_layers", uint32_t(1)); }),
            "NextN prediction layers ('exaone4.nextn_predict_layers') is not supported for exaone4");
    // an output bias: ernie4_5's llama.cpp loads and ignores it, seed_oss's has none
    for (const char* shape : {"ernie4_5-tiny", "seed_oss-tiny"}) {
        refused(with_metadata(shape, std::string(shape) + "-bo",
                              [](GgufWriter& w) {
                                  w.add_tensor("blk.0.attn_output.bias", GgmlType::F32, {128},
                                               std::vector<uint8_t>(128 * sizeof(float)));
                              }),
                "tensor 'blk.0.attn_output.bias' is not used by quill's");
    }
    // granite's rope.scaling.finetuned false turns RoPE off, as llama.cpp reads it
    auto no_rope = Model::load(with_metadata("granite-tiny", "granite-no-rope", [](GgufWriter& w) {
        w.set("granite.rope.scaling.finetuned", false);
    }));
    CHECK((!no_rope->config.layer_has_rope(0) && !no_rope->config.layer_has_rope(2)));
    // exaone4 with fewer layers than the 32B's 64: a window in the file is ignored, as llama.cpp ignores it
    const ModelConfig shallow = ModelConfig::from_gguf(GgufFile::open(with_metadata(
        "exaone4-tiny", "exaone4-30", [](GgufWriter& w) { w.set("exaone4.block_count", uint32_t(30)); })));
    CHECK((shallow.sliding_window == 0 && shallow.layer_has_rope(3)));
}

TEST_CASE("quill run and quill chat work end to end on glm4, granite, olmo2, exaone4, ernie4_5 and seed_oss files",
          "[arch][cli]") {
    const fs::path corpus = fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src";
    // Each file with its family's published template where llama.cpp's corpus (or GLM-Z1's) has one, and what the
    // generation prompt of that template ends with.
    struct Cli {
        const char* shape;
        const char* tmpl;  // a file of tests/data/templates/src, or nullptr: the synthetic file's own
        const char* prompt_end;
    };
    const Cli kFiles[] = {{"glm4-tiny", "THUDM-GLM-Z1-9B-0414.jinja", "<|assistant|>\n<think>"},
                          {"granite-tiny", "ibm-granite-granite-3.3-2B-Instruct.jinja",
                           "<|start_of_role|>assistant<|end_of_role|>"},
                          {"olmo2-tiny", nullptr, "<|im_start|>assistant\n"},
                          {"olmo3-tiny", nullptr, "<|im_start|>assistant\n"},
                          {"exaone4-tiny", nullptr, "<|im_start|>assistant\n"},
                          {"ernie4_5-tiny", nullptr, "<|im_start|>assistant\n"},
                          {"seed_oss-tiny", "ByteDance-Seed-OSS.jinja", "<seed:bos>assistant\n"}};
    for (const Cli& f : kFiles) {
        INFO(f.shape);
        const fs::path dir = test::temp_dir(std::string("arch_cli_") + f.shape);
        const fs::path saved = dir / "saved.gguf", file = dir / (std::string(f.shape) + ".gguf");
        auto save = test::run_quill({"bench", "--synthetic", f.shape, "--dtype", "f16", "--save", saved.string(), "-p",
                                     "4", "-n", "2", "-r", "1"});
        REQUIRE(save.status == 0);
        const std::string tmpl = f.tmpl ? read_text(corpus / f.tmpl) : "";
        test::rewrite_gguf(saved.string(), file.string(), [&](GgufWriter& w) {
            if (f.tmpl) w.set("tokenizer.chat_template", tmpl);
        });
        auto shown = test::run_quill({"template", "-m", file.string()}, "Hello there\n");
        CHECK(shown.status == 0);
        CHECK(shown.out.find(f.prompt_end) != std::string::npos);
        auto run = test::run_quill({"run", "-m", file.string(), "-p", "Why is the sky blue?", "--temp", "0", "-n",
                                    "8", "--json"});
        CHECK(run.status == 0);
        CHECK(run.out.find("\"completion_tokens\":8") != std::string::npos);
        auto chat =
            test::run_quill({"chat", "-m", file.string(), "--temp", "0", "-n", "6"}, "Hello there\nAnd again\n");
        CHECK(chat.status == 0);
        CHECK(chat.err.find("error") == std::string::npos);
    }
}

TEST_CASE("glm4, granite, olmo2 and exaone4: a sequence's decode steps give the same logits in mixed batches as alone",
          "[arch][cpu]") {
    // The blocks without input norms (olmo2, exaone4: the products read the residual stream, quantized in the
    // product rather than in the norm's section), the residual multiplier (granite), the fused gate/up (glm4), two
    // RoPE tables (olmo3).
    for (const char* shape : {"glm4-tiny", "granite-tiny", "olmo2-tiny", "olmo3-tiny", "exaone4-tiny"}) {
        INFO(shape);
        test::check_mixed_batches(synthetic_config(shape), {GgmlType::F32, GgmlType::Q8_0}, 64);
    }
}

}  // namespace test_arch_dense
