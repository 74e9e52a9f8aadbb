// Helpers for the architecture tests (tests/model/test_arch_*.cpp): a backend against llama.cpp's outputs in
// tests/data/arch/, and a sequence's decode steps alone against the same steps in mixed batches.
#pragma once

#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/backend_checks.h"
#include "tests/support/fault_util.h"
#include "tests/support/test_util.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace quill::test {

inline std::filesystem::path arch_ref_path(const std::string& file) {
    return std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "data" / "arch" / file;
}

// The synthetic model of `shape` in `type` (seed 42, as `quill bench --synthetic SHAPE --dtype TYPE --save FILE`
// writes it), saved as GGUF in a folder of its own and loaded back, through the loader (its fused tensors' views).
inline std::unique_ptr<Model> saved_synthetic(const std::string& shape, GgmlType type) {
    const std::filesystem::path file =
        temp_dir("arch_" + shape + "_" + std::string(type_name(type))) / (shape + ".gguf");
    SyntheticModel::make(synthetic_config(shape), type, 42)->save(file.string());
    return Model::load(file.string());
}

// Every prompt position's logits within `tol` of that position's logit range in llama.cpp's (STEM.prompt_logits.txt),
// and the greedy continuation equal to llama.cpp's (STEM.greedy.txt): 32 prompt tokens, 24 greedy ones.
// (n_greedy < 24: only the first n_greedy greedy tokens, where llama.cpp's fp16 rounding turns a later one;
// n_positions < 32: only the first n_positions prompt positions' logits, where it turns a choice of a later one)
inline void check_against_llama_cpp(Backend& b, const std::string& stem, double tol, size_t n_greedy = 24,
                                    size_t n_positions = 32) {
    const RefLogits ref = read_ref_logits(arch_ref_path(stem + ".prompt_logits.txt"));
    const auto want = read_ref_ids(arch_ref_path(stem + ".greedy.txt"), "generated_tokens");
    REQUIRE(ref.tokens.size() == 32);
    REQUIRE(want.size() == 24);
    const int64_t nv = b.config().n_vocab;
    std::vector<float> logits;
    const std::vector<int32_t> got = greedy_tokens(b, ref.tokens, 24, &logits);
    double worst = 0;
    for (size_t p = 0; p < std::min(n_positions, ref.tokens.size()); ++p) {
        INFO("position " << p);
        REQUIRE(ref.logits[p].size() == static_cast<size_t>(nv));
        const auto [lo, hi] = std::minmax_element(ref.logits[p].begin(), ref.logits[p].end());
        const double d = max_diff(rows(logits, nv, p, p + 1), ref.logits[p]) / (*hi - *lo);
        worst = std::max(worst, d);
        CHECK(d <= tol);
    }
    INFO("worst position: max |diff| / range " << worst);
    CHECK(std::vector<int32_t>(got.begin(), got.begin() + n_greedy) ==
          std::vector<int32_t>(want.begin(), want.begin() + n_greedy));
}

// A file whose metadata quill refuses: its name, the edit of the F32 synthetic file that makes it, and the message.
struct RefusedMetadata {
    const char* name;
    std::function<void(GgufWriter&)> edit;
    const char* what;
};

// The F32 synthetic `shape` (seed 42) saved in dir once, then copied as dir/name.gguf with `edit` applied to its
// metadata (and the tensors it adds): the copy's path.
inline std::string synthetic_with_metadata(const std::filesystem::path& dir, const std::string& shape,
                                           const std::string& name, const std::function<void(GgufWriter&)>& edit) {
    const std::filesystem::path src = dir / (shape + ".gguf");
    if (!std::filesystem::exists(src))
        SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 42)->save(src.string());
    const std::string path = (dir / (name + ".gguf")).string();
    rewrite_gguf(src.string(), path, edit);
    return path;
}

// Each case's file refused by `quill run` with exit status 1 and the one line "quill: error: FILE: what".
inline void check_refused_metadata(const std::filesystem::path& dir, const std::string& shape,
                                   const std::vector<RefusedMetadata>& cases) {
    for (const RefusedMetadata& r : cases) {
        const std::string f = synthetic_with_metadata(dir, shape, r.name, r.edit);
        INFO(r.name);
        const Outcome o = run_io({"run", "-m", f, "-p", "hi", "-n", "4"}, "", "", "");
        CHECK(o.status == 1);
        CHECK(o.err == "quill: error: " + f + ": " + r.what + "\n");
    }
}

