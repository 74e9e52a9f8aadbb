// IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M models against llama.cpp: the synthetic llama-tiny-256 model (engine/model/synthetic.cpp,
// seed 42, random valid blocks: as `quill bench --synthetic llama-tiny-256 --dtype TYPE --save FILE` writes it)
// regenerated, saved and loaded back, then run on the reference backend and the CPU backend of every kernel family
// this machine has. References in tests/data/arch/llama-tiny-256-TYPE.prompt_logits.txt: llama.cpp (llama-cpp-python
// 0.3.36's vendored copy, CPU, one thread, KV f32, n_ctx 256) over the 32 tokens below, made by
// tests/data/arch/dump_iq2_logits.cpp (FILE "TOKENS" 24 LOGITS GREEDY; the greedy tokens are not kept; the IQ1 ones
// with the same tokens).
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace test_iq2_models {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
// The limit on max |diff| / logit range at every position. llama.cpp multiplies these types with its activations
// rounded to Q8_K (one scale per 256 values), quill's fast path with int8 blocks of 32 and its reference backend
// with float activations: measured 1.2e-2 to 1.8e-2 on every path of the three IQ2 types, 1.4e-2 to 1.9e-2 of the
// two IQ1 ones (the codecs are ggml's bit for bit: test_quant_iq2.cpp, test_quant_iq1.cpp). A top token may then differ where these random models' logits nearly tie, so only the
// distance is checked.
constexpr double kTol = 3e-2;

std::unique_ptr<Model> saved_model(GgmlType type) {
    const fs::path dir = test::temp_dir("iq2_model_" + std::string(type_name(type)));
    const fs::path file = dir / "llama-tiny-256.gguf";
    SyntheticModel::make(synthetic_config("llama-tiny-256"), type, 42)->save(file.string());
    return Model::load(file.string());
}

// The worst position's max |diff| / logit range against llama.cpp's logits.
double worst_distance(Backend& b, const test::RefLogits& ref) {
    const int64_t nv = b.config().n_vocab;
    const std::vector<float> got = test::prefill_logits(b, ref.tokens);
    double worst = 0;
    for (size_t p = 0; p < ref.tokens.size(); ++p) {
        REQUIRE(ref.logits[p].size() == static_cast<size_t>(nv));
        const auto [lo, hi] = std::minmax_element(ref.logits[p].begin(), ref.logits[p].end());
        const std::vector<float> row = test::rows(got, nv, static_cast<int64_t>(p), static_cast<int64_t>(p) + 1);
        worst = std::max(worst, test::max_diff(row, ref.logits[p]) / (*hi - *lo));
    }
    return worst;
}

// A type's saved model on the reference backend and the CPU backend of every ISA against llama.cpp's logits.
void check_against_llama_cpp(GgmlType type) {
    const std::string stem = fmt::format("llama-tiny-256-{}", type_name(type));
    const test::RefLogits ref = test::read_ref_logits(test::arch_ref_path(stem + ".prompt_logits.txt"));
    REQUIRE(ref.tokens.size() == 32);
    auto m = saved_model(type);
    {
        INFO(stem << ", reference backend");
        ReferenceBackend b(m->config, m->weights, ReferenceBackendOptions{kCtx, 1, KvType::f32});
        CHECK(worst_distance(b, ref) <= kTol);
    }
    for (cpu::Isa isa : test::model_test_isas()) {
        INFO(stem << ", " << cpu::isa_name(isa));
        CHECK(worst_distance(*test::arch_cpu_backend(m->config, m->weights, isa, kCtx), ref) <= kTol);
    }
}

}  // namespace

TEST_CASE("IQ2 tiny models: the reference backend and every CPU kernel family give llama.cpp's logits",
          "[iq2][arch][cpu]") {
    for (GgmlType type : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S}) check_against_llama_cpp(type);
}

TEST_CASE("IQ1 tiny models: the reference backend and every CPU kernel family give llama.cpp's logits",
          "[iq1][arch][cpu]") {
    for (GgmlType type : {GgmlType::IQ1_S, GgmlType::IQ1_M}) check_against_llama_cpp(type);
}

}  // namespace test_iq2_models
