// The CUDA backend as a whole against the reference backend and llama.cpp: prefill, decode, flash attention, graphs
// and programmatic launches, batched decode on the tensor cores, sampling on the device, multi-slot batches, K and V
// copies, stories260K and the refusals (the kernels alone: test_cuda.cpp, whose top says how the limits were set).
#include "cuda/cuda_backend.h"
#include "cuda/dequant.h"
#include "cuda/device.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/kernels.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "engine/runtime/sampler.h"
#include "tests/support/backend_checks.h"
#include "tests/unit/cuda/cuda_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

namespace test_cuda_backend {

using namespace quill;
using quill::test::prefill_logits;
using quill::test::rms;
using quill::test::rows;
using quill::test::some_tokens;
using namespace quill::cuda_test;


TEST_CASE("CUDA backend prefill logits match the reference on random models of every weight type", "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : cuda_tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const auto tokens = some_tokens(9, static_cast<int>(c.spec.n_vocab), 1);
        for (KvType kv : {KvType::f32, KvType::f16}) {
            INFO(c.label << ", KV " << kv_type_name(kv));
            const std::vector<float> want = prefill_logits(*reference(*model, kv), tokens);
            REQUIRE(rms(want) > 1.0);
            CHECK(reference_error(prefill_logits(*gpu(*model, kv), tokens), want, c.spec) <= reference_tol(kv, c.spec));
        }
    }
}

TEST_CASE("CUDA backend prefill equals step-by-step decode, and a long prompt crosses attention chunks",
          "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : cuda_tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        // 200 tokens: attention goes over keys in chunks of 128; the matmul takes tokens in tiles of 8.
        for (int n : {5, 200}) {
            const auto tokens = some_tokens(n, static_cast<int>(c.spec.n_vocab), 2);
            for (KvType kv : {KvType::f32, KvType::f16}) {
                INFO(c.label << ", " << n << " tokens, KV " << kv_type_name(kv));
                // Without cuBLAS and flash attention (their own tests): the same kernels either way but the
                // matmul's token tiles, sums in the same order, so equal but for float contraction differences.
                auto b = gpu(*model, kv, 1, 256, true, cuda::GemmMode::off, false);
                const std::vector<float> batched = prefill_logits(*b, tokens);
                const std::vector<float> stepped =
                    test::stepwise_logits(*gpu(*model, kv, 1, 256, true, cuda::GemmMode::off, false), tokens);
                CHECK(relative_error(batched, stepped) <= 1e-5);
                if (n == 5)
                    CHECK(reference_error(batched, prefill_logits(*reference(*model, kv, 1, 256), tokens), c.spec) <=
                          reference_tol(kv, c.spec));
            }
        }
    }
}

