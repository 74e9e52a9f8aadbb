// The CUDA backend against its oracles. Without a GPU every test here skips with the probe's reason (a skip under
// CI too: no device is the machine, not missing data); built without CUDA, each skips saying so (tests/CMakeLists.txt
// builds this file only with QUILL_CUDA). The block decoders the kernels use are checked on the host by
// tests/unit/cuda/host/test_cuda_decode.cpp on every machine.
//
// Oracles: the kernels against double-precision products of the dequantized weights (the int8 products: of the
// quantized inputs, whose bytes must equal the CPU's); the backend against the reference backend (engine/reference/:
// double sums over the F32-dequantized weights, float activations into every matmul), so that the float paths'
// limits are of float summation order plus the fp16 roundings of an f16 cache, and the int8 paths' those of the CPU
// backend's int8 kernels (reference_tol). Where a limit was set from a GPU run's measured errors, its comment gives
// them (an H200, 2026-12-04; tests/gpu/check.sh prints the WARN lines with the errors).
#include "cuda/cuda_backend.h"
#include "cuda/dequant.h"
#include "cuda/device.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/kernels.h"
#include "engine/error.h"
#include "engine/model/model.h"
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

namespace test_cuda {

using namespace quill;
using quill::test::prefill_logits;
using quill::test::rms;
using quill::test::rows;
using quill::test::some_tokens;
using namespace quill::cuda_test;

namespace {

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

// max |y - want| / rms(want) over n_tok tokens and `rows` rows, want = (y0 when accumulating) + W x in double, W
// [rows, cols] and x [n_tok, cols] as given; every y finite.
double product_error(const std::vector<float>& y, const std::vector<float>& y0, bool accumulate,
                     const std::vector<float>& w, const std::vector<double>& x, int64_t rows, int64_t cols,
                     int64_t n_tok) {
    double err = 0, ss = 0;
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
            double want = accumulate ? y0[t * rows + r] : 0.0;
            for (int64_t k = 0; k < cols; ++k) want += static_cast<double>(w[r * cols + k]) * x[t * cols + k];
            const double got = y[t * rows + r];
            REQUIRE(std::isfinite(got));
            err = std::max(err, std::fabs(got - want));
            ss += want * want;
        }
    }
    return err / std::sqrt(ss / static_cast<double>(y.size()));
}

std::vector<double> as_doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

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

TEST_CASE("the CUDA backend takes every architecture setting and the 16 weight types, before touching the device",
          "[cuda]") {
    // No device needed: the checks read the config and weights only (so --device auto falls back to the CPU).
    for (const test::TinyCase& c : cuda_tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        INFO(c.label);
        CHECK_NOTHROW(cuda::check_model(model->config, model->weights));
    }
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                       GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                       GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4})
        CHECK(cuda::cuda_supports(t));
}

TEST_CASE("a model of a weight type without CUDA kernels is refused by the CUDA backend in one line naming the type "
          "and --device cpu, before touching the device", "[cuda]") {
    // (--device auto then runs it on the CPU: make_backend falls back on this refusal)
    for (GgmlType type : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S,
                          GgmlType::IQ1_S, GgmlType::IQ1_M}) {
        test::TinySpec spec;
        spec.type = spec.ffn_down_type = type;
        spec.n_embd = 256;
        spec.n_ff = 256;
        auto model = test::make_tiny_model(spec);
        INFO(type_name(type));
        CHECK_FALSE(cuda::cuda_supports(type));
        try {
            cuda::check_model(model->config, model->weights);
            FAIL("check_model accepted " << type_name(type));
        } catch (const FileError& e) {
            const std::string what = e.what();
            CHECK(what.find(std::string("type ") + std::string(type_name(type))) != std::string::npos);
            CHECK(what.find("--device cpu runs it") != std::string::npos);
            CHECK(what.find('\n') == std::string::npos);
        }
    }
}

