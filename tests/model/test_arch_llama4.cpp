// llama4 (Llama 4 Scout 17B-16E, Maverick 17B-128E) against llama.cpp: the synthetic llama4-tiny model
// (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic llama4-tiny --dtype f32|f16 --save FILE` writes
// it: 4 layers of 64; layers 1 and 3 with 4 experts of 64 features, 2 a token, each reading the token's input times
// sigmoid(its logit), beside an ungated shared expert of 64, layers 0 and 2 a dense FFN of 128; layers 0-2 with RoPE,
// Q and K divided by their rms after it, and chunked attention; layer 3 global, without RoPE, its queries times the
// temperature) regenerated, saved and loaded back, then run on the reference backend and the CPU backend of every
// kernel family this machine has. llama.cpp fixes the chunk (8192 positions) and the temperature's floor (8192, from
// position 8191) whatever the file says, so a 32-token prompt exercises the routing, the dense layers between, the
// Q/K norm and the layer without RoPE, and a prompt of 8200 tokens the chunks and the temperature. References in
// tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32) over the 32 tokens below
// (dump_logits.cpp: dump_logits FILE STEM 24 1 300 45 72 ... 202, n_ctx 256) and at six positions of the long prompt
// (dump_long_logits.cpp, its header says how).
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace test_arch_llama4 {

using namespace quill;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "llama4-tiny";
constexpr int64_t kLongPrompt = 8200;
constexpr int64_t kLongCtx = 8256;

// The limits on max |diff| / range, the reference backend's and the CPU backend's (measured in the commit that added
// them: F32 below 1e-6, F16 below 5e-4).
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

// llama.cpp's logits at some positions of the long prompt (dump_long_logits.cpp): the positions and their rows.
struct LongRef {
    std::vector<int64_t> pos;
    std::vector<std::vector<float>> logits;
};

LongRef read_long_ref() {
    std::ifstream in(test::arch_ref_path("llama4-tiny-f32.long_logits.txt"));
    REQUIRE(in.good());
    LongRef r;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream ss(line);
        if (line.starts_with("pos ")) {
            std::string word;
            int64_t p = 0;
            ss >> word >> p;
            r.pos.push_back(p);
            r.logits.emplace_back();
            continue;
        }
        REQUIRE(!r.logits.empty());
        float v = 0;
        while (ss >> v) r.logits.back().push_back(v);
    }
    return r;
}

// The long prompt's token i, as dump_long_logits.cpp makes it.
int32_t long_token(int64_t i, int64_t n_vocab) { return static_cast<int32_t>(3 + (i * 37 + 11) % (n_vocab - 3)); }

// The worst max |diff| / range over the reference positions of the long prompt, fed in batches of 512 (the logits of
// the reference positions only).
double long_error(Backend& b, const LongRef& ref) {
    const int64_t nv = b.config().n_vocab;
    double worst = 0;
    size_t next = 0;
    for (int64_t p0 = 0; p0 < kLongPrompt; p0 += 512) {
        Batch batch;
        std::vector<int64_t> asked;
        for (int64_t p = p0; p < std::min(kLongPrompt, p0 + 512); ++p) {
            const bool wants = std::find(ref.pos.begin(), ref.pos.end(), p) != ref.pos.end();
            batch.add(long_token(p, nv), static_cast<int32_t>(p), 0, wants);
            if (wants) asked.push_back(p);
        }
        std::vector<float> logits(asked.size() * static_cast<size_t>(nv));
        b.forward(batch, logits);
        for (size_t i = 0; i < asked.size(); ++i, ++next) {
            REQUIRE(ref.pos[next] == asked[i]);
            const std::vector<float>& want = ref.logits[next];
            const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
            worst = std::max(worst, test::max_diff(test::rows(logits, nv, static_cast<int64_t>(i),
                                                              static_cast<int64_t>(i) + 1), want) / (*hi - *lo));
        }
    }
    REQUIRE(next == ref.pos.size());
    return worst;
}

// The CPU backend's error on the long prompt (its best kernels here, F32 weights) with the config changed by `mutate`.
double long_cpu_error(const std::function<void(ModelConfig&)>& mutate) {
    auto m = test::saved_synthetic(kShape, GgmlType::F32);
    ModelConfig c = m->config;
    mutate(c);
    const std::vector<cpu::Isa> isas = test::model_test_isas();
    auto b = test::arch_cpu_backend(c, m->weights, isas.back(), kLongCtx);
    return long_error(*b, read_long_ref());
}

