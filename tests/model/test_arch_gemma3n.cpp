// gemma3n (Gemma 3n E2B, E4B) against llama.cpp: the synthetic gemma3n-tiny model (engine/model/synthetic.cpp, seed
// 42, as `quill bench --synthetic gemma3n-tiny --dtype f32|f16 --save FILE` writes it: 22 layers of 64, every second
// global with a window of 8 on the others, AltUp's 4 streams, Laurel, per-layer inputs, the gate's sparsity in layers
// 0-9 and layers 20 and 21 reading the caches of 18 and 19) saved and loaded back, then run on the reference backend
// and the CPU backend of every kernel family this machine has. References in tests/data/arch/: llama.cpp
// (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256, one thread) over the 32 tokens of
// tests/data/arch/dump_logits.cpp's header, which made them.
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_gemma3n {

using namespace quill;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "gemma3n-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: F32 7.6e-3 on every
// path (agreeing to 1e-5 among themselves), F16 2.8e-2 on the reference backend, 1.6-1.9e-2 on the CPU's. llama.cpp's
// CPU GELU is a table of fp16 values looked up by the fp16-rounded input where quill computes it in float, and a
// gemma3n layer has two (its FFN's, its per-layer input's): with that table in the reference backend F32 falls to
// 6.2e-4 (7e-5 at position 0). F16: llama.cpp also rounds every product's input to fp16, as the CPU backend does and
// the reference backend does not; its greedy tokens then part from llama.cpp's after 20 (13 with AMX's products):
// the first 13 are compared.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-2, 1e-2}, {GgmlType::F16, 3.5e-2, 2.5e-2, 13}};

}  // namespace

TEST_CASE("gemma3n tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("gemma3n tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("gemma3n: AltUp's router-less correction or prediction, no Laurel, no sparsity or no KV sharing each "
          "leave llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature turned off is far outside their tolerance. (No KV sharing: the shared
    // layers compute their own K and V from the file's K and V, which llama.cpp requires and does not read.)
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&, Weights&)>>> mutants = {
        {"correction coefficients 1",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) L.altup_correct_coef.assign(L.altup_correct_coef.size(), 0.0f);
         }},
        {"prediction coefficients 0",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) L.altup_predict_coef.assign(L.altup_predict_coef.size(), 0.0f);
         }},
        {"no Laurel",
         [](ModelConfig&, Weights& w) {
             for (LayerWeights& L : w.layers) L.laurel_l = L.laurel_r = TensorView{};
         }},
        {"no sparsity", [](ModelConfig& c, Weights&) { c.n_sparse_layers = 0; }},
        {"no KV sharing", [](ModelConfig& c, Weights&) { c.n_kv_shared = 0; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : test::mutant_error(kShape, kCtx, mutate)) {
            CAPTURE(e);
            CHECK(e > 5e-2);
        }
    }
}

TEST_CASE("gemma3n settings are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "gemma3n" && c.rope == ModelConfig::Rope::neox && c.head_dim == 32 && c.n_head_kv == 1));
    CHECK((c.n_altup == 4 && c.altup_active == 0 && c.n_embd_per_layer == 256 && c.n_kv_shared == 2));
    CHECK((c.n_sparse_layers == 10 && c.layer_sparse(9) && !c.layer_sparse(10) && c.sparsity_std_mul > 1.6448f));
    CHECK((c.attn_scale == 1.0f && c.v_norm && c.final_logit_softcap == 30.0f && c.rope_base_local == 10000.0f));
    CHECK((c.sliding_window == 8 && c.swa_pattern == 2 && c.layer_is_local(20) && !c.layer_is_local(21)));
    CHECK((c.layer_has_kv(19) && !c.layer_has_kv(20) && c.kv_layer(20) == 18 && c.kv_layer(21) == 19));
    const LayerWeights& L = m->weights.layers[21];
    CHECK((L.laurel_l.ne[1] == 64 && L.altup_router.size() == 4 * 64 && L.altup_predict_coef.size() == 64));
    CHECK((m->weights.altup_proj_k.size() == 3 && m->weights.output_tied));
    // E2B's and E4B's shapes
    for (const char* shape : {"gemma3n-e2b", "gemma3n-e4b", "gemma3n-e2b-22l"}) {
        INFO(shape);
        const ModelConfig s = synthetic_config(shape);
        CHECK((s.n_embd == 2048 && s.n_head == 8 && s.n_head_kv == 2 && s.head_dim == 256 && s.n_vocab == 262400));
        CHECK((s.n_kv_shared == s.n_layer - 20 && s.sliding_window == 512 && s.swa_pattern == 5));
    }
}

TEST_CASE("gemma3n files whose keys differ from what llama.cpp fixes are refused with one line naming the key",
          "[arch][model]") {
    const std::filesystem::path dir = test::temp_dir("arch_gemma3n_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"streams", [](GgufWriter& w) { w.set("gemma3n.altup.num_inputs", uint32_t(3)); },
         "metadata 'gemma3n.altup.num_inputs' is 3, expected 4 (llama.cpp's gemma3n fixes it)"},
        {"active", [](GgufWriter& w) { w.set("gemma3n.altup.active_idx", uint32_t(1)); },
         "metadata 'gemma3n.altup.active_idx' is 1, expected 0 (llama.cpp's gemma3n fixes it)"},
        {"shared", [](GgufWriter& w) { w.set("gemma3n.attention.shared_kv_layers", uint32_t(4)); },
         "metadata 'gemma3n.attention.shared_kv_layers' is 4, expected 2 (llama.cpp's gemma3n fixes it)"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("gemma3n: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("quill run and quill chat work end to end on a gemma3n file with Gemma's chat template", "[arch][cli]") {
    // (Gemma 3n's published template is Gemma 3's turns; the corpus has Gemma 2's, the same turns)
    test::check_run_and_chat(kShape, "google-gemma-2-2b-it.jinja",
                             {"streams=4 per_layer_input=256 shared_kv_layers=2 sparse_layers=10"});
}

TEST_CASE("gemma3n files are refused by the CUDA backend and split devices with one line", "[arch][cli]") {
    const std::filesystem::path dir = test::temp_dir("arch_gemma3n_split");
    const std::string file = (dir / "g.gguf").string();
    SyntheticModel::make(synthetic_config(kShape), GgmlType::F32, 42)->save(file);
    const test::CommandResult r = test::run_quill({"run", "-m", file, "-p", "hi", "-n", "2", "--devices", "cpu,cpu"});
    CHECK(r.status == 2);
    CHECK(r.err.find("cannot be split across devices") != std::string::npos);
    test::check_run_auto_on_cpu(file, "", "cannot run gemma3n");
}

}  // namespace test_arch_gemma3n