TEST_CASE("GEMM modes are read from their names (QUILL_CUDA_GEMM) and nothing else and the CUDA options default "
          "as documented",
          "[cuda]") {
    // No device needed.
    for (cuda::GemmMode m : {cuda::GemmMode::off, cuda::GemmMode::f32, cuda::GemmMode::tf32, cuda::GemmMode::f16})
        CHECK(cuda::parse_gemm_mode(cuda::gemm_mode_name(m)) == m);
    CHECK_THROWS_AS(cuda::parse_gemm_mode("TF32"), UsageError);
    CHECK_THROWS_AS(cuda::parse_gemm_mode(""), UsageError);
    CHECK(cuda::CudaBackendOptions{}.graphs);
    const cuda::Tuning o = cuda::CudaBackendOptions{}.tuning;
    CHECK(o.gemm == cuda::GemmMode::tf32);
    CHECK((o.int8_products && o.flash_attention && o.fused_kernels));
    // Streamed products for Q4_0 and Q4_1 (faster on the H200), not Q8_0 (slower there); launched as programmatic
    // dependents
    CHECK(o.stream_types == std::vector<GgmlType>{GgmlType::Q4_0, GgmlType::Q4_1});
    CHECK((o.stream_stages == 0 && o.programmatic_launch && o.programmatic_chain));
    // and more than eight decode tokens on the tensor cores (faster there from 16 sequences on)
    CHECK(o.mma_products);
    CHECK(!o.mma_staged);  // (not yet run on a GPU)
    // The GEMM's scratch: one slice of at most kGemmSliceElems (at least a row), plus the F16 input in f16 mode.
    CHECK(cuda::gemm_scratch_bytes(cuda::GemmMode::off, 1 << 20, 4096, 100) == 0);
    CHECK(cuda::gemm_scratch_bytes(cuda::GemmMode::tf32, 4096 * 4096, 4096, 100) == 4096u * 4096u * 4u);
    CHECK(cuda::gemm_scratch_bytes(cuda::GemmMode::tf32, int64_t{1} << 30, 4096, 100) ==
          static_cast<size_t>(cuda::kGemmSliceElems) * 4u);
    CHECK(cuda::gemm_scratch_bytes(cuda::GemmMode::f16, 4096 * 4096, 4096, 100) ==
          4096u * 4096u * 2u + 4096u * 100u * 2u);
}

TEST_CASE("CUDA matmul equals a double-precision product on every weight type and odd shapes", "[cuda]") {
    if (!have_gpu()) return;
    const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                              GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL,
                              GgmlType::IQ4_XS, GgmlType::MXFP4};
    std::mt19937 rng(20261130);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (GgmlType type : types) {
        const bool block = type_traits(type).block_size > 1;
        // rows not a multiple of the 4 rows a block takes; cols a multiple of the block, or for plain floats odd
        // (one element a lane) and a multiple of 8 (eight a lane, 16-byte loads; the last 256 short)
        std::vector<int64_t> col_counts{block ? (type_traits(type).block_size == 256 ? 768 : 96) : 100};
        if (!block) col_counts.push_back(264);
        for (const int64_t cols : col_counts)
        for (int64_t rows_n : {1, 67}) {
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
                    CHECK(product_error(dy.get(y0.size()), y0, accumulate, wd, as_doubles(x), rows_n, cols, n_tok) <=
                          1e-5);
                }
            }
        }
    }
}

