// The CPU matmul fast path (every weight type x every ISA this CPU runs x thread counts x ragged shapes) against
// matmul_reference, plus ISA selection, activation caching and determinism.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul.h"
#include "engine/error.h"
#include "engine/format/quant.h"
#include "engine/runtime/sampler.h"
#include "tests/support/matmul_data.h"
#include "tests/support/test_util.h"

namespace test_matmul {

using namespace quill;
using namespace quill::cpu;
using quill::test::make_input;
using quill::test::make_matrix;
using quill::test::TestMatrix;
using quill::test::poisoned;

namespace {


// Whether the fast path multiplies this type against int8-quantized activations (else against the floats).
bool uses_int8(GgmlType type) {
    switch (type) {
        case GgmlType::Q8_0:
        case GgmlType::Q4_0:
        case GgmlType::Q4_1:
        case GgmlType::Q5_0:
        case GgmlType::Q5_1:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::Q3_K:
        case GgmlType::Q2_K:
        case GgmlType::IQ4_NL:
        case GgmlType::IQ4_XS:
        case GgmlType::MXFP4:
            return true;
        default:
            return false;
    }
}

// Allowed |fast - reference| per output y[t, r], and the expected size of the int8 error.
//  - Float activations: only float rounding, accumulated over n_in terms in a few partial sums: 1e-5 relative to
//    sum |w x| (fp32 epsilon is 6e-8; the kernels add at most a few thousand products per partial sum).
//  - Int8 activations: each x_i is replaced by da * round(x_i / da) with da = max|x in its block of 32| / 127, so
//    it moves by at most da / 2 and the product by at most sum_i |w_i| da_i / 2. That bound is strict (all roundings
//    aligned, the worst case) but loose: the rounding errors are independent and about uniform on [-da/2, da/2],
//    so the error of an output has a variance near sum_i w_i^2 da_i^2 / 12 (`variance`), which the test also checks
//    in aggregate to catch a kernel that is wrong by less than the worst case.
//  - The int8 block scale is kept in fp16 (as ggml's Q8_0 activations): a relative error up to 2^-11 on each block's
//    products, at most 2^-11 * sum |w| (|x| + da / 2). F16 weights meet the input rounded to fp16: at most
//    2^-11 * sum |w x|.
// Every ISA multiplies the same int8 activations with exact integer sums, so the SIMD kernels must also agree with
// the portable one to float rounding (`rounding`): that catches what the loose int8 bound would let through.
struct Tolerance {
    std::vector<double> bound;     // [n_tokens, n_out]
    std::vector<double> variance;  // [n_tokens, n_out]: expected squared int8 error (0 for float activations)
    std::vector<double> rounding;  // [n_tokens, n_out]: float rounding alone, 1e-5 * sum |w x|
};

Tolerance tolerances(const TestMatrix& m, const std::vector<float>& x, int64_t n_tokens, bool int8) {
    constexpr double kHalfUlp = 1.0 / 2048.0;  // fp16 rounding, relative
    const bool f16_inputs = m.type == GgmlType::F16;
    const auto n = static_cast<size_t>(n_tokens * m.n_out);
    Tolerance tol{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x.data() + t * m.n_in;
        std::vector<double> da(static_cast<size_t>(m.n_in), 0.0);  // the int8 step of each element's block
        for (int64_t b = 0; int8 && b < m.n_in / 32; ++b) {
            double amax = 0.0;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(static_cast<double>(xt[32 * b + i])));
            for (int i = 0; i < 32; ++i) da[static_cast<size_t>(32 * b + i)] = amax / 127.0;
        }
        for (int64_t r = 0; r < m.n_out; ++r) {
            const float* w = m.deq.data() + r * m.n_in;
            double abs_wx = 0.0, quant = 0.0, var = 0.0;
            for (int64_t i = 0; i < m.n_in; ++i) {
                const double wi = w[i], di = da[static_cast<size_t>(i)];
                abs_wx += std::fabs(wi * xt[i]);
                quant += std::fabs(wi) * di / 2.0;
                var += wi * wi * di * di / 12.0;
            }
            const auto at = static_cast<size_t>(t * m.n_out + r);
            const double fp16 = int8 ? kHalfUlp * (abs_wx + quant) : f16_inputs ? kHalfUlp * abs_wx : 0.0;
            tol.bound[at] = quant * (1.0 + 1e-4) + fp16 + 1e-5 * abs_wx + 1e-6;
            tol.variance[at] = var;
            tol.rounding[at] = 1e-5 * abs_wx + 1e-6;
        }
    }
    return tol;
}

std::vector<Isa> available_isas() {
    std::vector<Isa> isas;
    for (Isa isa : kAllIsas) {
        if (isa_available(isa)) isas.push_back(isa);
    }
    return isas;
}

struct Shape {
    int64_t n_out, n_in, n_tokens;
};

// n_in per type: whole blocks, including an odd number of 32-blocks (800), a single block, and for float types
// lengths that are no multiple of any vector width (777, 5).
std::vector<Shape> shapes_for(GgmlType type) {
    const int64_t bs = type_traits(type).block_size;
    const int64_t odd = bs == 1 ? 777 : bs == 32 ? 800 : 768;
    const int64_t one = bs == 1 ? 5 : bs;  // a single block (less than one 64-element SIMD step)
    // n_tokens covers every register tile of every ISA: a few tokens with rows decoded on the fly (AVX-512 below
    // 8 tokens, 4 at a time; AVX2 below 12, 2 at a time), more over a repacked row tile, split as 16 + 8 + 4 + 2 + 1
    // (AVX2: 8 + 4 + 2 + 1): 12 = 8 + 4, 17 = 16 + 1, 27 = 16 + 8 + 2 + 1, 64 = 4 x 16.
    return {
        {13, 256, 1},  {67, 768, 1},  {9, 2816, 1},  {35, 2816, 2}, {21, 768, 3}, {14, 256, 4}, {18, odd, 5},
        {10, 768, 12}, {45, 256, 17}, {23, 768, 27}, {67, 768, 64}, {6, odd, 64}, {5, odd, 1},
        {7, one, 1}, {7, one, 13},
    };
}

const std::vector<GgmlType> kTypes = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
    GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K,
    GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4,
};

