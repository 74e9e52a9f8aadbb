// The CUDA backend against its oracles. Without a GPU every test here skips with the probe's reason (a skip under
// CI too: no device is the machine, not missing data); the block decoders the kernels use are checked on the host
// by test_cuda_decode.cpp on every machine.
//
// Oracles: the matmul kernel against a double-precision product of the dequantized weights; the backend against
// the reference backend (engine/reference/: double sums over the F32-dequantized weights), which computes the same
// function the GPU does (float activations into every matmul, no int8 or fp16 rounding of the inputs), so the
// limits are of float summation order, plus the fp16 roundings of an f16 cache.
//
// The limits below have not been measured on a GPU yet (no device was lent when they were written): they are set
// from the arithmetic (float sums of at most a few thousand products: ~1e-6 relative; an f16 cache rounds K and V on
// both sides but the reference also rounds q and the probabilities: ~2^-11 per rounding through two layers) with a
// wide margin. Tighten them from the first GPU run (tests/gpu/check.sh prints the measured errors).
#ifdef QUILL_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/dequant.h"
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/reference/reference_backend.h"
#include "engine/runtime/sampler.h"
#include "tests/backend_checks.h"
#include "tests/test_util.h"

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

using namespace quill;
using quill::test::prefill_logits;
using quill::test::rms;
using quill::test::rows;
using quill::test::some_tokens;

namespace {

// True when a CUDA device is usable; otherwise skips the test with the probe's reason.
bool have_gpu() {
    const cuda::DeviceInfo info = cuda::probe();
    if (info.count > 0) return true;
    test::skip_no_device("no CUDA device here (" + info.reason + ")");
    return false;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
    return test::max_diff(got, want) / rms(want);
}

// max |cuda - reference| / rms(reference) allowed on the tiny random models (see the top of the file).
double backend_tol(KvType kv) { return kv == KvType::f32 ? 1e-4 : 1e-2; }

std::unique_ptr<cuda::CudaBackend> gpu(const Model& m, KvType kv, int64_t n_slots = 1, int64_t n_ctx = 64,
                                       bool graphs = true) {
    cuda::CudaBackendOptions o;
    o.n_ctx = n_ctx;
    o.n_slots = n_slots;
    o.kv_type = kv;
    o.graphs = graphs;
    return std::make_unique<cuda::CudaBackend>(m.config, m.weights, o);
}

std::unique_ptr<ReferenceBackend> reference(const Model& m, KvType kv, int64_t n_slots = 1, int64_t n_ctx = 64) {
    return std::make_unique<ReferenceBackend>(m.config, m.weights, ReferenceBackendOptions{n_ctx, n_slots, kv});
}

template <class T>
struct DeviceArray {
    T* p = nullptr;
    explicit DeviceArray(size_t n) { REQUIRE(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess); }
    ~DeviceArray() { cudaFree(p); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    void put(const std::vector<T>& v) {
        REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    }
    std::vector<T> get(size_t n) const {
        std::vector<T> v(n);
        REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
        return v;
    }
};

}  // namespace

TEST_CASE("the CUDA probe reports the device or why there is none", "[cuda]") {
    const cuda::DeviceInfo info = cuda::probe();  // a throw fails the test
    if (info.count == 0) {
        if (info.reason.empty()) FAIL("the probe found no CUDA device and gave no reason");
        test::skip_no_device("no CUDA device here (" + info.reason + "); the probe said so");
        return;
    }
    CHECK(info.reason.empty());
    CHECK(!info.name.empty());
    CHECK(info.total_memory > (size_t{1} << 30));
    CHECK(info.cc_major >= 5);
}

TEST_CASE("the CUDA backend takes every architecture setting and the 13 weight types, before touching the device",
          "[cuda]") {
    // No device needed: the checks read the config and weights only (so --device auto falls back to the CPU).
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        INFO(c.label);
        CHECK_NOTHROW(cuda::check_model(model->config, model->weights));
    }
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                       GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                       GgmlType::Q6_K})
        CHECK(cuda::cuda_supports(t));
}