// The worst prompt position's max |diff| / range against llama.cpp's F32 logits of the 32-token prompt, on the
// reference backend and on the CPU backend's generic kernels, of the F32 model with its config changed by `mutate`.
std::vector<double> short_error(const std::function<void(ModelConfig&)>& mutate) {
    auto m = test::saved_synthetic(kShape, GgmlType::F32);
    ModelConfig c = m->config;
    mutate(c);
    const test::RefLogits ref = test::read_ref_logits(test::arch_ref_path("llama4-tiny-f32.prompt_logits.txt"));
    ReferenceBackend reference(c, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
    auto cpu = test::arch_cpu_backend(c, m->weights, cpu::Isa::generic, kCtx);
    std::vector<double> worst;
    for (Backend* b : {static_cast<Backend*>(&reference), static_cast<Backend*>(cpu.get())}) {
        const std::vector<float> got = test::prefill_logits(*b, ref.tokens);
        double e = 0;
        for (size_t p = 0; p < ref.tokens.size(); ++p) {
            const auto [lo, hi] = std::minmax_element(ref.logits[p].begin(), ref.logits[p].end());
            e = std::max(e, test::max_diff(test::rows(got, c.n_vocab, static_cast<int64_t>(p),
                                                      static_cast<int64_t>(p) + 1), ref.logits[p]) / (*hi - *lo));
        }
        worst.push_back(e);
    }
    return worst;
}

// llama4-tiny with chunks of 8 and the temperature's floor at 8 (llama.cpp's fixed 8192 scaled down), so that a
// test's few tokens cross chunk boundaries and temperature steps.
ModelConfig small_chunks() {
    ModelConfig c = synthetic_config(kShape);
    c.attn_chunk = c.attn_temp_floor = 8;
    return c;
}

}  // namespace

TEST_CASE("llama4 tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("llama4 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("llama4 tiny model: past position 8191 the CPU backend gives llama.cpp's logits, chunks and temperature "
          "included", "[arch][cpu]") {
    // (measured 6.5e-6 on AVX-512: each softmax sums up to 8192 keys in float)
    CHECK(long_cpu_error([](ModelConfig&) {}) < 5e-5);
}

TEST_CASE("llama4: no chunks, the temperature on every layer, the router's weight after the expert or no Q/K norm "
          "each leave llama.cpp's logits", "[arch][reference][cpu]") {
    // The checks above can fail: each feature changed is far outside their tolerance. (The long prompt's two
    // mutants, 8200 tokens each, run in the optimized build only: under the sanitizers they take most of a minute.)
#ifndef QUILL_SANITIZED_BUILD
    CHECK(long_cpu_error([](ModelConfig& c) { c.attn_chunk = 0; }) > 1e-2);
    CHECK(long_cpu_error([](ModelConfig& c) { c.attn_temp_nope_only = false; }) > 1e-2);
#endif
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&)>>> mutants = {
        {"weight after the expert", [](ModelConfig& c) { c.moe_weight_input = false; }},
        {"no Q/K norm", [](ModelConfig& c) { c.qk_l2_norm = false; }},
    };
    for (const auto& [name, mutate] : mutants) {
        INFO(name);
        for (double e : short_error(mutate)) CHECK(e > 1e-2);
    }
}

TEST_CASE("llama4 settings, the interleaved expert layers and the shared expert are read from the file as llama.cpp "
          "reads them", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK(c.arch == "llama4");
    CHECK((c.rope == ModelConfig::Rope::adjacent && c.n_rot == 32 && c.head_dim == 32 && c.n_head_kv == 1));
    CHECK((c.n_expert == 4 && c.n_expert_used == 2 && c.n_ff_exp == 64 && c.moe_layer_step == 2));
    CHECK((c.moe_gating_sigmoid && c.moe_weight_input && !c.moe_norm_weights && !c.moe_selection_bias &&
           c.moe_weights_scale == 1.0f));
    CHECK((c.moe_shared_expert && !c.moe_shared_gate && !c.layer_moe(0) && c.layer_moe(1) && !c.layer_moe(2) &&
           c.layer_moe(3)));
    CHECK((c.layer_n_ff(0) == 128 && c.layer_n_ff(1) == 64 && c.n_ff == 128));
    CHECK((c.attn_chunk == 8192 && c.layer_is_chunked(0) && c.layer_is_chunked(2) && !c.layer_is_chunked(3)));
    CHECK((c.layer_has_rope(2) && !c.layer_has_rope(3) && c.layer_attn_temp(3) && !c.layer_attn_temp(0)));
    CHECK((c.qk_l2_norm && c.attn_temp(8190) == 1.0 && c.attn_temp(8191) == 1.0 + 0.1f * std::log(2.0)));
    CHECK((c.first_visible(0, 8191) == 0 && c.first_visible(0, 8192) == 8192 && c.first_visible(3, 8200) == 0));
    const LayerWeights& dense = m->weights.layers[2];
    CHECK((dense.experts.empty() && dense.ffn_gate.name == "blk.2.ffn_gate.weight" && dense.ffn_gate.n_rows() == 128));
    const LayerWeights& L = m->weights.layers[3];
    CHECK((L.experts.size() == 4 && L.ffn_gate_inp_shexp.empty() && L.attn_q_norm.empty()));
    CHECK((L.ffn_gate.name == "blk.3.ffn_gate_shexp.weight" && L.ffn_gate.n_rows() == 64));
    // Scout's and Maverick's shapes: every layer with 16 experts; every second with 128 and no Q/K norm.
    for (const char* shape : {"llama4-scout", "llama4-scout-4l", "llama4-maverick"}) {
        INFO(shape);
        const ModelConfig s = synthetic_config(shape);
        const bool maverick = std::string(shape).starts_with("llama4-maverick");
        CHECK((s.arch == "llama4" && s.n_embd == 5120 && s.n_head == 40 && s.n_head_kv == 8 && s.head_dim == 128 &&
               s.n_expert == (maverick ? 128 : 16) && s.n_expert_used == 1 && s.n_ff_exp == 8192 &&
               s.layer_n_ff(0) == (maverick ? 16384 : 8192) && s.layer_n_ff(1) == 8192 && s.n_vocab == 202048 &&
               s.qk_l2_norm == !maverick));
        CHECK(s.n_layer == (std::string(shape).ends_with("-4l") ? 4 : 48));
    }
}