// Restores QUILL_CPU_ISA when a test that sets it ends.
class IsaEnvGuard {
public:
    IsaEnvGuard() {
        if (const char* v = std::getenv("QUILL_CPU_ISA")) saved_ = v;
    }
    ~IsaEnvGuard() {
        if (saved_) {
            setenv("QUILL_CPU_ISA", saved_->c_str(), 1);
        } else {
            unsetenv("QUILL_CPU_ISA");
        }
    }
    IsaEnvGuard(const IsaEnvGuard&) = delete;
    IsaEnvGuard& operator=(const IsaEnvGuard&) = delete;

private:
    std::optional<std::string> saved_;
};

}  // namespace

TEST_CASE("matmul fast path matches the reference for every type, ISA, thread count and shape", "[matmul]") {
    std::mt19937 rng(20240611);
    ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
    const std::vector<Isa> isas = available_isas();
    for (GgmlType type : kTypes) {
        REQUIRE(matmul_supports(type));
        const bool int8 = uses_int8(type);
        for (const Shape& s : shapes_for(type)) {
            const TestMatrix m = make_matrix(type, s.n_out, s.n_in, rng);
            const std::vector<float> x = make_input(s.n_tokens, s.n_in, rng);
            std::vector<float> ref(static_cast<size_t>(s.n_tokens * s.n_out));
            matmul_reference(m.view(), x.data(), s.n_tokens, ref.data());
            const Tolerance tol = tolerances(m, x, s.n_tokens, int8);
            std::vector<float> portable;  // the generic kernel's result (isas[0] is generic)
            for (Isa isa : isas) {
                for (ThreadPool& pool : pools) {
                    INFO(fmt::format("{} {}x{} tokens {} isa {} threads {}", type_name(type), s.n_out, s.n_in,
                                     s.n_tokens, isa_name(isa), pool.size()));
                    Activations act;
                    act.set(x.data(), s.n_tokens, s.n_in);
                    std::vector<float> y = poisoned(ref.size());
                    matmul(m.view(), act, y.data(), pool, isa);
                    size_t bad = 0, first_bad = 0;
                    double sq_err = 0.0, sq_expected = 0.0;
                    for (size_t i = 0; i < y.size(); ++i) {
                        const double err = static_cast<double>(y[i]) - ref[i];
                        if (!(std::fabs(err) <= tol.bound[i])) {
                            if (bad++ == 0) first_bad = i;
                        }
                        sq_err += err * err;
                        sq_expected += tol.variance[i];
                    }
                    INFO(fmt::format("output {} (token {}, row {}): {} vs reference {}, tolerance {}", first_bad,
                                     first_bad / s.n_out, first_bad % s.n_out, y[first_bad], ref[first_bad],
                                     tol.bound[first_bad]));
                    CHECK(bad == 0);
                    if (portable.empty()) portable = y;
                    size_t off = 0, first_off = 0;
                    for (size_t i = 0; i < y.size(); ++i) {
                        if (!(std::fabs(static_cast<double>(y[i]) - portable[i]) <= tol.rounding[i])) {
                            if (off++ == 0) first_off = i;
                        }
                    }
                    INFO(fmt::format("output {}: {} vs the generic kernel's {}", first_off, y[first_off],
                                     portable[first_off]));
                    CHECK(off == 0);
                    if (int8) {
                        // The rms error against the rms of independent uniform roundings: near 1 when the kernel
                        // only adds the activation rounding (0.1 to 1.5 over these shapes and seeds).
                        const double ratio = std::sqrt(sq_err / sq_expected);
                        INFO(fmt::format("rms error / expected rms rounding error = {:.3f}", ratio));
                        CHECK(ratio < 2.0);
                    }
                }
            }
        }
    }
}