TEST_CASE("CUDA matmul equals a double-precision product on every weight type and odd shapes", "[cuda]") {
    if (!have_gpu()) return;
    const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                              GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
    std::mt19937 rng(20261130);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (GgmlType type : types) {
        const bool block = type_traits(type).block_size > 1;
        // rows not a multiple of the 4 rows a block takes; cols a multiple of the block, or odd for plain floats
        for (int64_t rows_n : {1, 67}) {
            const int64_t cols = block ? (type_traits(type).block_size == 256 ? 768 : 96) : 100;
            std::vector<float> wf(static_cast<size_t>(rows_n * cols));
            for (float& v : wf) v = normal(rng);
            std::vector<uint8_t> wq(row_size(type, cols) * static_cast<size_t>(rows_n));
            for (int64_t r = 0; r < rows_n; ++r)
                quantize_row(type, wf.data() + r * cols, wq.data() + row_size(type, cols) * r, cols);
            std::vector<float> wd(wf.size());  // what the file holds, as float
            for (int64_t r = 0; r < rows_n; ++r)
                dequantize_row(type, wq.data() + row_size(type, cols) * r, wd.data() + r * cols, cols);
            DeviceArray<uint8_t> dw(wq.size());
            dw.put(wq);
            const cuda::DeviceMatrix m{type, dw.p, cols, rows_n, row_size(type, cols)};
            for (int64_t n_tok : {1, 3, 8, 13}) {
                for (bool accumulate : {false, true}) {
                    INFO(type_name(type) << ", " << rows_n << "x" << cols << ", " << n_tok << " tokens"
                                         << (accumulate ? ", accumulating" : ""));
                    std::vector<float> x(static_cast<size_t>(n_tok * cols)), y0(static_cast<size_t>(n_tok * rows_n));
                    for (float& v : x) v = normal(rng);
                    // Poisoned output: NaN where nothing should remain, random values to add to when accumulating.
                    for (float& v : y0) v = accumulate ? normal(rng) : std::numeric_limits<float>::quiet_NaN();
                    DeviceArray<float> dx(x.size()), dy(y0.size());
                    dx.put(x);
                    dy.put(y0);
                    cuda::matmul(m, dx.p, n_tok, dy.p, accumulate, nullptr);
                    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                    const std::vector<float> y = dy.get(y0.size());
                    double err = 0, ss = 0;
                    for (int64_t t = 0; t < n_tok; ++t) {
                        for (int64_t r = 0; r < rows_n; ++r) {
                            double want = accumulate ? y0[t * rows_n + r] : 0.0;
                            for (int64_t k = 0; k < cols; ++k)
                                want += static_cast<double>(wd[r * cols + k]) * x[t * cols + k];
                            const double got = y[t * rows_n + r];
                            REQUIRE(std::isfinite(got));
                            err = std::max(err, std::fabs(got - want));
                            ss += want * want;
                        }
                    }
                    CHECK(err / std::sqrt(ss / static_cast<double>(y.size())) <= 1e-5);
                }
            }
        }
    }
}

TEST_CASE("CUDA backend prefill logits match the reference on random models of every weight type", "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const auto tokens = some_tokens(9, static_cast<int>(c.spec.n_vocab), 1);
        for (KvType kv : {KvType::f32, KvType::f16}) {
            INFO(c.label << ", KV " << kv_type_name(kv));
            const std::vector<float> want = prefill_logits(*reference(*model, kv), tokens);
            REQUIRE(rms(want) > 1.0);
            CHECK(relative_error(prefill_logits(*gpu(*model, kv), tokens), want) <= backend_tol(kv));
        }
    }
}

TEST_CASE("CUDA backend prefill equals step-by-step decode, and a long prompt crosses attention chunks",
          "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        // 200 tokens: attention goes over keys in chunks of 128; the matmul takes tokens in tiles of 8.
        for (int n : {5, 200}) {
            const auto tokens = some_tokens(n, static_cast<int>(c.spec.n_vocab), 2);
            for (KvType kv : {KvType::f32, KvType::f16}) {
                INFO(c.label << ", " << n << " tokens, KV " << kv_type_name(kv));
                auto b = gpu(*model, kv, 1, 256);
                const std::vector<float> batched = prefill_logits(*b, tokens);
                const std::vector<float> stepped = test::stepwise_logits(*gpu(*model, kv, 1, 256), tokens);
                // The same kernels either way but the matmul's token tiles: sums in the same order, so equal
                // but for float contraction differences between the 1-token and 8-token kernels.
                CHECK(relative_error(batched, stepped) <= 1e-5);
                if (n == 5) CHECK(relative_error(batched, prefill_logits(*reference(*model, kv, 1, 256), tokens)) <=
                                  backend_tol(kv));
            }
        }
    }
}

TEST_CASE("decode steps replayed as CUDA graphs equal the same steps launched kernel by kernel, bit for bit",
          "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int nv = static_cast<int>(c.spec.n_vocab);
        INFO(c.label);
        // One sequence: a 6-token prompt without logits (no graph), then 10 decode steps (one graph, replayed 9
        // times at new positions); then 3 sequences decoding together (a second graph).
        auto run = [&](bool graphs) {
            auto g = gpu(*model, KvType::f16, 3, 64, graphs);
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
        CHECK(run(true) == run(false));
    }
}

TEST_CASE("greedy tokens picked on the GPU are the first maxima of forward's logits, and other samplers pick the "
          "host's tokens from the GPU's top candidates",
          "[cuda]") {
    if (!have_gpu()) return;
    for (const test::TinyCase& c : test::tiny_cases()) {
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
    for (const test::TinyCase& c : test::tiny_cases()) {
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
    for (const test::TinyCase& c : test::tiny_cases()) {
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
            const std::vector<int32_t> ref_tokens =
                test::greedy_tokens(*reference(*model, kv, 1, 128), prompt, 64, &ref_logits);
            CHECK(relative_error(got_logits, ref_logits) <= backend_tol(kv));
            CHECK(got == ref_tokens);
            if (std::string(file) == "models/stories260K.gguf") CHECK(got == want);  // llama.cpp's, F32 weights
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
}
#endif