TEST_CASE("flash attention over prompts matches the reference, also with prompt chunks of several slots in its "
          "tiles, and decode tokens batched with a prompt keep their logits exactly",
          "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : cuda_tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int nv = static_cast<int>(c.spec.n_vocab);
        INFO(c.label);
        const auto a = some_tokens(150, nv, 8), b = some_tokens(90, nv, 9);
        // One prompt of 150 tokens (three key chunks; the gemma3 case's window of 4 masks most of each)
        const std::vector<float> want_a = prefill_logits(*reference(*model, KvType::f16, 1, 256), a);
        const std::vector<float> flash_a = prefill_logits(*gpu(*model, KvType::f16, 1, 256), a);
        const std::vector<float> plain_a =
            prefill_logits(*gpu(*model, KvType::f16, 1, 256, true, cuda::GemmMode::f32, false), a);
        const double rel_ref = relative_error(flash_a, want_a), rel_plain = relative_error(flash_a, plain_a);
        WARN(c.label << ": flash attention against the reference " << rel_ref << ", against the plain kernel "
                     << rel_plain);
        // 0.8-2.0e-3 and 0-1.4e-3 in the first GPU run
        CHECK(rel_ref <= 5e-3);
        CHECK(rel_plain <= 5e-3);
        // Two prompts interleaved by runs of 5 tokens (tiles hold rows of both slots), after two decode tokens of
        // slots 2 and 3 that lead the batch: each prompt's logits are its own, the decode tokens' are exactly those
        // of a decode step alone.
        auto g = gpu(*model, KvType::f16, 4, 256);
        auto lone = gpu(*model, KvType::f16, 4, 256);
        const auto pre = some_tokens(6, nv, 10);
        for (auto* be : {g.get(), lone.get()}) {
            Batch warm;  // slots 2 and 3 hold 3 tokens each
            for (int i = 0; i < 3; ++i) {
                warm.add(pre[i], i, 2, false);
                warm.add(pre[3 + i], i, 3, false);
            }
            std::vector<float> none;
            be->forward(warm, none);
        }
        Batch dec;
        dec.add(pre[0], 3, 2, true, true);
        dec.add(pre[1], 3, 3, true, true);
        std::vector<float> dec_alone(2 * static_cast<size_t>(nv));
        lone->forward(dec, dec_alone);
        Batch mixed;
        mixed.add(pre[0], 3, 2, true, true);
        mixed.add(pre[1], 3, 3, true, true);
        size_t ia = 0, ib = 0;
        std::vector<std::pair<int, size_t>> order;  // (slot, index) of each prompt row
        while (ia < a.size() || ib < b.size()) {
            for (int k = 0; k < 5 && ia < a.size(); ++k, ++ia) {
                mixed.add(a[ia], static_cast<int32_t>(ia), 0, true);
                order.emplace_back(0, ia);
            }
            for (int k = 0; k < 5 && ib < b.size(); ++k, ++ib) {
                mixed.add(b[ib], static_cast<int32_t>(ib), 1, true);
                order.emplace_back(1, ib);
            }
        }
        std::vector<float> out(mixed.tokens.size() * static_cast<size_t>(nv));
        g->forward(mixed, out);
        CHECK(rows(out, nv, 0, 2) == dec_alone);
        const std::vector<float> alone_b = prefill_logits(*gpu(*model, KvType::f16, 1, 256), b);
        std::vector<float> got_a, got_b, ref_a, ref_b;
        for (size_t r = 0; r < order.size(); ++r) {
            const auto [slot, i] = order[r];
            const std::vector<float> row = rows(out, nv, 2 + static_cast<int>(r), 3 + static_cast<int>(r));
            const std::vector<float> ref = rows(slot == 0 ? flash_a : alone_b, nv, static_cast<int>(i),
                                                static_cast<int>(i) + 1);
            (slot == 0 ? got_a : got_b).insert((slot == 0 ? got_a : got_b).end(), row.begin(), row.end());
            (slot == 0 ? ref_a : ref_b).insert((slot == 0 ? ref_a : ref_b).end(), ref.begin(), ref.end());
        }
        // Rows whose tile starts with the other slot's token take the plain kernel (float query and
        // probabilities): the f16 rounding of the query and probabilities apart, the same as alone
        CHECK(relative_error(got_a, ref_a) <= 1e-2);
        CHECK(relative_error(got_b, ref_b) <= 1e-2);
    }
}