TEST_CASE("matmul runs several jobs sharing one input and reuses the converted activations", "[matmul]") {
    std::mt19937 rng(7);
    const int64_t n_in = 512, n_tokens = 6;
    const TestMatrix a = make_matrix(GgmlType::Q4_0, 37, n_in, rng);
    const TestMatrix b = make_matrix(GgmlType::Q6_K, 20, n_in, rng);
    const TestMatrix c = make_matrix(GgmlType::F16, 11, n_in, rng);
    const TestMatrix d = make_matrix(GgmlType::Q3_K, 9, n_in, rng);
    const TestMatrix* ms[] = {&a, &b, &c, &d};
    ThreadPool pool(3);
    for (Isa isa : available_isas()) {
        INFO(isa_name(isa));
        Activations act;
        for (int round = 0; round < 3; ++round) {
            // A fresh input each round (the cache must follow set()); the same input twice in round 2.
            const std::vector<float> x = make_input(n_tokens, n_in, rng);
            act.set(x.data(), n_tokens, n_in);
            for (int repeat = 0; repeat < (round == 2 ? 2 : 1); ++repeat) {
                std::vector<std::vector<float>> ys;
                std::vector<MatmulJob> jobs;
                for (const TestMatrix* m : ms) ys.push_back(poisoned(static_cast<size_t>(n_tokens * m->n_out)));
                for (size_t j = 0; j < 4; ++j) jobs.push_back({ms[j]->view(), ys[j].data()});
                matmul(jobs, act, pool, isa);
                for (size_t j = 0; j < 4; ++j) {
                    const TestMatrix& m = *ms[j];
                    std::vector<float> ref(ys[j].size());
                    matmul_reference(m.view(), x.data(), n_tokens, ref.data());
                    const Tolerance tol = tolerances(m, x, n_tokens, uses_int8(m.type));
                    for (size_t i = 0; i < ref.size(); ++i) {
                        INFO(fmt::format("job {} ({}) output {}", j, type_name(m.type), i));
                        REQUIRE(std::fabs(static_cast<double>(ys[j][i]) - ref[i]) <= tol.bound[i]);
                    }
                }
            }
        }
    }
}

TEST_CASE("matmul results are deterministic for a given thread count", "[matmul]") {
    // And the same for every thread count: a row's result does not depend on which thread computes it. Seven
    // threads on a machine with fewer cores run their ranges unevenly, so that some take the rest of others'.
    std::mt19937 rng(99);
    const int64_t n_in = 1024, n_tokens = 9;
    const TestMatrix m = make_matrix(GgmlType::Q4_K, 203, n_in, rng);
    const std::vector<float> x = make_input(n_tokens, n_in, rng);
    std::vector<std::vector<float>> one_thread(std::size(kAllIsas));  // by Isa
    for (int threads : {1, 2, 3, 7}) {
        ThreadPool pool(threads);
        for (Isa isa : available_isas()) {
            Activations act;
            act.set(x.data(), n_tokens, n_in);
            std::vector<float> first = poisoned(static_cast<size_t>(n_tokens * m.n_out));
            matmul(m.view(), act, first.data(), pool, isa);
            auto& single = one_thread[static_cast<size_t>(isa)];
            if (threads == 1) single = first;
            INFO(fmt::format("{} threads against one, {}", threads, isa_name(isa)));
            REQUIRE(std::memcmp(single.data(), first.data(), first.size() * sizeof(float)) == 0);
            for (int run = 0; run < 5; ++run) {
                Activations fresh;
                fresh.set(x.data(), n_tokens, n_in);
                std::vector<float> again = poisoned(first.size());
                matmul(m.view(), fresh, again.data(), pool, isa);
                INFO(fmt::format("{} threads, {}", threads, isa_name(isa)));
                REQUIRE(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)) == 0);
            }
        }
    }
}

TEST_CASE("a token's outputs do not depend on the other tokens of the batch", "[matmul]") {
    // Batch invariance: a row computed alone (the decode kernels), next to one other token, or in a batch large
    // enough for the repacked prefill kernels must give the same bits, so that a request's greedy text does not
    // depend on what shares its batch. Token 0 of each batch is the same input row.
    std::mt19937 rng(31337);
    ThreadPool pool(2);
    for (GgmlType type : kTypes) {
        const int64_t n_in = type_traits(type).block_size == 256 ? 512 : 352;  // 352: an odd number of 32-blocks
        const TestMatrix m = make_matrix(type, 37, n_in, rng);
        const std::vector<float> x = make_input(40, n_in, rng);
        for (Isa isa : available_isas()) {
            std::vector<float> alone;  // [n_out] token 0 alone
            for (int64_t n_tokens : {1, 2, 3, 5, 11, 12, 13, 16, 17, 27, 40}) {
                INFO(fmt::format("{} isa {} batch of {}", type_name(type), isa_name(isa), n_tokens));
                Activations act;
                act.set(x.data(), n_tokens, n_in);
                std::vector<float> y = poisoned(static_cast<size_t>(n_tokens * m.n_out));
                matmul(m.view(), act, y.data(), pool, isa);
                if (alone.empty()) alone.assign(y.begin(), y.begin() + m.n_out);
                CHECK(std::memcmp(alone.data(), y.data(), alone.size() * sizeof(float)) == 0);
                if (n_tokens != 27 && n_tokens != 40) continue;
                // Every token against itself alone: every lane of the AVX2 token groups (27: three groups and
                // three tokens left over; 40: passes of 32 and 8 tokens).
                for (int64_t t = 1; t < n_tokens; ++t) {
                    Activations one;
                    one.set(x.data() + t * n_in, 1, n_in);
                    std::vector<float> y1 = poisoned(static_cast<size_t>(m.n_out));
                    matmul(m.view(), one, y1.data(), pool, isa);
                    INFO("token " << t);
                    CHECK(std::memcmp(y1.data(), y.data() + t * m.n_out, y1.size() * sizeof(float)) == 0);
                }
            }
        }
    }
}