namespace {

// A random rows_n x cols matrix of `type` on the device, in the GGUF layout or packed (cuda/dequant.h), with its
// dequantized floats.
struct TestMatrix {
    std::unique_ptr<DeviceArray<uint8_t>> bytes;
    cuda::DeviceMatrix m;
    std::vector<float> wd;
};

TestMatrix test_matrix(GgmlType type, int64_t rows_n, int64_t cols, bool packed, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> wf(static_cast<size_t>(rows_n * cols));
    for (float& v : wf) v = normal(rng);
    const size_t rb = row_size(type, cols);
    std::vector<uint8_t> wq(rb * static_cast<size_t>(rows_n));
    for (int64_t r = 0; r < rows_n; ++r) quantize_row(type, wf.data() + r * cols, wq.data() + rb * r, cols);
    TestMatrix t;
    t.wd.resize(wf.size());
    for (int64_t r = 0; r < rows_n; ++r) dequantize_row(type, wq.data() + rb * r, t.wd.data() + r * cols, cols);
    const int64_t blocks = static_cast<int64_t>(wq.size()) / (packed ? cuda::packed_quant_bytes(type) +
                                                                          cuda::packed_scale_bytes(type)
                                                                    : 1);
    if (packed) {
        std::vector<uint8_t> planes(wq.size());
        cuda::pack_blocks(type, wq.data(), blocks, planes.data(),
                          planes.data() + blocks * cuda::packed_quant_bytes(type));
        wq = planes;
    }
    t.bytes = std::make_unique<DeviceArray<uint8_t>>(wq.size());
    t.bytes->put(wq);
    t.m = cuda::DeviceMatrix{type, t.bytes->p, cols, rows_n, rb,
                             packed ? t.bytes->p + blocks * cuda::packed_quant_bytes(type) : nullptr};
    return t;
}

}  // namespace

