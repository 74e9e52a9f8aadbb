// What the CUDA tests share (tests/unit/cuda/test_cuda.cpp, test_cuda_backend.cpp): skipping without a device, the
// error measures and limits against the reference backend (see test_cuda.cpp's top), and backends made for a test.
#pragma once

#include "cuda/cuda_backend.h"
#include "cuda/dequant.h"
#include "cuda/device.h"
#include "engine/model/model.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/backend_checks.h"
#include "tests/support/test_util.h"

#include <memory>
#include <vector>

namespace quill::cuda_test {

// True when a CUDA device is usable; otherwise skips the test with the probe's reason.
inline bool have_gpu() {
    const cuda::DeviceInfo info = cuda::probe();
    if (info.count > 0) return true;
    test::skip_no_device("no CUDA device here (" + info.reason + ")");
    return false;
}

// The tiny models of test::tiny_cases() whose weight types the CUDA backend multiplies (IQ3_XXS and IQ3_S it refuses:
// test_cuda.cpp checks the refusal).
inline std::vector<test::TinyCase> cuda_tiny_cases() {
    std::vector<test::TinyCase> out;
    for (const test::TinyCase& c : test::tiny_cases())
        if (cuda::cuda_supports(c.spec.type) && cuda::cuda_supports(c.spec.ffn_down_type)) out.push_back(c);
    return out;
}

inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
    return test::max_diff(got, want) / test::rms(want);
}

// Whether the model's products of fewer than kGemmMinTokens tokens take int8 inputs (Q4_0, Q4_1, Q8_0 weights).
inline bool int8_products(const test::TinySpec& spec) { return cuda::uses_q8(spec.type) || cuda::uses_q8(spec.ffn_down_type); }

// The error of logits against the reference backend, and its limit (see the top of the file): float arithmetic,
// max |cuda - reference| / rms(reference), 1e-4 with an f32 cache and 1e-2 with an f16 one. With int8 products
// the CUDA backend computes the CPU backend's function (the input quantized per block of 32 exactly as there), and
// the CPU's limit applies in the CPU's measure (test_cpu_backend.cpp kernel_tol): max |diff| / max |reference| <=
// 3e-2. On the tiny models the CPU backend's fast path sits 1.1-2.4e-2 from the reference in that measure, and the
// GPU's errors in the first GPU run equalled the CPU's to three digits.
inline double reference_error(const std::vector<float>& got, const std::vector<float>& want, const test::TinySpec& spec) {
    return int8_products(spec) ? test::max_diff(got, want) / test::max_abs(want) : relative_error(got, want);
}
inline double reference_tol(KvType kv, const test::TinySpec& spec) {
    if (int8_products(spec)) return 3e-2;
    return kv == KvType::f32 ? 1e-4 : 1e-2;
}

// Prefill products in float (cuBLAS f32) unless a test asks for another mode: the limits below are float's. The
// tensor-core modes have their own test.
inline std::unique_ptr<cuda::CudaBackend> gpu(const Model& m, KvType kv, int64_t n_slots = 1, int64_t n_ctx = 64,
                                       bool graphs = true, cuda::GemmMode gemm = cuda::GemmMode::f32,
                                       bool flash = true) {
    cuda::CudaBackendOptions o;
    o.n_ctx = n_ctx;
    o.n_slots = n_slots;
    o.kv_type = kv;
    o.graphs = graphs;
    o.tuning.gemm = gemm;
    o.tuning.flash_attention = flash;
    return std::make_unique<cuda::CudaBackend>(m.config, m.weights, o);
}

inline std::unique_ptr<ReferenceBackend> reference(const Model& m, KvType kv, int64_t n_slots = 1, int64_t n_ctx = 64) {
    return std::make_unique<ReferenceBackend>(m.config, m.weights, ReferenceBackendOptions{n_ctx, n_slots, kv});
}

// On the GPU, f16 cache: decode steps of sequences of n_a and n_b tokens and a 20-token prompt arriving in chunks
// (test::mixed_decode_steps) give each step's logits the same bits batched as alone, and the prompt's last row a
// prefill's within 2e-4 of its largest magnitude.
inline void check_decode_batch_invariance(const Model& m, int n_a, int n_b) {
    const int64_t nv = m.config.n_vocab;
    const auto a = test::some_tokens(n_a, static_cast<int>(nv), 31);
    const auto b = test::some_tokens(n_b, static_cast<int>(nv), 32);
    const auto p = test::some_tokens(20, static_cast<int>(nv), 33);
    auto make = [&](int64_t n_slots) -> std::unique_ptr<Backend> { return gpu(m, KvType::f16, n_slots, 256); };
    const test::MixedDecode r = test::mixed_decode_steps(make, a, b, p);
    CHECK(test::max_diff(r.mixed, r.alone) == 0.0);
    const auto want = test::rows(test::prefill_logits(*make(1), p), nv, 19, 20);
    CHECK(test::max_diff(r.prompt_last, want) <= 2e-4 * test::max_abs(want));
}

}  // namespace quill::cuda_test