TEST_CASE("the AMX kernels give the AVX-512 kernels' bits", "[matmul]") {
    if (!isa_available(Isa::amx)) {
        quill::test::skip_no_device("no AMX-INT8 here (or the kernel refused it): the AMX kernels cannot run");
        return;
    }
    std::mt19937 rng(4242);
    ThreadPool pool(2);
    // Token groups of 16 (fewer padded), odd numbers of 32-blocks (800), ragged row tiles (45 rows), and chunks of
    // 1 MiB of int8 activations (400 tokens of 2816: 368 + 32). (F16 and BF16 weights sum other terms on AMX: the
    // tests below.)
    for (GgmlType type : kTypes) {
        if (!uses_int8(type)) continue;
        const bool k_quant = type_traits(type).block_size == 256;
        for (auto [n_in, n_tokens] : {std::pair<int64_t, int64_t>{k_quant ? 1024 : 800, 8}, {k_quant ? 1024 : 800, 9},
                                      {k_quant ? 1024 : 800, 16}, {k_quant ? 1024 : 800, 33}, {2816, 400}}) {
            const TestMatrix m = make_matrix(type, 45, n_in, rng);
            INFO(fmt::format("{} batch of {}", type_name(type), n_tokens));
            const std::vector<float> x = make_input(n_tokens, n_in, rng);
            std::vector<float> y[2];
            for (int i = 0; i < 2; ++i) {
                Activations act;
                act.set(x.data(), n_tokens, n_in);
                y[i] = poisoned(static_cast<size_t>(n_tokens * m.n_out));
                matmul(m.view(), act, y[i].data(), pool, i == 0 ? Isa::avx512 : Isa::amx);
            }
            CHECK(std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("F16 and BF16 weights multiply exactly split bf16 terms on AMX: a lone product comes out exact",
          "[matmul]") {
    // One nonzero weight per row (a power of two, or a full-precision value against inputs that are powers of two):
    // the result is a single product, exact in fp32, whatever the summation order. A lost term of the bf16 split
    // (three for a float input, two for an fp16 weight or input) changes it.
    std::mt19937 rng(515);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    ThreadPool pool(2);
    for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
        for (int64_t n_tokens : {1, 5, 16, 37}) {
            const int64_t n_out = 45, n_in = 800;
            const size_t rb = row_size(type, n_in);
            std::vector<uint8_t> w(rb * n_out);
            std::vector<float> row(static_cast<size_t>(n_in)), deq(static_cast<size_t>(n_out * n_in));
            for (int64_t r = 0; r < n_out; ++r) {
                std::fill(row.begin(), row.end(), 0.0f);
                // Half the rows: a power of two; the others: a value with every bit of the type set.
                row[static_cast<size_t>((r * 37) % n_in)] = r % 2 == 0 ? std::ldexp(1.0f, static_cast<int>(r % 9) - 4)
                                                                     : normal(rng);
                quantize_row(type, row.data(), w.data() + rb * r, n_in);
                dequantize_row(type, w.data() + rb * r, deq.data() + r * n_in, n_in);
            }
            // Inputs: full floats against the power-of-two rows; powers of two against the others would lose
            // nothing either, so every input is a full float and the odd rows are checked against their product.
            std::vector<float> x = make_input(n_tokens, n_in, rng);
            const std::vector<float> xr = reference_activations(type, x.data(), n_tokens, n_in);
            const WeightMatrix m{type, w.data(), n_in, n_out, rb};
            for (Isa isa : available_isas()) {
                for (int64_t n_decode : {int64_t{0}, n_tokens / 2}) {
                    INFO(fmt::format("{} {} tokens ({} decode) isa {}", type_name(type), n_tokens, n_decode,
                                     isa_name(isa)));
                    Activations act;
                    act.set(x.data(), n_tokens, n_in, n_decode);
                    std::vector<float> y = poisoned(static_cast<size_t>(n_tokens * n_out));
                    matmul(m, act, y.data(), pool, isa);
                    size_t bad = 0;
                    for (int64_t t = 0; t < n_tokens; ++t) {
                        for (int64_t r = 0; r < n_out; ++r) {
                            const int64_t i = (r * 37) % n_in;
                            const double exact = static_cast<double>(deq[r * n_in + i]) * xr[t * n_in + i];
                            // The even rows' products are exact in fp32; the odd rows' round once.
                            const auto expect = static_cast<float>(exact);
                            if (r % 2 == 0 ? y[t * n_out + r] != expect
                                           : std::fabs(y[t * n_out + r] - exact) > std::fabs(exact) * 0x1p-23)
                                ++bad;
                        }
                    }
                    CHECK(bad == 0);
                }
            }
        }
    }
}

TEST_CASE("F16 and BF16 weights: a token's bits depend on whether it is a decode step, not on its batch",
          "[matmul]") {
    // With AMX, decode steps (the leading n_decode tokens) stay on the vector units and the other tokens go through
    // tiles; without it both take one path. Either way a decode step gives the bits it gives alone, and so does a
    // prompt token, whatever the mix (the batch of a scheduler step: decode steps, then prompt chunks).
    std::mt19937 rng(8080);
    ThreadPool pool(2);
    for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
        const int64_t n_in = 352, n_out = 45;
        const TestMatrix m = make_matrix(type, n_out, n_in, rng);
        const std::vector<float> x = make_input(40, n_in, rng);
        for (Isa isa : available_isas()) {
            std::vector<float> alone[2];  // token 0 alone: [0] as a prompt token, [1] as a decode step
            for (int d = 0; d < 2; ++d) {
                Activations act;
                act.set(x.data(), 1, n_in, d);
                alone[d] = poisoned(static_cast<size_t>(n_out));
                matmul(m.view(), act, alone[d].data(), pool, isa);
            }
            for (auto [n_tokens, n_decode] : {std::pair<int64_t, int64_t>{3, 1}, {17, 2}, {40, 16}, {20, 0}, {5, 5},
                                              {33, 32}, {18, 1}}) {
                INFO(fmt::format("{} isa {}: {} tokens, {} decode steps", type_name(type), isa_name(isa), n_tokens,
                                 n_decode));
                // Token 0's row as the first decode step and as the first prompt token.
                std::vector<float> xb(x.begin(), x.begin() + n_tokens * n_in);
                std::copy_n(x.begin(), n_in, xb.begin() + n_decode * n_in % (n_tokens * n_in));
                Activations act;
                act.set(xb.data(), n_tokens, n_in, n_decode);
                std::vector<float> y = poisoned(static_cast<size_t>(n_tokens * n_out));
                matmul(m.view(), act, y.data(), pool, isa);
                if (n_decode > 0) CHECK(std::memcmp(y.data(), alone[1].data(), n_out * sizeof(float)) == 0);
                if (n_decode < n_tokens)
                    CHECK(std::memcmp(y.data() + n_decode * n_out, alone[0].data(), n_out * sizeof(float)) == 0);
            }
        }
    }
}

TEST_CASE("int8 activations quantized in parts by several threads give the matmul its own quantization's bits",
          "[matmul]") {
    // The backend quantizes a product's input inside the section that writes it, each thread its rows
    // (Activations::begin_int8): the parts, written at once from three threads, must make the same int8 form as
    // the matmul's own quantization, on the file's layout and the packed one, for the token counts of every path;
    // and with the tile layout alone, the same products (the AMX kernels read it, the others quantize again).
    std::mt19937 rng(4242);
    ThreadPool pool(2);
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
        const int64_t n_in = type_traits(type).block_size == 256 ? 512 : 352;
        const TestMatrix m = make_matrix(type, 37, n_in, rng);
        const std::vector<float> x = make_input(40, n_in, rng);
        for (Isa isa : available_isas()) {
            const bool packs = PackedWeights::supports(type, isa);
            std::optional<PackedWeights> packed;
            WeightMatrix w = m.view();
            if (packs) {
                packed.emplace(m.view(), isa, &pool);
                w = packed->reading(w);
            }
            REQUIRE(reads_int8(w, isa));
            for (int64_t n_tokens : {1, 8, 12, 16, 17, 24, 40}) {
                INFO(fmt::format("{} isa {} packed {} tokens {}", type_name(type), isa_name(isa), packs, n_tokens));
                // The matmul's quantization; parts by tokens, parts by blocks; the same for the tile layout alone
                // (begin_int8's rows = false: what the AMX kernels read, else quantized again by the matmul).
                const bool tiles_alone = reads_tiles_alone(w, isa, n_tokens);
                std::vector<float> y[5];
                for (int i = 0; i < 5; ++i) {
                    Activations act;
                    act.set(x.data(), n_tokens, n_in);
                    if (i > 0) {
                        act.begin_int8(isa, i <= 2);
                        std::vector<std::thread> threads;
                        const int64_t nb = n_in / 32;
                        for (int ith = 0; ith < 3; ++ith) {
                            if (i % 2 == 1) {
                                const Range r = split_range(n_tokens, ith, 3, Activations::kInt8PartTokens);
                                threads.emplace_back([&act, r] { act.quantize_int8(r.begin, r.end); });
                            } else {
                                const Range r = split_range(nb, ith, 3, 2);
                                threads.emplace_back([&act, r] { act.quantize_int8_blocks(r.begin, r.end); });
                            }
                        }
                        for (auto& t : threads) t.join();
                        act.end_int8();
                    }
                    y[i] = poisoned(static_cast<size_t>(n_tokens * m.n_out));
                    matmul(w, act, y[i].data(), pool, isa);
                    // the row-major form left out only for a kernel that reads the tile layout alone
                    if (i > 2) CHECK(act.has_int8_rows() == !tiles_alone);
                }
                for (int i = 1; i < 5; ++i) {
                    INFO("way " << i);
                    CHECK(std::memcmp(y[0].data(), y[i].data(), y[0].size() * sizeof(float)) == 0);
                }
            }
        }
    }
    const std::vector<float> zeros(64 * 16, 0.0f);
    Activations act;
    act.set(zeros.data(), 16, 64);
    act.begin_int8(Isa::generic);
    CHECK_THROWS(act.quantize_int8(4, 16));  // a part must start a half group
}

TEST_CASE("matmul_pair gives both products' bits and hands each unit of rows to done once both are written",
          "[matmul]") {
    std::mt19937 rng(5150);
    for (GgmlType type : {GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::F16}) {
        const int64_t n_in = type_traits(type).block_size == 256 ? 512 : 352, n_out = 100;  // a ragged last unit
        const TestMatrix ma = make_matrix(type, n_out, n_in, rng), mb = make_matrix(type, n_out, n_in, rng);
        const std::vector<float> x = make_input(17, n_in, rng);
        for (Isa isa : available_isas()) {
            for (int threads : {1, 2, 3}) {
                ThreadPool pool(threads);
                for (int64_t n_tokens : {1, 8, 16, 17}) {
                    INFO(fmt::format("{} isa {} threads {} tokens {}", type_name(type), isa_name(isa), threads,
                                     n_tokens));
                    std::vector<float> want[2];
                    for (int i = 0; i < 2; ++i) {
                        Activations act;
                        act.set(x.data(), n_tokens, n_in);
                        want[i] = poisoned(static_cast<size_t>(n_tokens * n_out));
                        matmul((i == 0 ? ma : mb).view(), act, want[i].data(), pool, isa);
                    }
                    std::vector<float> got[2] = {poisoned(want[0].size()), poisoned(want[1].size())};
                    std::vector<int> calls(static_cast<size_t>(n_out), 0);
                    std::atomic<bool> written{true};
                    Activations act;
                    act.set(x.data(), n_tokens, n_in);
                    matmul_pair({ma.view(), got[0].data()}, {mb.view(), got[1].data()}, act, pool, isa, 32,
                                [&](int64_t r0, int64_t r1) {
                                    for (int64_t r = r0; r < r1; ++r) {
                                        ++calls[static_cast<size_t>(r)];  // (ranges of different calls never meet)
                                        for (int i = 0; i < 2; ++i)
                                            for (int64_t t = 0; t < n_tokens; ++t) {
                                                const size_t at = static_cast<size_t>(t * n_out + r);
                                                if (std::memcmp(&got[i][at], &want[i][at], sizeof(float)) != 0)
                                                    written = false;
                                            }
                                    }
                                });
                    CHECK(written);
                    CHECK(std::all_of(calls.begin(), calls.end(), [](int c) { return c == 1; }));
                    for (int i = 0; i < 2; ++i)
                        CHECK(std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)) == 0);
                }
            }
        }
    }
}