TEST_CASE("decode steps replayed as CUDA graphs equal the same steps launched kernel by kernel, and fused launches "
          "the separate ones, bit for bit",
          "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : cuda_tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int nv = static_cast<int>(c.spec.n_vocab);
        INFO(c.label);
        // One sequence: a 6-token prompt without logits (no graph), then 10 decode steps (one graph, replayed 9
        // times at new positions); then 3 sequences decoding together (a second graph).
        auto run = [&](bool graphs, bool fused) {
            cuda::CudaBackendOptions o;
            o.n_ctx = 64;
            o.n_slots = 3;
            o.graphs = graphs;
            o.tuning.fused_kernels = fused;
            auto g = std::make_unique<cuda::CudaBackend>(model->config, model->weights, o);
            std::vector<float> all;
            Batch prompt;
            for (int s = 0; s < 3; ++s)
                for (int i = 0; i < 6; ++i) prompt.add((i * 7 + s * 13) % nv, i, s, false);
            std::vector<float> none;
            g->forward(prompt, none);
            std::vector<float> l(3 * static_cast<size_t>(nv));
            for (int step = 0; step < 10; ++step) {
                Batch one;
                one.add((step * 11 + 1) % nv, 6 + step, 0, true);
                g->forward(one, std::span<float>(l.data(), nv));
                all.insert(all.end(), l.begin(), l.begin() + nv);
            }
            for (int step = 0; step < 4; ++step) {
                Batch three;
                for (int s = 0; s < 3; ++s) three.add((step * 5 + s) % nv, s == 0 ? 16 + step : 6 + step, s, true);
                g->forward(three, l);
                all.insert(all.end(), l.begin(), l.end());
            }
            CHECK(g->n_graphs() == (graphs ? 2u : 0u));
            return all;
        };
        const std::vector<float> graphs_fused = run(true, true);
        CHECK(graphs_fused == run(false, true));
        CHECK(graphs_fused == run(true, false));
    }
}

namespace {

// The logits of `steps` decode steps after a prompt of prompt_len tokens in each of o.n_slots slots; step i decodes
// slots 0 .. active(i) - 1 at their next positions (a graph for each batch size, replayed).
std::vector<float> decode_logits(const Model& model, const cuda::CudaBackendOptions& o, int prompt_len, int steps,
                                 const std::function<int(int)>& active) {
    const int nv = static_cast<int>(model.config.n_vocab);
    auto g = std::make_unique<cuda::CudaBackend>(model.config, model.weights, o);
    Batch prompt;
    for (int s = 0; s < o.n_slots; ++s)
        for (int i = 0; i < prompt_len; ++i) prompt.add((i * 7 + s * 13) % nv, i, s, false);
    std::vector<float> none, all, l(static_cast<size_t>(o.n_slots) * nv);
    g->forward(prompt, none);
    for (int step = 0; step < steps; ++step) {
        Batch b;
        for (int s = 0; s < active(step); ++s) b.add((step * 11 + s * 5) % nv, prompt_len + step, s, true);
        const auto n = static_cast<std::ptrdiff_t>(b.tokens.size()) * nv;
        g->forward(b, std::span<float>(l.data(), static_cast<size_t>(n)));
        all.insert(all.end(), l.begin(), l.begin() + n);
    }
    return all;
}

test::TinySpec int8_spec(GgmlType type, int64_t n_embd, int64_t n_ff) {
    test::TinySpec spec;
    spec.type = spec.ffn_down_type = type;
    spec.n_embd = n_embd, spec.n_ff = n_ff, spec.n_head = 8, spec.n_head_kv = 2, spec.n_vocab = 320;
    return spec;
}

}  // namespace

TEST_CASE("decode graphs with the products, and the kernels between them, launched as programmatic dependents "
          "equal plain launches of the register kernels bit for bit",
          "[cuda]") {
    if (!have_gpu()) return;
    // Rows 1024 and 2048 wide (the streamed kernel takes a multiple of 1024), and 256 and 320 (the register kernel
    // only), each int8 type; one sequence for four steps, then two.
    for (auto [n_embd, n_ff] : {std::pair<int64_t, int64_t>{1024, 2048}, {256, 320}}) {
        for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
            auto model = test::make_tiny_model(int8_spec(type, n_embd, n_ff));
            INFO(type_name(type) << " " << n_embd);
            auto run = [&](bool stream, bool pdl, bool chain) {
                cuda::CudaBackendOptions o;
                o.n_ctx = 64;
                o.n_slots = 2;
                if (stream) o.tuning.stream_types = {type};
                else o.tuning.stream_types.clear();
                o.tuning.programmatic_launch = pdl;
                o.tuning.programmatic_chain = chain;
                return decode_logits(*model, o, 5, 8, [](int step) { return step < 4 ? 1 : 2; });
            };
            const std::vector<float> registers = run(false, false, false);
            CHECK(run(true, true, true) == registers);
            CHECK(run(true, true, false) == registers);
            CHECK(run(true, false, false) == registers);
            CHECK(run(false, true, true) == registers);
            CHECK(run(false, true, false) == registers);
        }
    }
}