TEST_CASE("int8 products: the GPU quantizes activations bit for bit as the CPU does, and the products equal a "
          "double-precision product of the quantized values, in either weight layout",
          "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(20261205);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // 10 blocks a row, 293 (nine or ten a lane), and 160: five chunks of 32 blocks, which the streamed kernel takes
    // (packed, eight tokens or fewer)
    for (int64_t cols : {320, 9376, 5120}) {
        for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
            for (bool packed : {false, true}) {
                const int64_t rows_n = 67, nb = cols / 32;
                TestMatrix w = test_matrix(type, rows_n, cols, packed, rng);
                // 40 tokens: four rows a warp (the last warp's rows past the matrix)
                for (int64_t n_tok : {1, 3, 8, 13, 40}) {
                    for (bool accumulate : {false, true}) {
                        INFO(type_name(type) << (packed ? ", packed" : ", GGUF layout") << ", " << cols << " columns, "
                                             << n_tok << " tokens" << (accumulate ? ", accumulating" : ""));
                        std::vector<float> x(static_cast<size_t>(n_tok * cols));
                        for (float& v : x) v = normal(rng) * (1.0f + static_cast<float>(rng() % 4));
                        x[5] = 0.0f;  // and one all-zero block: scale 0
                        if (n_tok > 1)
                            for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(cols + 64 + i)] = 0.0f;
                        // The CPU's quantization of every block, with its scale rounded to fp16.
                        std::vector<int8_t> want_q(x.size());
                        std::vector<float> want_ds(static_cast<size_t>(2 * n_tok * nb));
                        for (int64_t b = 0; b < n_tok * nb; ++b) {
                            int32_t sums[2];
                            const float d =
                                cpu::generic::quantize_block(x.data() + 32 * b, want_q.data() + 32 * b, sums);
                            const float scale = fp16_to_fp32(fp32_to_fp16(d));
                            want_ds[2 * b] = scale;
                            want_ds[2 * b + 1] = scale * static_cast<float>(sums[0] + sums[1]);
                        }
                        DeviceArray<float> dx(x.size()), dds(want_ds.size());
                        DeviceArray<int8_t> dq(x.size());
                        dx.put(x);
                        cuda::quantize_q8(dx.p, n_tok, cols, dq.p, dds.p, nullptr);
                        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                        CHECK(dq.get(x.size()) == want_q);
                        CHECK(dds.get(want_ds.size()) == want_ds);

                        std::vector<float> y0(static_cast<size_t>(n_tok * rows_n));
                        for (float& v : y0) v = accumulate ? normal(rng) : std::numeric_limits<float>::quiet_NaN();
                        DeviceArray<float> dy(y0.size());
                        dy.put(y0);
                        // 40 tokens: also four rows a warp (the other must give the same bits)
                        cuda::matmul_q8(w.m, dq.p, dds.p, n_tok, dy.p, accumulate, nullptr);
                        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                        if (n_tok > 8) {
                            DeviceArray<float> dy4(y0.size());
                            dy4.put(y0);
                            cuda::matmul_q8(w.m, dq.p, dds.p, n_tok, dy4.p, accumulate, nullptr, {.rows_kernel = true});
                            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                            CHECK(dy4.get(y0.size()) == dy.get(y0.size()));
                            // On the tensor cores (packed weights): the same bits
                            const cuda::ProductSet one = cuda::product_set(w.m, nullptr);
                            CHECK(cuda::mma_takes(one, n_tok) == packed);
                            if (cuda::mma_takes(one, n_tok)) {
                                for (bool staged : {false, true}) {  // and with the tokens staged in shared memory
                                    DeviceArray<float> dym(y0.size());
                                    dym.put(y0);
                                    cuda::matmul_q8(w.m, dq.p, dds.p, n_tok, dym.p, accumulate, nullptr,
                                                    {.mma = true, .mma_staged = staged});
                                    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                                    CHECK(dym.get(y0.size()) == dy.get(y0.size()));
                                }
                            }
                        }
                        // Streamed through shared memory: the same bits, with the grid the device fits and with two
                        // blocks (eight warps: eight or nine rows a warp, their chunks in one pipeline), the ring at
                        // each number of stages it takes
                        const cuda::ProductSet one = cuda::product_set(w.m, nullptr);
                        CHECK(cuda::stream_takes(one, n_tok) == (packed && cols % 1024 == 0 && n_tok <= 8));
                        if (cuda::stream_takes(one, n_tok)) {
                            for (int blocks : {0, 2}) {
                                for (int stages : {2, 3, 4, 6, 8}) {
                                    DeviceArray<float> dys(y0.size());
                                    dys.put(y0);
                                    cuda::matmul_q8(w.m, dq.p, dds.p, n_tok, dys.p, accumulate, nullptr,
                                                    {.stream = true, .stream_blocks = blocks, .stream_stages = stages});
                                    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                                    CHECK(dys.get(y0.size()) == dy.get(y0.size()));
                                }
                            }
                            // In a product set with a second matrix: each member's rows as apart
                            TestMatrix w2 = test_matrix(type, 29, cols, packed, rng);
                            DeviceArray<float> a2(static_cast<size_t>(n_tok * 29)), s1(y0.size()),
                                s2(static_cast<size_t>(n_tok * 29));
                            cuda::matmul_q8(w2.m, dq.p, dds.p, n_tok, a2.p, false, nullptr);
                            cuda::ProductSet ps = cuda::product_set(w.m, s1.p);
                            ps.add(w2.m, s2.p);
                            s1.put(y0);
                            cuda::matmul_q8(ps, dq.p, dds.p, n_tok, accumulate, nullptr,
                                            {.rows_kernel = true, .stream = true, .stream_blocks = 3});
                            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                            CHECK(s1.get(y0.size()) == dy.get(y0.size()));
                            if (!accumulate) CHECK(s2.get(static_cast<size_t>(n_tok * 29)) ==
                                                   a2.get(static_cast<size_t>(n_tok * 29)));
                        }
                        // Launched as a programmatic dependent of the quantization that writes its input (itself a
                        // dependent of the memsets, and which lets it start at once), the streamed kernel and the
                        // register kernel (which brings its rows into L2 first): each waits for that input, whose
                        // buffers held other bytes until then.
                        for (bool stream : {true, false}) {
                            if (stream && !cuda::stream_takes(one, n_tok)) continue;
                            cudaStream_t st = nullptr;
                            REQUIRE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess);
                            DeviceArray<int8_t> q2(x.size());
                            DeviceArray<float> ds2(want_ds.size()), yp(y0.size());
                            REQUIRE(cudaMemset(q2.p, 0x55, x.size()) == cudaSuccess);
                            REQUIRE(cudaMemset(ds2.p, 0x3f, want_ds.size() * sizeof(float)) == cudaSuccess);
                            yp.put(y0);
                            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                            cuda::quantize_q8(dx.p, n_tok, cols, q2.p, ds2.p, st, true);
                            cuda::matmul_q8(cuda::product_set(w.m, yp.p), q2.p, ds2.p, n_tok, accumulate, st,
                                            {.stream = stream, .pdl = true});
                            REQUIRE(cudaStreamSynchronize(st) == cudaSuccess);
                            CHECK(yp.get(y0.size()) == dy.get(y0.size()));
                            REQUIRE(cudaStreamDestroy(st) == cudaSuccess);
                        }
                        std::vector<double> xd(x.size());  // the quantized input
                        for (size_t k = 0; k < x.size(); ++k)
                            xd[k] = static_cast<double>(want_ds[2 * (k / 32)]) * want_q[k];
                        CHECK(product_error(dy.get(y0.size()), y0, accumulate, w.wd, xd, rows_n, cols, n_tok) <= 1e-5);
                    }
                }
            }
        }
    }
}