TEST_CASE("matmul_pair hands done whole groups of eight 32-blocks when the threads' shares allow", "[matmul]") {
    std::mt19937 rng(2718);
    const int64_t n_in = 64;
    for (auto [n_out, threads, aligned] : {std::tuple{1536, 2, true}, std::tuple{2048, 4, true},
                                           std::tuple{2528, 2, true}, std::tuple{5632, 16, false}}) {
        INFO(fmt::format("{} rows, {} threads", n_out, threads));
        const TestMatrix ma = make_matrix(GgmlType::Q4_1, n_out, n_in, rng), mb = make_matrix(GgmlType::Q4_1, n_out,
                                                                                              n_in, rng);
        const std::vector<float> x = make_input(16, n_in, rng);
        std::vector<float> y[2] = {std::vector<float>(static_cast<size_t>(16 * n_out)),
                                   std::vector<float>(static_cast<size_t>(16 * n_out))};
        ThreadPool pool(threads);
        Activations act;
        act.set(x.data(), 16, n_in);
        std::mutex m;
        std::vector<std::pair<int64_t, int64_t>> ranges;
        matmul_pair({ma.view(), y[0].data()}, {mb.view(), y[1].data()}, act, pool, best_isa(), 64,
                    [&](int64_t r0, int64_t r1) {
                        std::lock_guard lock(m);
                        ranges.emplace_back(r0, r1);
                    });
        std::sort(ranges.begin(), ranges.end());
        int64_t next = 0;
        bool whole = true;
        for (auto [r0, r1] : ranges) {
            CHECK(r0 == next);
            next = r1;
            if (r0 % 256 != 0 || (r1 % 256 != 0 && r1 != n_out)) whole = false;
        }
        CHECK(next == n_out);
        // (2528 rows: 40 units, the last ragged; 88 units on 16 threads would leave a thread 8 of them instead of 6)
        CHECK(whole == aligned);
    }
}