TEST_CASE("twelve sequences decoding together on the tensor cores (int8 mma, direct and staged) equal the dp4a "
          "kernels bit for bit",
          "[cuda]") {
    if (!have_gpu()) return;
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
        auto model = test::make_tiny_model(int8_spec(type, 256, 320));
        INFO(type_name(type));
        auto run = [&](bool mma, bool staged) {
            cuda::CudaBackendOptions o;
            o.n_ctx = 32;
            o.n_slots = 12;
            o.tuning.mma_products = mma;
            o.tuning.mma_staged = staged;
            return decode_logits(*model, o, 3, 4, [](int) { return 12; });
        };
        const std::vector<float> dp4a = run(false, false);
        CHECK(run(true, false) == dp4a);
        CHECK(run(true, true) == dp4a);
    }
}

TEST_CASE("greedy tokens picked on the GPU are the first maxima of forward's logits, and other samplers pick the "
          "host's tokens from the GPU's top candidates",
          "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : cuda_tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int nv = static_cast<int>(c.spec.n_vocab);
        INFO(c.label);
        SamplingParams greedy;
        greedy.temperature = 0.0f;
        SamplingParams seeded;  // top-k 40 and the other defaults: candidates from the device
        seeded.temperature = 1.0f;
        seeded.seed = 5;
        SamplingParams penalized = seeded;  // the window's tokens come back too
        penalized.repeat_penalty = 1.5f;
        penalized.presence_penalty = 0.5f;
        SamplingParams unbounded = seeded;  // top-k off: the logits come back
        unbounded.top_k = 0;
        for (int64_t n_ids : {static_cast<int64_t>(nv), static_cast<int64_t>(nv / 3)}) {
            // Two sequences decoding 6 steps together: forward's logits (and host samplers) on one backend,
            // forward_sample on another, fed the same tokens.
            auto ref = gpu(*model, KvType::f16, 2), dev = gpu(*model, KvType::f16, 2);
            const SamplingParams* second[] = {&greedy, &seeded, &penalized, &unbounded};
            for (int mode = 0; mode < 4; ++mode) {
                INFO("mode " << mode << ", ids below " << n_ids);
                Sampler r0(greedy), r1(*second[mode]), d0(greedy), d1(*second[mode]);
                Sampler* host[] = {&r0, &r1};
                Sampler* device[] = {&d0, &d1};
                int32_t next[2] = {1, 2};
                const int base = 6 * mode;
                for (int step = 0; step < 6; ++step) {
                    Batch batch;
                    batch.add(next[0], base + step, 0, true);
                    batch.add(next[1], base + step, 1, true);
                    std::vector<float> logits(2 * static_cast<size_t>(nv));
                    ref->forward(batch, logits);
                    int32_t want[2];
                    for (int r = 0; r < 2; ++r) {
                        std::vector<float> row(logits.begin() + r * nv, logits.begin() + (r + 1) * nv);
                        std::fill(row.begin() + n_ids, row.end(), -INFINITY);
                        want[r] = host[r]->sample(row);
                    }
                    std::vector<int32_t> got(2);
                    dev->forward_sample(batch, device, n_ids, got);
                    CHECK(got[0] == want[0]);
                    CHECK(got[1] == want[1]);
                    next[0] = want[0];
                    next[1] = want[1];
                    for (int r = 0; r < 2; ++r) {
                        host[r]->accept(want[r]);
                        device[r]->accept(want[r]);
                    }
                }
            }
        }
    }
}