TEST_CASE("llama4: a token's logits have the same bits in any batch as alone, across chunk boundaries too",
          "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
    // (chunks of 8: the mixed batches' sequences of 8 and 20 tokens cross them)
    test::check_mixed_batches(small_chunks(), {GgmlType::F32}, kCtx);
}

TEST_CASE("llama4: a decode past a chunk boundary gives the logits of the prefill of the same tokens",
          "[arch][cpu][reference]") {
    // Chunks of 8: 20 tokens, a prefill of 5 then one token a call, against one prefill of all 20 and against the
    // reference backend; and the chunks change the logits after position 8 (the check can fail).
    const ModelConfig c = small_chunks();
    auto m = SyntheticModel::make(c, GgmlType::F32, 7);
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < 20; ++i) tokens.push_back(long_token(i, c.n_vocab));
    const int64_t nv = c.n_vocab;
    for (cpu::Isa isa : test::model_test_isas()) {
        INFO(cpu::isa_name(isa));
        auto prefill = test::arch_cpu_backend(c, m->weights, isa, 64);
        const std::vector<float> all = test::prefill_logits(*prefill, tokens);
        auto decode = test::arch_cpu_backend(c, m->weights, isa, 64);
        std::vector<float> stepped(tokens.size() * static_cast<size_t>(nv));
        Batch first;
        for (int32_t i = 0; i < 5; ++i) first.add(tokens[static_cast<size_t>(i)], i, 0, true);
        decode->forward(first, std::span<float>(stepped.data(), static_cast<size_t>(5 * nv)));
        for (int32_t i = 5; i < 20; ++i) {
            Batch one;
            one.add(tokens[static_cast<size_t>(i)], i, 0, true);
            decode->forward(one, std::span<float>(stepped.data() + i * nv, static_cast<size_t>(nv)));
        }
        const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
        CHECK(test::max_diff(stepped, all) / (*hi - *lo) < 1e-5);
        ReferenceBackend reference(c, m->weights, ReferenceBackendOptions{64, 1, KvType::f32});
        CHECK(test::max_diff(test::prefill_logits(reference, tokens), all) / (*hi - *lo) < 1e-5);
        ModelConfig unchunked = c;
        unchunked.attn_chunk = 0;
        auto whole = test::arch_cpu_backend(unchunked, m->weights, isa, 64);
        const std::vector<float> w = test::prefill_logits(*whole, tokens);
        CHECK(test::max_diff(test::rows(w, nv, 0, 8), test::rows(all, nv, 0, 8)) == 0.0);
        CHECK(test::max_diff(test::rows(w, nv, 8, 20), test::rows(all, nv, 8, 20)) / (*hi - *lo) > 1e-2);
    }
}

TEST_CASE("llama4 files quill cannot run are refused with one line naming the key", "[arch][model]") {
    const std::filesystem::path dir = test::temp_dir("arch_llama4_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"step", [](GgufWriter& w) { w.set("llama4.interleave_moe_layer_step", uint32_t(0)); },
         "metadata 'llama4.interleave_moe_layer_step' is 0, expected 1..4"},
        {"unchunked", [](GgufWriter& w) { w.set("llama4.attention.sliding_window", uint32_t(0)); },
         "llama4 without chunked attention ('llama4.attention.sliding_window' 0: MobileLLM-R1) is not supported"},
        {"swa base", [](GgufWriter& w) { w.set("llama4.rope.freq_base_swa", 10000.0f); },
         "metadata 'llama4.rope.freq_base_swa' differs from rope.freq_base (a RoPE base of the chunked layers of "
         "their own is not supported for llama4)"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a llama4 file with Llama 3.3's chat template, and --device auto "
          "runs it on the CPU", "[arch][cli]") {
    // (Llama 4's own template is not in the corpus; Llama 3.3's header-and-eot turns are the nearest)
    test::check_run_and_chat(kShape, "meta-llama-Llama-3.3-70B-Instruct.jinja",
                             {"n_expert=4 n_expert_used=2 n_ff_exp=64 n_ff_shexp=64",
                              "chunks of 8192 on 3 layers of 4 (every 4th without RoPE, with the temperature), "
                              "qk_norm=true; experts every 2 layer(s), the sigmoid of the chosen logit on their "
                              "input"});
}

}  // namespace test_arch_llama4