TEST_CASE("packed weights give the bits of the file's layout", "[matmul]") {
    for (GgmlType type : kTypes) {
        CHECK(PackedWeights::supports(type, Isa::generic) == false);
        const bool packs = type == GgmlType::Q4_0 || type == GgmlType::Q4_1 || type == GgmlType::Q8_0 ||
                           type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q5_0 ||
                           type == GgmlType::Q5_1 || type == GgmlType::Q6_K || type == GgmlType::IQ4_XS ||
                           type == GgmlType::IQ4_NL || type == GgmlType::Q3_K || type == GgmlType::Q2_K;
        CHECK(PackedWeights::supports(type, Isa::avx2) == (packs && isa_available(Isa::avx2)));
        CHECK(PackedWeights::supports(type, Isa::avx512) ==
              (packs && isa_available(Isa::avx512) && !avx512_emulated()));
    }
    if (!PackedWeights::supports(GgmlType::Q4_0, Isa::avx2) && !PackedWeights::supports(GgmlType::Q4_0, Isa::avx512)) {
        quill::test::skip_no_device("no AVX2 here: the packed kernels cannot run");
        return;
    }
    std::mt19937 rng(777);
    ThreadPool pools[] = {ThreadPool(1), ThreadPool(3)};
    for (GgmlType type : kTypes) {
        if (!PackedWeights::supports(type, Isa::avx2) && !PackedWeights::supports(type, Isa::avx512)) continue;
        // Ragged row tiles (45, 7 rows), odd numbers of 32-blocks (800; super-blocks for Q4_K and Q5_K: 768), a
        // single block, and AMX's chunks (400 tokens of 2816); every token count of every path (decode 1-3,
        // sixteen-row tiles, one whole group of the tile layout in one pass: 16, the K types' one group of 8 to 16
        // in passes of 8, 12 or 16 with padding tokens: 9, 12, 13, AMX groups; Q6_K's four-row decode of 1-7 and
        // repacked tiles from 8).
        const bool k = type_traits(type).block_size == 256;
        for (auto [n_out, n_in] : {std::pair<int64_t, int64_t>{45, k ? 768 : 800}, {7, k ? 256 : 32}, {18, 2816}}) {
            const TestMatrix m = make_matrix(type, n_out, n_in, rng);
            // The packed view's file data are zeros, so only kernels that read the packed form give m's results.
            const std::vector<uint8_t> zeros(m.data.size(), 0);
            WeightMatrix packed_view = m.view();
            packed_view.data = zeros.data();
            const size_t record = type == GgmlType::Q8_0 ? 544
                                  : type == GgmlType::Q4_1   ? 320
                                  : type == GgmlType::Q5_1   ? 384
                                  : type == GgmlType::Q6_K   ? 420
                                  : type == GgmlType::Q3_K   ? 228
                                  : type == GgmlType::Q2_K   ? 168
                                  : type == GgmlType::IQ4_XS ? 272
                                  : type == GgmlType::Q5_K || type == GgmlType::Q5_0 ? 352
                                                                                     : 288;  // Q4_0, IQ4_NL, Q4_K
            // Packed for each family (the layout may differ: Q6_K's), each read by its own kernels.
            std::vector<std::pair<Isa, PackedWeights>> packs;
            for (Isa isa : {Isa::avx2, Isa::avx512, Isa::amx}) {
                if (!PackedWeights::supports(type, isa)) continue;
                const PackedWeights& packed = packs.emplace_back(isa, PackedWeights(m.view(), isa, &pools[1])).second;
                REQUIRE(packed.isa() == isa);
                REQUIRE(packed.bytes() == static_cast<size_t>((n_out + 15) / 16 * (n_in / 32)) * record);
                REQUIRE(PackedWeights::bytes_for(m.view()) == packed.bytes());
                // packed into another's memory (the backend's one mapping for all its matrices), at a cache line
                const HugeMemory memory(64 + packed.bytes());
                REQUIRE(reinterpret_cast<uintptr_t>(memory.data()) % (uintptr_t{2} << 20) == 0);
                auto* at = static_cast<uint8_t*>(memory.data()) + 64;
                const PackedWeights into(m.view(), isa, &pools[1], {}, at);
                REQUIRE(into.data() == at);
                CHECK(std::memcmp(into.data(), packed.data(), packed.bytes()) == 0);
            }
            for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 9, 12, 13, 16, 17, 40, 400}) {
                if (n_tokens == 400 && n_in != 2816) continue;
                const std::vector<float> x = make_input(n_tokens, n_in, rng);
                for (const auto& [isa, packed] : packs) {
                    const WeightMatrix packed_view_isa = packed.reading(packed_view);
                    for (ThreadPool& pool : pools) {
                        INFO(fmt::format("{} {}x{} tokens {} isa {} threads {}", type_name(type), n_out, n_in,
                                         n_tokens, isa_name(isa), pool.size()));
                        std::vector<float> y[2];
                        for (int i = 0; i < 2; ++i) {
                            Activations act;
                            act.set(x.data(), n_tokens, n_in);
                            y[i] = poisoned(static_cast<size_t>(n_tokens * n_out));
                            matmul(i == 0 ? m.view() : packed_view_isa, act, y[i].data(), pool, isa);
                        }
                        CHECK(std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)) == 0);
                    }
                }
            }
        }
    }
}

