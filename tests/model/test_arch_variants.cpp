// Architectures that run as another, against llama.cpp: exaone (EXAONE 3.x: llama's layers in NEOX RoPE pairs), the
// language models of vision-language families: qwen2vl (Qwen2-VL, Qwen2.5-VL), qwen3vl and qwen3vlmoe (Qwen3-VL), run
// as qwen2, qwen3 and qwen3moe with M-RoPE (rope.dimension_sections), and glm4 with M-RoPE (GLM-4.1V: NEOX pairs
// where plain glm4 rotates adjacent ones; glm4v-tiny's sections 2, 2, 2, 2 of 8 pairs leave pairs 6 and 7 still). For
// text llama.cpp gives a token the same temporal, height and width positions and 0 as the extra one, so the pairs of
// the extra section never rotate: the Qwen tiny shapes put 4 pairs in each of the four sections (interleaved for
// Qwen3-VL), so that pairs 12-15 and 28-31 of 32 keep still and change the logits. Their image features (deepstack
// layers) add nothing to text. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy,
// CPU, KV f32, n_ctx 256, one thread) over the 32 tokens of tests/data/arch/dump_logits.cpp's header, which made them.
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>

namespace test_arch_variants {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;  // llama.cpp's context for the references

// The limit on max |diff| / range: 1e-5 with F32 weights (measured at most 4e-7 on every path: float summation
// order), 1e-3 with F16 (measured 1.6e-4 to 5.5e-4: llama.cpp rounds each F16 product's input to fp16, as the
// reference backend does not).
constexpr test::ArchFiles kFiles[] = {{"qwen2vl-tiny", 1e-3}, {"qwen3vl-tiny", 1e-3}, {"qwen3vlmoe-tiny", 1e-3},
                                       {"glm4v-tiny", 1e-3},   {"exaone-tiny", 1e-3}};

// The largest max |diff| / range over the prompt's positions between b's logits and llama.cpp's (STEM).
double worst_against_llama_cpp(Backend& b, const std::string& stem) {
    const test::RefLogits ref = test::read_ref_logits(test::arch_ref_path(stem + ".prompt_logits.txt"));
    const int64_t nv = b.config().n_vocab;
    const std::vector<float> logits = test::prefill_logits(b, ref.tokens);
    double worst = 0;
    for (size_t p = 0; p < ref.tokens.size(); ++p) {
        const auto [lo, hi] = std::minmax_element(ref.logits[p].begin(), ref.logits[p].end());
        worst = std::max(worst, test::max_diff(test::rows(logits, nv, p, p + 1), ref.logits[p]) / (*hi - *lo));
    }
    return worst;
}

}  // namespace

TEST_CASE("exaone, qwen2vl, qwen3vl, qwen3vlmoe and glm4 M-RoPE tiny models: the reference backend gives "
          "llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_files_against_llama_cpp(kFiles, kCtx, false);
}

TEST_CASE("exaone, qwen2vl, qwen3vl, qwen3vlmoe and glm4 M-RoPE tiny models: the CPU backend gives llama.cpp's "
          "logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_files_against_llama_cpp(kFiles, kCtx, true);
}