TEST_CASE("RMSNorm on the GPU: rows within float rounding of a double norm, in place too, quantized as quantize_q8 "
          "quantizes the output, and a non-finite input flagged",
          "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(20261208);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // 64 and 576 wide: one float4 a thread or none (the register form), 4096 four, 8192 eight; 8224 (nine) and 102
    // (not a multiple of 4): the strided form
    for (int64_t d : {64, 576, 4096, 8192, 8224, 102}) {
        INFO(d << " wide");
        const int64_t n = 3;
        const bool q8 = d % 32 == 0;
        const float eps = 1e-5f;
        std::vector<float> x(static_cast<size_t>(n * d)), w(static_cast<size_t>(d));
        for (float& v : x) v = 3.0f * normal(rng);
        for (float& v : w) v = normal(rng);
        DeviceArray<float> dx(x.size()), dw(w.size()), dy(x.size()), dds(static_cast<size_t>(2 * n * d / 32 + 2));
        DeviceArray<float> dds2(static_cast<size_t>(2 * n * d / 32 + 2));
        DeviceArray<int8_t> dq(x.size()), dq2(x.size());
        DeviceArray<int32_t> flag(1);
        dx.put(x);
        dw.put(w);
        dy.put(std::vector<float>(x.size(), std::numeric_limits<float>::quiet_NaN()));  // every element written
        flag.put({INT32_MAX});
        cuda::rms_norm_q8(dx.p, dw.p, dy.p, n, d, eps, q8 ? dq.p : nullptr, dds.p, flag.p, 7, nullptr);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        const std::vector<float> y = dy.get(x.size());
        double err = 0, top = 0;
        for (int64_t t = 0; t < n; ++t) {
            double ss = 0;
            for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(x[t * d + i]) * x[t * d + i];
            const double scale = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
            for (int64_t i = 0; i < d; ++i) {
                const double want = x[t * d + i] * scale * w[i];
                REQUIRE(std::isfinite(y[t * d + i]));
                err = std::max(err, std::fabs(y[t * d + i] - want));
                top = std::max(top, std::fabs(want));
            }
        }
        CHECK(err <= 2e-6 * top);
        CHECK(flag.get(1)[0] == INT32_MAX);
        if (q8) {  // the norm's quantization is quantize_q8's of the norm's output
            cuda::quantize_q8(dy.p, n, d, dq2.p, dds2.p, nullptr);
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            CHECK(dq.get(x.size()) == dq2.get(x.size()));
            CHECK(dds.get(static_cast<size_t>(2 * n * d / 32)) == dds2.get(static_cast<size_t>(2 * n * d / 32)));
        }
        // In place (the per-head Q and K norms): the same bits
        cuda::rms_norm(dx.p, dw.p, dx.p, n, d, eps, nullptr);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(dx.get(x.size()) == y);
        // A non-finite input: the flag takes the layer
        x[static_cast<size_t>(d + d / 2)] = std::numeric_limits<float>::infinity();
        dx.put(x);
        cuda::rms_norm_q8(dx.p, dw.p, dy.p, n, d, eps, q8 ? dq.p : nullptr, dds.p, flag.p, 7, nullptr);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(flag.get(1)[0] == 7);
    }
}