TEST_CASE("top candidates on the GPU are a row's largest logits, ties to the lower id, past n_ids -inf", "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(99);
    std::uniform_int_distribution<int> level(-20, 20);
    const int64_t n = 70000, n_ids = 69001, m = 5;
    std::vector<float> x(static_cast<size_t>(m * n));
    for (float& v : x) v = 0.5f * static_cast<float>(level(rng));  // thousands of ties at every level
    x[3] = 1e30f;                                                    // one far above the rest
    x[n + 5] = -1e30f;
    // Row 4's largest are zeros of both signs, which tie (the lowest ids win), over negative values.
    for (int64_t i = 0; i < n; ++i)
        x[4 * n + i] = i % 2 == 1 ? -1.0f - std::fabs(x[4 * n + i]) : i % 4 == 0 ? 0.0f : -0.0f;
    const std::vector<int32_t> need = {1, 40, 512, 7, 300};
    float* dx = nullptr;
    int32_t *dneed = nullptr, *dids = nullptr;
    float* dvals = nullptr;
    REQUIRE(cudaMalloc(&dx, sizeof(float) * x.size()) == cudaSuccess);
    REQUIRE(cudaMalloc(&dneed, sizeof(int32_t) * m) == cudaSuccess);
    REQUIRE(cudaMalloc(&dids, sizeof(int32_t) * m * cuda::kMaxTopCandidates) == cudaSuccess);
    REQUIRE(cudaMalloc(&dvals, sizeof(float) * m * cuda::kMaxTopCandidates) == cudaSuccess);
    REQUIRE(cudaMemcpy(dx, x.data(), sizeof(float) * x.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(dneed, need.data(), sizeof(int32_t) * m, cudaMemcpyHostToDevice) == cudaSuccess);
    cuda::top_candidates(dx, m, n, n, n_ids, dneed, dids, dvals, nullptr);
    std::vector<int32_t> ids(static_cast<size_t>(m * cuda::kMaxTopCandidates));
    std::vector<float> vals(ids.size());
    REQUIRE(cudaMemcpy(ids.data(), dids, sizeof(int32_t) * ids.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    REQUIRE(cudaMemcpy(vals.data(), dvals, sizeof(float) * vals.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    cudaFree(dx);
    cudaFree(dneed);
    cudaFree(dids);
    cudaFree(dvals);
    for (int64_t r = 0; r < m; ++r) {
        INFO("row " << r << ", " << need[r] << " candidates");
        const float* row = x.data() + r * n;
        auto value = [&](int32_t i) { return i < n_ids ? row[i] : -INFINITY; };
        std::vector<int32_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + need[r], order.end(), [&](int32_t a, int32_t b) {
            return value(a) > value(b) || (value(a) == value(b) && a < b);
        });
        std::vector<int32_t> want(order.begin(), order.begin() + need[r]);
        std::vector<int32_t> got(ids.begin() + r * cuda::kMaxTopCandidates,
                                 ids.begin() + r * cuda::kMaxTopCandidates + need[r]);
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        CHECK(got == want);
        for (int32_t i = 0; i < need[r]; ++i) {
            const size_t at = static_cast<size_t>(r * cuda::kMaxTopCandidates + i);
            CHECK(vals[at] == value(ids[at]));
        }
    }
}

TEST_CASE("a mixed multi-slot batch on the CUDA backend equals the sequences run apart", "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : cuda_tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int nv = static_cast<int>(c.spec.n_vocab);
        const auto a = some_tokens(7, nv, 3), b = some_tokens(4, nv, 4);
        for (KvType kv : {KvType::f32, KvType::f16}) {
            INFO(c.label << ", KV " << kv_type_name(kv));
            const std::vector<float> la = prefill_logits(*gpu(*model, kv), a);
            const std::vector<float> lb = prefill_logits(*gpu(*model, kv), b);
            // Slot 1 first gets b's first 2 tokens, then one batch holds a's 7 (slot 0) and b's last 2 (slot 1),
            // interleaved, every row asking for logits.
            auto g = gpu(*model, kv, 2);
            Batch first;
            first.add(b[0], 0, 1, true);
            first.add(b[1], 1, 1, true);
            std::vector<float> l1(2 * static_cast<size_t>(nv));
            g->forward(first, l1);
            Batch mixed;
            for (int i = 0; i < 7; ++i) {
                mixed.add(a[i], i, 0, true);
                if (i == 2) mixed.add(b[2], 2, 1, true);
                if (i == 5) mixed.add(b[3], 3, 1, true);
            }
            std::vector<float> l2(9 * static_cast<size_t>(nv));
            g->forward(mixed, l2);
            CHECK(relative_error(l1, rows(lb, nv, 0, 2)) <= 1e-5);
            int ia = 0;
            for (int r = 0; r < 9; ++r) {
                const bool is_b = r == 3 || r == 7;
                const std::vector<float> want = is_b ? rows(lb, nv, r == 3 ? 2 : 3, r == 3 ? 3 : 4)
                                                     : rows(la, nv, ia, ia + 1);
                if (!is_b) ++ia;
                INFO("row " << r);
                CHECK(relative_error(rows(l2, nv, r, r + 1), want) <= 1e-5);
            }
        }
    }
}

TEST_CASE("K and V copied between CUDA slots continue a sequence as if it had run there", "[cuda]") {
    if (!have_gpu()) return;
    // As the CPU test: slot 1 (another sequence) takes positions 0..21 of slot 0, slot 2 (its own first 5, then
    // other tokens) takes 5..21; both go on with other tokens and must give the logits of that sequence run alone
    // on the GPU (the same kernels on the same inputs: to float summation order at most).
    for (const test::TinyCase& c : cuda_tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int nv = static_cast<int>(c.spec.n_vocab);
        const auto a = some_tokens(30, nv, 5), other = some_tokens(30, nv, 6);
        std::vector<int32_t> seq(a.begin(), a.begin() + 21);
        seq.insert(seq.end(), other.begin() + 21, other.end());
        for (KvType kv : {KvType::f32, KvType::f16}) {
            INFO(c.label << ", KV " << kv_type_name(kv));
            const std::vector<float> want = prefill_logits(*gpu(*model, kv), seq);
            auto g = gpu(*model, kv, 3);
            auto run = [&](const std::vector<int32_t>& t, int p0, int p1, int32_t slot) {
                Batch batch;
                for (int p = p0; p < p1; ++p) batch.add(t[p], p, slot, true);
                std::vector<float> out(static_cast<size_t>((p1 - p0) * nv));
                g->forward(batch, out);
                return out;
            };
            run(a, 0, 30, 0);
            run(other, 0, 28, 1);
            run(a, 0, 5, 2);
            run(other, 5, 25, 2);
            REQUIRE(g->can_copy_kv());
            g->copy_kv(0, 1, 0, 21);
            g->copy_kv(0, 2, 5, 21);
            for (int32_t slot : {1, 2}) {
                INFO("slot " << slot);
                CHECK(relative_error(run(seq, 21, 30, slot), rows(want, nv, 21, 30)) <= 1e-5);
            }
        }
    }
}

TEST_CASE("stories260K on the CUDA backend: the reference's logits and llama.cpp's 64 greedy tokens", "[cuda][model]") {
    if (!have_gpu()) return;
    for (const char* file : {"models/stories260K.gguf", "models/stories260K-Q8_0mix.gguf"}) {
        auto path = test::require_testdata(file);
        if (!path) return;
        INFO(file);
        auto model = Model::load(path->string());
        const auto ref = path->parent_path() / "ref/stories260K-f32.greedy.txt";
        const auto prompt = test::read_ref_ids(ref, "prompt_tokens");
        const auto want = test::read_ref_ids(ref, "generated_tokens");
        for (KvType kv : {KvType::f32, KvType::f16}) {
            INFO("KV " << kv_type_name(kv));
            auto g = gpu(*model, kv, 1, 128);
            std::vector<float> got_logits, ref_logits;
            const std::vector<int32_t> got = test::greedy_tokens(*g, prompt, 64, &got_logits);
            if (std::string(file) == "models/stories260K.gguf") {
                // F32 weights: the reference's function, and llama.cpp's tokens
                const std::vector<int32_t> ref_tokens =
                    test::greedy_tokens(*reference(*model, kv, 1, 128), prompt, 64, &ref_logits);
                CHECK(relative_error(got_logits, ref_logits) <= (kv == KvType::f32 ? 1e-4 : 1e-2));
                CHECK(got == ref_tokens);
                CHECK(got == want);
            } else {
                // Q8_0 weights: int8 products, as the CPU backend's kernels and llama.cpp's: the CPU backend's
                // logits (float summation order apart) and llama.cpp's tokens for this file
                cpu::CpuBackendOptions co;
                co.n_ctx = 128;
                co.n_threads = 2;
                co.kv_type = kv;
                cpu::CpuBackend cpu_backend(model->config, model->weights, co);
                const std::vector<int32_t> cpu_tokens = test::greedy_tokens(cpu_backend, prompt, 64, &ref_logits);
                // The same int8 products, but the CPU rounds the F16 products' inputs (ffn_down) to fp16 and the
                // GPU does not: inputs a few 1e-4 apart land on other int8 steps, so the two carry different
                // rounding of the same size (first GPU run: 3.4-4.2e-2 of the rms apart, 1.3e-2 of the largest
                // logit). Both stay within the CPU's int8 limit of the float reference.
                const double to_cpu = test::max_diff(got_logits, ref_logits) / test::max_abs(ref_logits);
                std::vector<float> float_logits;
                test::greedy_tokens(*reference(*model, kv, 1, 128), prompt, 64, &float_logits);
                const double to_ref = test::max_diff(got_logits, float_logits) / test::max_abs(float_logits);
                WARN("stories260K Q8_0 mix, KV " << kv_type_name(kv) << ": CUDA against the CPU backend " << to_cpu
                                                 << ", against the reference " << to_ref << " (of the largest logit)");
                CHECK(to_cpu <= 3e-2);
                CHECK(to_ref <= 3e-2);
                CHECK(got == cpu_tokens);
                const auto mix_ref = path->parent_path() / "ref/stories260K-Q8_0mix.greedy.txt";
                CHECK(got == test::read_ref_ids(mix_ref, "generated_tokens"));
            }
        }
    }
}

TEST_CASE("the CUDA backend refuses what it cannot run with a clear error", "[cuda]") {
    if (!have_gpu()) return;
    test::TinySpec spec;
    auto model = test::make_tiny_model(spec);
    SECTION("a context far beyond the GPU's memory names the largest that fits") {
        cuda::CudaBackendOptions o;
        o.n_ctx = int64_t{1} << 40;
        try {
            cuda::CudaBackend b(model->config, model->weights, o);
            FAIL("a 2^40-position cache was accepted");
        } catch (const UsageError& e) {
            CHECK(std::string(e.what()).find("the largest context that fits is") != std::string::npos);
        }
    }
    SECTION("bad batches are usage errors and leave the backend usable") {
        auto g = gpu(*model, KvType::f16);
        std::vector<float> logits(static_cast<size_t>(spec.n_vocab));
        Batch outside;
        outside.add(1, 64, 0, true);
        CHECK_THROWS_AS(g->forward(outside, logits), UsageError);
        Batch fine;
        fine.add(1, 0, 0, true);
        g->forward(fine, logits);
        CHECK(std::isfinite(logits[0]));
    }
    SECTION("qwen3moe's mixture of experts is taken (test_cuda_moe.cpp), another architecture's refused naming it "
            "before touching the device") {
        auto moe = SyntheticModel::make(synthetic_config("qwen3moe-tiny"), GgmlType::F32, 42);
        REQUIRE(moe->config.moe());
        CHECK_NOTHROW(cuda::check_model(moe->config, moe->weights));
        moe->config.arch = "gpt-oss";
        CHECK_THROWS_WITH(cuda::check_model(moe->config, moe->weights),
                          Catch::Contains("gpt-oss") && Catch::Contains("mixture of experts (8 experts"));
        CHECK_THROWS_AS(cuda::CudaBackend(moe->config, moe->weights, cuda::CudaBackendOptions{}), FileError);
    }
}

}  // namespace test_cuda_backend