// A CPU backend of n_ctx positions and n_slots slots on 2 threads: the scalar reference path when isa is unset.
inline std::unique_ptr<cpu::CpuBackend> arch_cpu_backend(const ModelConfig& c, const Weights& w,
                                                         std::optional<cpu::Isa> isa, int64_t n_ctx,
                                                         int64_t n_slots = 1, KvType kv = KvType::f32) {
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.n_slots = n_slots;
    o.kv_type = kv;
    o.isa = isa;
    o.reference = !isa;
    return std::make_unique<cpu::CpuBackend>(c, w, o);
}

// check_against_llama_cpp on the CPU backend's reference path, then on each kernel family this machine has.
inline void check_cpu_against_llama_cpp(const ModelConfig& c, const Weights& w, const std::string& stem, double tol,
                                        int64_t n_ctx, size_t n_greedy = 24, size_t n_positions = 32) {
    std::vector<std::optional<cpu::Isa>> isas{std::nullopt};
    for (cpu::Isa isa : model_test_isas()) isas.push_back(isa);
    for (const auto& isa : isas) {
        INFO(stem << ", " << (isa ? cpu::isa_name(*isa) : "reference path"));
        check_against_llama_cpp(*arch_cpu_backend(c, w, isa, n_ctx), stem, tol, n_greedy, n_positions);
    }
}

// The worst prompt position's max |diff| / range against llama.cpp's F32 logits (SHAPE-f32.prompt_logits.txt), on
// the reference backend and on the CPU backend's generic kernels, of the F32 `shape` with its config or weights
// changed by `mutate`: a feature turned off must leave llama.cpp's logits (the checks above can fail).
inline std::vector<double> mutant_error(const std::string& shape, int64_t n_ctx,
                                        const std::function<void(ModelConfig&, Weights&)>& mutate) {
    auto m = saved_synthetic(shape, GgmlType::F32);
    ModelConfig c = m->config;
    Weights w = m->weights;
    mutate(c, w);
    const RefLogits ref = read_ref_logits(arch_ref_path(shape + "-f32.prompt_logits.txt"));
    ReferenceBackend reference(c, w, ReferenceBackendOptions{n_ctx, 1, KvType::f32});
    auto cpu = arch_cpu_backend(c, w, cpu::Isa::generic, n_ctx);
    std::vector<double> worst;
    for (Backend* b : {static_cast<Backend*>(&reference), static_cast<Backend*>(cpu.get())}) {
        const std::vector<float> got = prefill_logits(*b, ref.tokens);
        const int64_t nv = c.n_vocab;
        double e = 0;
        for (size_t p = 0; p < ref.tokens.size(); ++p) {
            const auto [lo, hi] = std::minmax_element(ref.logits[p].begin(), ref.logits[p].end());
            e = std::max(e, max_diff(rows(got, nv, p, p + 1), ref.logits[p]) / (*hi - *lo));
        }
        worst.push_back(e);
    }
    return worst;
}

// One weight type of a tiny shape against llama.cpp (STEM = SHAPE-TYPE): the limits on max |diff| / range on the
// reference backend and on the CPU backend, and the greedy tokens compared (see check_against_llama_cpp).
struct ArchCase {
    GgmlType type;
    double tol_reference, tol_cpu;
    size_t n_greedy = 24;
    size_t n_positions = 32;  // the prompt positions compared (see check_against_llama_cpp)
};

// Each case's file of `shape` on the reference backend (KV f32, n_ctx positions), or, with cpu, on the CPU backend's
// reference path and every kernel family this machine has.
inline void check_shape_against_llama_cpp(const std::string& shape, std::span<const ArchCase> cases, int64_t n_ctx,
                                          bool cpu) {
    for (const ArchCase& c : cases) {
        const std::string stem = shape + "-" + std::string(type_name(c.type));
        INFO(stem);
        auto m = saved_synthetic(shape, c.type);
        if (cpu) {
            check_cpu_against_llama_cpp(m->config, m->weights, stem, c.tol_cpu, n_ctx, c.n_greedy, c.n_positions);
        } else {
            ReferenceBackend b(m->config, m->weights, ReferenceBackendOptions{n_ctx, 1, KvType::f32});
            check_against_llama_cpp(b, stem, c.tol_reference, c.n_greedy, c.n_positions);
        }
    }
}