TEST_CASE("a product set multiplies up to three alike matrices in one launch, bit for bit as apart and as eight "
          "tokens at a time",
          "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(20261207);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (GgmlType type : {GgmlType::F16, GgmlType::Q4_K, GgmlType::Q4_0, GgmlType::Q8_0}) {
        const bool q8 = cuda::uses_q8(type);
        const int64_t cols = type_traits(type).block_size == 256 ? 512 : 256;
        // rows not multiples of the 4 a block (or 16 a block of the many-token int8 kernel) takes
        std::vector<TestMatrix> ms;
        for (int64_t rows_n : {37, 5, 22}) ms.push_back(test_matrix(type, rows_n, cols, q8, rng));
        for (int64_t n_tok : {1, 5, 40}) {
            INFO(type_name(type) << ", " << n_tok << " tokens");
            std::vector<float> x(static_cast<size_t>(n_tok * cols));
            for (float& v : x) v = normal(rng);
            DeviceArray<float> dx(x.size()), dds(static_cast<size_t>(2 * n_tok * cols / 32));
            DeviceArray<int8_t> dq(x.size());
            dx.put(x);
            cuda::quantize_q8(dx.p, n_tok, cols, dq.p, dds.p, nullptr);
            std::vector<std::unique_ptr<DeviceArray<float>>> apart, together;
            cuda::ProductSet ps;
            for (const TestMatrix& m : ms) {
                apart.push_back(std::make_unique<DeviceArray<float>>(static_cast<size_t>(n_tok * m.m.rows)));
                together.push_back(std::make_unique<DeviceArray<float>>(static_cast<size_t>(n_tok * m.m.rows)));
                // apart and at most eight tokens a call: one row a warp (the many-token int8 kernel must agree)
                for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
                    const int64_t nt = std::min<int64_t>(8, n_tok - t0);
                    float* y = apart.back()->p + t0 * m.m.rows;
                    if (q8) cuda::matmul_q8(m.m, dq.p + t0 * cols, dds.p + 2 * t0 * (cols / 32), nt, y, false, nullptr);
                    else cuda::matmul(m.m, dx.p + t0 * cols, nt, y, false, nullptr);
                }
                ps.add(m.m, together.back()->p);
            }
            // 40 tokens: four rows a warp
            if (q8) cuda::matmul_q8(ps, dq.p, dds.p, n_tok, false, nullptr, {.rows_kernel = true});
            else cuda::matmul(ps, dx.p, n_tok, false, nullptr);
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            for (size_t i = 0; i < ms.size(); ++i) {
                const size_t count = static_cast<size_t>(n_tok * ms[i].m.rows);
                const std::vector<float> a = apart[i]->get(count);
                CHECK(together[i]->get(count) == a);
                CHECK(std::all_of(a.begin(), a.end(), [](float v) { return std::isfinite(v); }));
            }
            // On the tensor cores: 16-row tiles across the members' boundaries, the same bits
            for (bool staged : {false, true}) {
                if (!q8 || !cuda::mma_takes(ps, n_tok)) break;
                INFO((staged ? "staged" : "direct"));
                cuda::ProductSet pm;
                std::vector<std::unique_ptr<DeviceArray<float>>> by_mma;
                for (const TestMatrix& m : ms) {
                    by_mma.push_back(std::make_unique<DeviceArray<float>>(static_cast<size_t>(n_tok * m.m.rows)));
                    pm.add(m.m, by_mma.back()->p);
                }
                cuda::matmul_q8(pm, dq.p, dds.p, n_tok, false, nullptr, {.mma = true, .mma_staged = staged});
                REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                for (size_t i = 0; i < ms.size(); ++i) {
                    const size_t count = static_cast<size_t>(n_tok * ms[i].m.rows);
                    CHECK(by_mma[i]->get(count) == apart[i]->get(count));
                }
            }
        }
    }
}