TEST_CASE("best_isa honours QUILL_CPU_ISA", "[matmul]") {
    IsaEnvGuard guard;
    unsetenv("QUILL_CPU_ISA");
    const Isa best = best_isa();
    REQUIRE(isa_available(best));
    REQUIRE(isa_available(Isa::generic));
    for (Isa isa : {Isa::avx2, Isa::avx512, Isa::amx}) {
        if (isa_available(isa) && !(isa == Isa::avx512 && avx512_emulated())) REQUIRE(best >= isa);
    }
    if (avx512_emulated()) REQUIRE(best < Isa::avx512);  // the product never runs emulated kernels
    setenv("QUILL_CPU_ISA", "generic", 1);
    CHECK(best_isa() == Isa::generic);
    setenv("QUILL_CPU_ISA", "avx2", 1);
    CHECK(best_isa() == (isa_available(Isa::avx2) ? Isa::avx2 : Isa::generic));
    setenv("QUILL_CPU_ISA", "avx512", 1);
    CHECK(best_isa() == std::min(best, Isa::avx512));
    setenv("QUILL_CPU_ISA", "amx", 1);
    CHECK(best_isa() == best);  // asking for more than the CPU has gives the best it has
    setenv("QUILL_CPU_ISA", "sse9", 1);
    CHECK_THROWS_AS(best_isa(), UsageError);
    CHECK(isa_name(Isa::generic) == "generic");
    CHECK(isa_name(Isa::avx2) == "avx2");
    CHECK(isa_name(Isa::avx512) == (avx512_emulated() ? "avx512-vnni (emulated)" : "avx512-vnni"));
    CHECK(isa_name(Isa::amx) == "avx512-vnni+amx");
}