TEST_CASE("M-RoPE's extra section keeps its pairs still for text, and NEOX pairs are NEOX: else llama.cpp's logits "
          "are missed",
          "[arch][reference]") {
    for (const char* shape : {"qwen2vl-tiny", "qwen3vl-tiny", "qwen3vlmoe-tiny"}) {
        INFO(shape);
        auto m = test::saved_synthetic(shape, GgmlType::F32);
        ModelConfig rotated = m->config;
        std::fill(std::begin(rotated.rope_sections), std::end(rotated.rope_sections), 0);
        ReferenceBackend good(m->config, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
        ReferenceBackend bad(rotated, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
        const std::string stem = std::string(shape) + "-f32";
        CHECK(worst_against_llama_cpp(good, stem) <= 1e-5);
        CHECK(worst_against_llama_cpp(bad, stem) > 1e-3);
    }
    // GLM-4.1V's M-RoPE and EXAONE 3.x rotate NEOX pairs, not glm4's and llama's adjacent ones
    for (const char* shape : {"glm4v-tiny", "exaone-tiny"}) {
        INFO(shape);
        auto g = test::saved_synthetic(shape, GgmlType::F32);
        ModelConfig adjacent = g->config;
        adjacent.rope = ModelConfig::Rope::adjacent;
        ReferenceBackend bad(adjacent, g->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
        CHECK(worst_against_llama_cpp(bad, std::string(shape) + "-f32") > 1e-3);
    }
}

TEST_CASE("exaone, qwen2vl, qwen3vl, qwen3vlmoe and glm4 M-RoPE settings are read from the file as llama.cpp reads "
          "them",
          "[arch][model]") {
    struct Want {
        const char* shape;
        const char* file_arch;
        const char* arch;
        bool interleaved;
        std::vector<int64_t> still;
    };
    const std::vector<int64_t> four{12, 13, 14, 15, 28, 29, 30, 31};
    for (const Want& w : {Want{"qwen2vl-tiny", "qwen2vl", "qwen2", false, four},
                          Want{"qwen3vl-tiny", "qwen3vl", "qwen3", true, four},
                          Want{"qwen3vlmoe-tiny", "qwen3vlmoe", "qwen3moe", true, four},
                          Want{"glm4v-tiny", "", "glm4", false, {6, 7}},
                          Want{"exaone-tiny", "exaone", "llama", false, {}}}) {
        INFO(w.shape);
        auto m = test::saved_synthetic(w.shape, GgmlType::F32);
        const ModelConfig& c = m->config;
        CHECK((c.file_arch == w.file_arch && c.arch == w.arch));
        CHECK(c.gguf_arch() == (*w.file_arch ? w.file_arch : w.arch));
        CHECK(c.rope == ModelConfig::Rope::neox);
        CHECK(c.rope_sections_interleaved == w.interleaved);
        std::vector<int64_t> still;
        for (int64_t i = 0; i < c.n_rot / 2; ++i)
            if (c.rope_pair_still(i)) still.push_back(i);
        CHECK(still == w.still);
        const std::vector<double> f = m->weights.rope_inv_freq(c, false);
        for (size_t i = 0; i < f.size(); ++i) CHECK((f[i] == 0.0) == std::count(still.begin(), still.end(), i));
    }
    CHECK(test::saved_synthetic("qwen2vl-tiny", GgmlType::F32)->weights.layers[0].bk.size() == 64);
    CHECK(test::saved_synthetic("qwen3vlmoe-tiny", GgmlType::F32)->config.n_expert == 8);
    // The released models' sections: Qwen3-VL's interleaved 24, 20, 20 of 64 pairs leave pairs 61 and 62 to the
    // extra section (as ggml's IMROPE reads them); Qwen2.5-VL's 16, 24, 24 rotate every pair.
    const ModelConfig q3 = synthetic_config("qwen3-vl-8b");
    std::vector<int64_t> still;
    for (int64_t i = 0; i < q3.n_rot / 2; ++i)
        if (q3.rope_pair_still(i)) still.push_back(i);
    CHECK(still == std::vector<int64_t>{61, 62});
    const ModelConfig q2 = synthetic_config("qwen2.5-vl-7b");
    for (int64_t i = 0; i < q2.n_rot / 2; ++i) CHECK(!q2.rope_pair_still(i));
    CHECK((q2.n_layer == 28 && q2.n_head_kv == 4 && q3.n_layer == 36 && q3.n_ff == 12288));
    // GLM-4.1V's 8, 12, 12 sections of 32 pairs rotate every pair; sections whose temporal or height one is 0 are no
    // M-RoPE for llama.cpp's glm4 (adjacent pairs, as without them)
    const ModelConfig g41 = synthetic_config("glm-4.1v-9b");
    CHECK((g41.rope == ModelConfig::Rope::neox && g41.n_rot == 64));
    for (int64_t i = 0; i < g41.n_rot / 2; ++i) CHECK(!g41.rope_pair_still(i));
    const fs::path dir = test::temp_dir("arch_vl_glm4_sections");
    for (const std::vector<int32_t>& s : {std::vector<int32_t>{0, 0, 0, 0}, std::vector<int32_t>{8, 0, 0, 0}}) {
        auto edit = [&](GgufWriter& w) {
            std::vector<GgufValue> v;
            for (int32_t x : s) v.emplace_back(x);
            w.set("glm4.rope.dimension_sections", GgufValue::array(GgufType::I32, v));
        };
        auto m = Model::load(test::synthetic_with_metadata(dir, "glm4-tiny", fmt::format("s{}", s[0]), edit));
        CHECK(m->config.rope == ModelConfig::Rope::adjacent);
        CHECK(m->config.rope_sections[0] == 0);
    }
}

TEST_CASE("qwen3vl files whose M-RoPE sections are not integers or give text no pair are refused in one line",
          "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_vl_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"float-sections",
         [](GgufWriter& w) {
             std::vector<GgufValue> s{1.0f, 1.0f, 1.0f, 1.0f};
             w.set("qwen3vl.rope.dimension_sections", GgufValue::array(GgufType::F32, s));
         },
         "metadata 'qwen3vl.rope.dimension_sections' is not an array of 1 to 4 int32"},
        {"extra-only",
         [](GgufWriter& w) {
             std::vector<GgufValue> s{int32_t(0), int32_t(0), int32_t(0), int32_t(8)};
             w.set("qwen3vl.rope.dimension_sections", GgufValue::array(GgufType::I32, s));
         },
         "metadata 'qwen3vl.rope.dimension_sections' gives no pair to the text position's sections"},
    };
    test::check_refused_metadata(dir, "qwen3vl-tiny", cases);
}

TEST_CASE("quill run, chat and template work end to end on qwen2vl, qwen3vl and exaone files", "[arch][cli]") {
    const fs::path corpus = fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src";
    struct Cli {
        const char* shape;
        const char* file_arch;
        const char* tmpl;  // a file of tests/data/templates/src, or nullptr: the synthetic file's own (ChatML)
    };
    // MiMo-VL's published template is a Qwen2.5-VL model's, as llama.cpp's corpus holds it
    for (const Cli& f : {Cli{"qwen2vl-tiny", "qwen2vl", "MiMo-VL.jinja"},
                         Cli{"qwen3vl-tiny", "qwen3vl", "MiMo-VL.jinja"}, Cli{"exaone-tiny", "exaone", nullptr}}) {
        INFO(f.shape);
        const fs::path dir = test::temp_dir(std::string("arch_cli_") + f.shape);
        const fs::path saved = dir / "saved.gguf", file = dir / (std::string(f.shape) + ".gguf");
        auto save = test::run_quill({"bench", "--synthetic", f.shape, "--dtype", "f16", "--save", saved.string(), "-p",
                                     "4", "-n", "2", "-r", "1"});
        REQUIRE(save.status == 0);
        test::rewrite_gguf(saved.string(), file.string(), [&](GgufWriter& w) {
            if (f.tmpl) w.set("tokenizer.chat_template", test::read_file(corpus / f.tmpl));
        });
        auto info = test::run_quill({"info", "-m", file.string()});
        CHECK(info.status == 0);
        CHECK(info.out.find(std::string("architecture    ") + f.file_arch + "\n") != std::string::npos);
        auto shown = test::run_quill({"template", "-m", file.string()}, "Hello there\n");
        CHECK(shown.status == 0);
        CHECK(shown.out.find("<|im_start|>assistant\n") != std::string::npos);
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

}  // namespace test_arch_variants