TEST_CASE("the packed weight layout decodes as the GGUF layout in the float matmul, dequantization and embedding",
          "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(20261206);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
        INFO(type_name(type));
        const int64_t rows_n = 37, cols = 96;
        std::mt19937 a(7), b(7);  // the same matrix in both layouts
        TestMatrix gguf = test_matrix(type, rows_n, cols, false, a), packed = test_matrix(type, rows_n, cols, true, b);
        REQUIRE(gguf.wd == packed.wd);
        const int64_t n_tok = 5;
        std::vector<float> x(static_cast<size_t>(n_tok * cols));
        for (float& v : x) v = normal(rng);
        DeviceArray<float> dx(x.size()), y1(n_tok * rows_n), y2(n_tok * rows_n);
        dx.put(x);
        cuda::matmul(gguf.m, dx.p, n_tok, y1.p, false, nullptr);
        cuda::matmul(packed.m, dx.p, n_tok, y2.p, false, nullptr);
        DeviceArray<float> d1(rows_n * cols), d2(rows_n * cols);
        cuda::dequantize_rows(gguf.m, 0, rows_n, false, d1.p, nullptr);
        cuda::dequantize_rows(packed.m, 0, rows_n, false, d2.p, nullptr);
        const std::vector<int32_t> toks{0, 36, 5, 5, 20};
        DeviceArray<int32_t> dt(toks.size());
        dt.put(toks);
        DeviceArray<float> e1(toks.size() * cols), e2(toks.size() * cols);
        cuda::embed(gguf.m, dt.p, static_cast<int64_t>(toks.size()), 1.5f, e1.p, nullptr);
        cuda::embed(packed.m, dt.p, static_cast<int64_t>(toks.size()), 1.5f, e2.p, nullptr);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(y1.get(n_tok * rows_n) == y2.get(n_tok * rows_n));
        CHECK(d2.get(rows_n * cols) == packed.wd);
        CHECK(d1.get(rows_n * cols) == gguf.wd);
        const std::vector<float> emb = e2.get(toks.size() * cols);
        CHECK(e1.get(toks.size() * cols) == emb);
        CHECK(emb[cols + 3] == 1.5f * packed.wd[36 * cols + 3]);
    }
}

// The limit of each prefill GEMM mode against a double product (|err| max over rms): float; TF32 and F16 round
// both inputs to a 10-bit mantissa (2^-11 relative each), so a product is off by ~1e-3 of the rms (0.8-1.3e-3 in
// the first GPU run).
namespace {
double gemm_tol(cuda::GemmMode m) { return m == cuda::GemmMode::f32 ? 1e-5 : 3e-3; }
}  // namespace