// A tiny shape's F32 and F16 files on both backends alike: the limit is 1e-5 with F32 weights (float summation
// order) and f16_tol with F16.
struct ArchFiles {
    const char* shape;
    double f16_tol;
    size_t f16_greedy = 24;  // the greedy tokens compared with F16 weights (see check_against_llama_cpp)
};

inline void check_files_against_llama_cpp(std::span<const ArchFiles> files, int64_t n_ctx, bool cpu) {
    for (const ArchFiles& a : files) {
        const ArchCase cases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, a.f16_tol, a.f16_tol, a.f16_greedy}};
        check_shape_against_llama_cpp(a.shape, cases, n_ctx, cpu);
    }
}

// What a scheduler step holds: decode steps of running sequences first (BatchToken::decode), then prompt chunks.
// Sequence a's decode steps at positions 5, 6, 7 after its 5-token prompt, alone (one backend of one slot, a step
// per call) and in company: a in slot 0 and b in slot 1 decoding while prompt p (20 tokens) arrives in slot 2 in
// chunks of 7, 1 and 12, one batch per step, on a backend of three slots. make(n_slots) makes each backend.
struct MixedDecode {
    std::vector<float> alone;        // [3, n_vocab] a's steps alone
    std::vector<float> mixed;        // [3, n_vocab] the same steps in the mixed batches
    std::vector<float> prompt_last;  // [n_vocab] p's last position, from its last chunk
};
inline MixedDecode mixed_decode_steps(const std::function<std::unique_ptr<Backend>(int64_t)>& make,
                                      const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                                      const std::vector<int32_t>& p) {
    auto alone = make(1);
    const int64_t nv = alone->config().n_vocab;
    MixedDecode r{std::vector<float>(3 * nv), std::vector<float>(3 * nv), std::vector<float>(nv)};
    prefill_logits(*alone, std::vector<int32_t>(a.begin(), a.begin() + 5));
    for (int i = 5; i < 8; ++i) {
        Batch step;
        step.add(a[i], i, 0, true, true);
        alone->forward(step, std::span<float>(r.alone.data() + (i - 5) * nv, nv));
    }
    auto mixed = make(3);
    prefill_logits(*mixed, std::vector<int32_t>(a.begin(), a.begin() + 5), 0);
    prefill_logits(*mixed, std::vector<int32_t>(b.begin(), b.begin() + 3), 1);
    int p0 = 0;
    for (int i = 5; int n_chunk : {7, 1, 12}) {
        Batch batch;
        batch.add(a[i], i, 0, true, true);
        batch.add(b[i - 2], i - 2, 1, true, true);
        for (int j = p0; j < p0 + n_chunk; ++j) batch.add(p[j], j, 2, j + 1 == p0 + n_chunk);
        p0 += n_chunk;
        std::vector<float> out(3 * nv);
        mixed->forward(batch, out);
        std::copy_n(out.begin(), nv, r.mixed.begin() + (i - 5) * nv);
        std::copy_n(out.begin() + 2 * nv, nv, r.prompt_last.begin());
        ++i;
    }
    return r;
}

}  // namespace quill::test

namespace quill::test {

// For random weights of `config` (seed 7) of each type, on each kernel family here with an F16 cache of n_ctx:
// mixed_decode_steps' decode steps in mixed batches bit for bit as alone, and the prompt's last row, computed with
// other company in its products, within float rounding of its row alone.
inline void check_mixed_batches(const ModelConfig& config, std::initializer_list<GgmlType> types, int64_t n_ctx) {
    for (GgmlType type : types) {
        auto m = SyntheticModel::make(config, type, 7);
        const int64_t nv = m->config.n_vocab;
        const auto a = some_tokens(8, static_cast<int>(nv), 31);
        const auto b = some_tokens(6, static_cast<int>(nv), 32);
        const auto p = some_tokens(20, static_cast<int>(nv), 33);
        for (cpu::Isa isa : model_test_isas()) {
            INFO(type_name(type) << ", " << cpu::isa_name(isa));
            auto make = [&](int64_t n_slots) {
                return arch_cpu_backend(m->config, m->weights, isa, n_ctx, n_slots, KvType::f16);
            };
            const MixedDecode r = mixed_decode_steps(make, a, b, p);
            CHECK(max_diff(r.mixed, r.alone) == 0.0);
            const auto want = rows(prefill_logits(*make(1), p), nv, 19, 20);
            CHECK(max_diff(r.prompt_last, want) <= 2e-4 * max_abs(want));
        }
    }
}

}  // namespace quill::test