TEST_CASE("the AVX-512 kernels run here natively or emulated", "[matmul]") {
    // The matmul and backend tests run every available family; on an x86 machine without AVX-512 the AVX-512
    // kernels run on SIMDe (tests/support/avx512_emulated.cpp, libsimde-dev), which CI must have.
    if (!isa_available(Isa::avx2)) {
        quill::test::skip_no_device("no AVX2: neither the AVX-512 kernels nor their emulation can run");
        return;
    }
#ifndef QUILL_AVX512_EMULATION
    if (!isa_available(Isa::avx512)) {
#ifdef QUILL_SANITIZED_BUILD
        quill::test::skip_no_device("no AVX-512 here, and the sanitizer build does not emulate it (the release build's "
                                    "tests run the AVX-512 kernels on SIMDe)");
#else
        quill::test::skip("built without the AVX-512 emulation (libsimde-dev, QUILL_AVX512_EMULATION): the AVX-512 "
                          "kernels cannot run on this machine");
#endif
        return;
    }
#endif
    REQUIRE(isa_available(Isa::avx512));
    const std::vector<Isa> isas = available_isas();
    CHECK(std::find(isas.begin(), isas.end(), Isa::avx512) != isas.end());
}

TEST_CASE("matmul refuses what it cannot compute", "[matmul]") {
    CHECK(matmul_supports(GgmlType::Q4_0));
    CHECK(matmul_supports(GgmlType::Q2_K));
    CHECK(matmul_supports(GgmlType::IQ2_XXS));
    CHECK(matmul_supports(GgmlType::IQ1_S));
    CHECK(matmul_supports(GgmlType::IQ1_M));
    CHECK_FALSE(matmul_supports(GgmlType::TQ1_0));
    CHECK_FALSE(matmul_supports(GgmlType::I32));
    std::vector<uint8_t> data(66 * 4);
    std::vector<float> x(256, 1.0f), y(4);
    Activations act;
    act.set(x.data(), 1, 256);
    ThreadPool pool(1);
    WeightMatrix w{GgmlType::TQ1_0, data.data(), 256, 4, 54};
    CHECK_THROWS_AS(matmul(w, act, y.data(), pool, Isa::generic), Error);
    WeightMatrix wrong_len{GgmlType::Q4_0, data.data(), 128, 4, row_size(GgmlType::Q4_0, 128)};
    CHECK_THROWS_AS(matmul(wrong_len, act, y.data(), pool, Isa::generic), Error);
}

}  // namespace test_matmul