TEST_CASE("cuBLAS prefill products equal a double-precision product on every weight type, across weight slices",
          "[cuda]") {
    if (!have_gpu()) return;
    cuda::Gemm gemm;
    if (!gemm.available()) {
        test::skip_no_device("cuBLAS did not load: " + gemm.why());
        return;
    }
    const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                              GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL,
                              GgmlType::IQ4_XS, GgmlType::MXFP4};
    std::mt19937 rng(20261204);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (GgmlType type : types) {
        const int64_t block = type_traits(type).block_size;
        const int64_t cols = block == 256 ? 512 : block == 32 ? 160 : 100, rows_n = 75, n_tok = 70;
        std::vector<float> wf(static_cast<size_t>(rows_n * cols));
        for (float& v : wf) v = normal(rng);
        const size_t rb = row_size(type, cols);
        std::vector<uint8_t> wq(rb * static_cast<size_t>(rows_n));
        for (int64_t r = 0; r < rows_n; ++r) quantize_row(type, wf.data() + r * cols, wq.data() + rb * r, cols);
        std::vector<float> wd(wf.size());
        for (int64_t r = 0; r < rows_n; ++r) dequantize_row(type, wq.data() + rb * r, wd.data() + r * cols, cols);
        DeviceArray<uint8_t> dw(wq.size());
        dw.put(wq);
        const cuda::DeviceMatrix m{type, dw.p, cols, rows_n, rb};
        std::vector<float> x(static_cast<size_t>(n_tok * cols));
        for (float& v : x) v = normal(rng);
        DeviceArray<float> dx(x.size());
        dx.put(x);
        for (cuda::GemmMode mode : {cuda::GemmMode::f32, cuda::GemmMode::tf32, cuda::GemmMode::f16}) {
            // 16 rows a slice: five slices, the last one short
            for (int64_t slice : {16 * cols, cuda::kGemmSliceElems}) {
                for (bool accumulate : {false, true}) {
                    INFO(type_name(type) << ", " << cuda::gemm_mode_name(mode) << ", slice " << slice
                                         << (accumulate ? ", accumulating" : ""));
                    std::vector<float> y0(static_cast<size_t>(n_tok * rows_n));
                    for (float& v : y0) v = accumulate ? normal(rng) : std::numeric_limits<float>::quiet_NaN();
                    DeviceArray<float> dy(y0.size());
                    dy.put(y0);
                    DeviceArray<uint8_t> scratch(cuda::gemm_scratch_bytes(mode, rows_n * cols, cols, n_tok, slice));
                    // The slice is poisoned: a row left undecoded would multiply as NaN.
                    REQUIRE(cudaMemset(scratch.p, 0xFF, cuda::gemm_scratch_bytes(mode, rows_n * cols, cols, n_tok,
                                                                                 slice)) == cudaSuccess);
                    gemm.gemm(mode, m, dx.p, n_tok, dy.p, accumulate, scratch.p,
                              cuda::gemm_scratch_bytes(mode, rows_n * cols, cols, n_tok, slice), nullptr, slice);
                    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                    const double rel =
                        product_error(dy.get(y0.size()), y0, accumulate, wd, as_doubles(x), rows_n, cols, n_tok);
                    if (!accumulate && slice != cuda::kGemmSliceElems)
                        WARN("gemm " << type_name(type) << " " << cuda::gemm_mode_name(mode) << ": " << rel);
                    CHECK(rel <= gemm_tol(mode));
                }
            }
        }
    }
}

TEST_CASE("prefill through cuBLAS in each mode matches the reference on random models, and tf32 is the default",
          "[cuda]") {
    if (!have_gpu()) return;
    CHECK(cuda::CudaBackendOptions{}.tuning.gemm == cuda::GemmMode::tf32);
    for (const test::TinyCase& c : cuda_tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const auto tokens = some_tokens(100, static_cast<int>(c.spec.n_vocab), 7);  // past kGemmMinTokens
        const std::vector<float> want = prefill_logits(*reference(*model, KvType::f32, 1, 128), tokens);
        for (cuda::GemmMode mode : {cuda::GemmMode::off, cuda::GemmMode::f32, cuda::GemmMode::tf32,
                                    cuda::GemmMode::f16}) {
            INFO(c.label << ", GEMM " << cuda::gemm_mode_name(mode));
            auto g = gpu(*model, KvType::f32, 1, 128, true, mode);
            if (mode != cuda::GemmMode::off && g->gemm_mode() != mode) {
                test::skip_no_device("cuBLAS did not load: " + g->gemm_unavailable());
                return;
            }
            const std::vector<float> got = prefill_logits(*g, tokens);
            const double rel = relative_error(got, want);
            WARN(c.label << " prefill GEMM " << cuda::gemm_mode_name(mode) << ": " << rel);
            // f32: float's limit (every product of 100 tokens goes through cuBLAS); off: the kernels' (int8 inputs
            // for Q4_0, Q4_1, Q8_0); the tensor-core modes: their inputs' rounding carried through the layers
            // (2.0-5.5e-3 in the first GPU run)
            if (mode == cuda::GemmMode::f32) CHECK(rel <= 1e-4);
            else if (mode == cuda::GemmMode::off)
                CHECK(reference_error(got, want, c.spec) <= reference_tol(KvType::f32, c.spec));
            else CHECK(rel <= 1e-2);
        }
    }
}

}  // namespace test_cuda
