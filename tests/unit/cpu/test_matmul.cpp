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
#include "tests/support/test_util.h"

using namespace quill;
using namespace quill::cpu;

namespace {

// A weight matrix built from random floats with quantize_row, and its dequantized values.
struct TestMatrix {
    GgmlType type;
    int64_t n_out, n_in;
    std::vector<uint8_t> data;  // [n_out, row_bytes]
    std::vector<float> deq;     // [n_out, n_in]: what the reference multiplies
    WeightMatrix view() const { return {type, data.data(), n_in, n_out, row_size(type, n_in)}; }
};

TestMatrix make_matrix(GgmlType type, int64_t n_out, int64_t n_in, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    TestMatrix m{type, n_out, n_in, {}, {}};
    const size_t rb = row_size(type, n_in);
    m.data.resize(rb * static_cast<size_t>(n_out));
    m.deq.resize(static_cast<size_t>(n_out * n_in));
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_out; ++r) {
        // Rows of different magnitude, with a mean offset so that minima and offsets matter.
        const float scale = 0.02f + uniform(rng), mean = 0.3f * (uniform(rng) - 0.5f);
        for (float& v : row) v = scale * (normal(rng) + mean);
        quantize_row(type, row.data(), m.data.data() + rb * static_cast<size_t>(r), n_in);
        dequantize_row(type, m.data.data() + rb * static_cast<size_t>(r), m.deq.data() + r * n_in, n_in);
    }
    return m;
}

// Activations like a transformer's: mostly N(0.2, 1), a few large outliers, never all zero.
std::vector<float> make_input(int64_t n_tokens, int64_t n_in, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.2f, 1.0f);
    std::uniform_int_distribution<int> outlier(0, 63);
    std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
    for (float& v : x) v = outlier(rng) == 0 ? 12.0f * normal(rng) : normal(rng);
    return x;
}

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

std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

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
                packed.emplace(m.view(), &pool);
                w.packed = packed->data();
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
                           type == GgmlType::Q5_1;
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
        // in passes of 8, 12 or 16 with padding tokens: 9, 12, 13, AMX groups).
        const bool k = type == GgmlType::Q4_K || type == GgmlType::Q5_K;
        for (auto [n_out, n_in] : {std::pair<int64_t, int64_t>{45, k ? 768 : 800}, {7, k ? 256 : 32}, {18, 2816}}) {
            const TestMatrix m = make_matrix(type, n_out, n_in, rng);
            // The packed view's file data are zeros, so only kernels that read the packed form give m's results.
            const std::vector<uint8_t> zeros(m.data.size(), 0);
            WeightMatrix packed_view = m.view();
            packed_view.data = zeros.data();
            PackedWeights packed(m.view(), &pools[1]);
            packed_view.packed = packed.data();
            const size_t record = type == GgmlType::Q8_0 ? 544
                                  : type == GgmlType::Q4_1   ? 320
                                  : type == GgmlType::Q5_1   ? 384
                                  : type == GgmlType::Q5_K || type == GgmlType::Q5_0 ? 352
                                                                                     : 288;  // Q4_0, Q4_K
            REQUIRE(packed.bytes() == static_cast<size_t>((n_out + 15) / 16 * (n_in / 32)) * record);
            REQUIRE(PackedWeights::bytes_for(m.view()) == packed.bytes());
            {  // packed into another's memory (the backend's one mapping for all its matrices), at a cache line
                const HugeMemory memory(64 + packed.bytes());
                REQUIRE(reinterpret_cast<uintptr_t>(memory.data()) % (uintptr_t{2} << 20) == 0);
                auto* at = static_cast<uint8_t*>(memory.data()) + 64;
                const PackedWeights into(m.view(), &pools[1], {}, at);
                REQUIRE(into.data() == at);
                CHECK(std::memcmp(into.data(), packed.data(), packed.bytes()) == 0);
            }
            for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 9, 12, 13, 16, 17, 40, 400}) {
                if (n_tokens == 400 && n_in != 2816) continue;
                const std::vector<float> x = make_input(n_tokens, n_in, rng);
                for (Isa isa : {Isa::avx2, Isa::avx512, Isa::amx}) {
                    if (!PackedWeights::supports(type, isa)) continue;
                    for (ThreadPool& pool : pools) {
                        INFO(fmt::format("{} {}x{} tokens {} isa {} threads {}", type_name(type), n_out, n_in,
                                         n_tokens, isa_name(isa), pool.size()));
                        std::vector<float> y[2];
                        for (int i = 0; i < 2; ++i) {
                            Activations act;
                            act.set(x.data(), n_tokens, n_in);
                            y[i] = poisoned(static_cast<size_t>(n_tokens * n_out));
                            matmul(i == 0 ? m.view() : packed_view, act, y[i].data(), pool, isa);
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
        quill::test::skip("built without SIMDe (libsimde-dev): the AVX-512 kernels cannot run on this machine");
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
    CHECK_FALSE(matmul_supports(GgmlType::IQ2_XXS));
    CHECK_FALSE(matmul_supports(GgmlType::I32));
    std::vector<uint8_t> data(66 * 4);
    std::vector<float> x(256, 1.0f), y(4);
    Activations act;
    act.set(x.data(), 1, 256);
    ThreadPool pool(1);
    WeightMatrix w{GgmlType::IQ2_XXS, data.data(), 256, 4, 66};
    CHECK_THROWS_AS(matmul(w, act, y.data(), pool, Isa::generic), Error);
    WeightMatrix wrong_len{GgmlType::Q4_0, data.data(), 128, 4, row_size(GgmlType::Q4_0, 128)};
    CHECK_THROWS_AS(matmul(wrong_len, act, y.data(), pool, Isa::generic), Error);
}

TEST_CASE("activation quantization equals the reference Q8_0 quantizer on every ISA", "[matmul]") {
    std::mt19937 rng(77);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int trial = 0; trial < 2000; ++trial) {
        float x[32];
        const float scale = std::pow(10.0f, static_cast<float>(trial % 9) - 4.0f);
        for (float& v : x) v = normal(rng) * scale;
        if (trial % 5 == 0) {  // exact halves after scaling: amax 127 makes x / d = x, ties at k + 0.5
            for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i % 2 ? i : -i) + 0.5f;
            x[0] = 127.0f;
        }
        if (trial % 5 == 1) {  // the floats next to those ties, either side (the AVX2 rounding's hardest cases)
            for (int i = 0; i < 32; ++i) {
                const float tie = i < 2 ? (i == 0 ? 0.5f : -0.5f)  // where ulp(x) is finer than ulp(x + 1/2)
                                        : static_cast<float>(i % 2 ? i : -i) + (i % 4 < 2 ? 0.5f : -0.5f);
                x[i] = std::nextafter(tie, trial % 10 == 1 ? 0.0f : 1000.0f * tie);
            }
            x[31] = -127.0f;
        }
        if (trial == 1) std::fill(std::begin(x), std::end(x), 0.0f);
        BlockQ8_0 ref{};
        quantize_row(GgmlType::Q8_0, x, &ref, 32);
        for (QuantizeBlock qb : {generic::quantize_block, avx2::quantize_block}) {
            if (qb == avx2::quantize_block && !isa_available(Isa::avx2)) continue;
            int8_t q[32];
            int32_t sums[2];
            const float d = qb(x, q, sums);
            INFO("trial " << trial);
            CHECK(fp32_to_fp16(d) == ref.d);
            CHECK(std::equal(q, q + 32, ref.qs));
            CHECK(sums[0] == std::accumulate(ref.qs, ref.qs + 16, 0));
            CHECK(sums[1] == std::accumulate(ref.qs + 16, ref.qs + 32, 0));
        }
    }
}

TEST_CASE("activation quantization is defined for huge, tiny, infinite and NaN inputs", "[matmul]") {
    // Such values once converted out of int32's range (undefined behaviour; the sums overflowed). Now every q is
    // in -127..127 and the sums add up; NaN quantizes to 0. Finite blocks give the same bytes on every ISA.
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float big = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::denorm_min();
    std::vector<std::vector<float>> blocks;
    auto block = [&](auto f) {
        std::vector<float> x(32);
        for (int i = 0; i < 32; ++i) x[i] = f(i);
        blocks.push_back(x);
    };
    block([&](int i) { return i % 2 ? big : -big / static_cast<float>(i + 1); });
    block([&](int i) { return static_cast<float>(i % 3) * tiny * (i % 2 ? 1.0f : -1.0f); });
    block([&](int i) { return 1e-39f * static_cast<float>(i - 16); });
    block([&](int i) { return i == 7 ? inf : static_cast<float>(i); });
    block([&](int i) { return i == 30 ? -inf : static_cast<float>(i); });
    block([&](int i) { return i % 4 == 0 ? nan : static_cast<float>(i) - 10.0f; });
    block([&](int i) { return i == 31 ? nan : 1.0f; });
    block([&](int) { return nan; });
    for (size_t b = 0; b < blocks.size(); ++b) {
        const float* x = blocks[b].data();
        const bool finite = std::all_of(x, x + 32, [](float v) { return std::isfinite(v); });
        std::vector<std::vector<int8_t>> results;
        for (QuantizeBlock qb : {generic::quantize_block, avx2::quantize_block}) {
            if (qb == avx2::quantize_block && !isa_available(Isa::avx2)) continue;
            int8_t q[32];
            int32_t sums[2];
            qb(x, q, sums);
            INFO("block " << b);
            CHECK(std::all_of(q, q + 32, [](int8_t v) { return v >= -127 && v <= 127; }));
            CHECK(sums[0] == std::accumulate(q, q + 16, 0));
            CHECK(sums[1] == std::accumulate(q + 16, q + 32, 0));
            for (int i = 0; i < 32; ++i)
                if (std::isnan(x[i])) CHECK(q[i] == 0);
            results.emplace_back(q, q + 32);
        }
        if (finite && results.size() == 2) CHECK(results[0] == results[1]);
    }
}

#ifdef QUILL_AVX512_EMULATION
namespace quill::cpu::avx512_simde {
bool quantize_rows(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out);
}
#endif

// (The AVX2 packed kernels, which read the portable packer's tiles on machines without AVX-512, are checked against
// the file's layout above.)
TEST_CASE("the portable packer writes the AVX-512 packer's bytes", "[matmul]") {
    if (!isa_available(Isa::avx512) || avx512_emulated()) {
        quill::test::skip_no_device("no native AVX-512 here: no AVX-512 packer to compare with");
        return;
    }
    std::mt19937 rng(4242);
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K}) {
        const int64_t k = type_traits(type).block_size / 32;  // 8 for the super-block types
        for (auto [n_out, n_in] : {std::pair<int64_t, int64_t>{45, 800 * k}, {7, 32 * k}, {32, 96 * k}}) {
            INFO(fmt::format("{} {}x{}", type_name(type), n_out, n_in));
            const TestMatrix m = make_matrix(type, n_out, n_in, rng);
            const int64_t n_tiles = (n_out + 15) / 16;
            const size_t bytes = static_cast<size_t>(n_tiles * (n_in / 32) * packed_record_bytes(type));
            std::vector<uint8_t> portable(bytes, 0xAB), transposed(bytes, 0xCD);
            generic::pack_tiles(m.view(), portable.data(), 0, n_tiles);
            REQUIRE(avx512::pack_tiles(m.view(), transposed.data(), 0, n_tiles));
            CHECK(portable == transposed);
        }
    }
}

namespace {

// Every buffer quantize_activations writes, filled with a marker byte first (so that what a quantizer leaves
// unwritten compares too), and the QuantizedActs over them.
struct ActBuffers {
    std::vector<int8_t> qs, tile_qs;
    std::vector<uint8_t> qs_u;
    std::vector<float> d, ds, ds16, tile_d, tile_ds;
    std::vector<int32_t> isum, tile_isum;
    QuantizedActs view;

    ActBuffers(int64_t n_tokens, int64_t n_in, bool unsigned_copy, bool tiles) {
        const int64_t qs_stride = (n_in + 63) / 64 * 64, blk_stride = qs_stride / 32, nb = n_in / 32;
        const int64_t tile_entries = (n_tokens + kAmxGroup - 1) / kAmxGroup * nb * kAmxGroup;
        auto fill = [](auto& v, int64_t n) {
            v.resize(static_cast<size_t>(n));
            std::memset(v.data(), 0x5A, v.size() * sizeof(v[0]));
        };
        fill(qs, n_tokens * qs_stride);
        fill(d, n_tokens * blk_stride);
        fill(ds, n_tokens * blk_stride);
        fill(ds16, 2 * n_tokens * blk_stride);
        fill(isum, n_tokens * blk_stride);
        if (unsigned_copy) fill(qs_u, n_tokens * qs_stride);
        if (tiles) {
            fill(tile_qs, 32 * tile_entries);
            fill(tile_d, tile_entries);
            fill(tile_ds, tile_entries);
            fill(tile_isum, tile_entries);
        }
        view = {qs.data(),   d.data(),    ds.data(),      ds16.data(),    isum.data(),
                unsigned_copy ? qs_u.data() : nullptr,
                tiles ? tile_qs.data() : nullptr, tiles ? tile_d.data() : nullptr, tiles ? tile_ds.data() : nullptr,
                tiles ? tile_isum.data() : nullptr, nullptr,
                n_tokens,    n_in,        qs_stride,      blk_stride};
    }
    template <typename T>
    static bool same(const std::vector<T>& a, const std::vector<T>& b) {
        return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
    }
    bool operator==(const ActBuffers& o) const {
        return same(qs, o.qs) && same(qs_u, o.qs_u) && same(d, o.d) && same(ds, o.ds) && same(ds16, o.ds16) &&
               same(isum, o.isum) && same(tile_qs, o.tile_qs) && same(tile_d, o.tile_d) && same(tile_ds, o.tile_ds) &&
               same(tile_isum, o.tile_isum);
    }
};

using QuantizeRows = bool (*)(const float*, int64_t, int64_t, int64_t, const QuantizedActs&);

// The many-block quantizers this machine can run: the AVX2 one (eight blocks at a time), the AVX-512 one (sixteen)
// natively, and its SIMDe build.
std::vector<std::pair<const char*, QuantizeRows>> wide_quantizers() {
    std::vector<std::pair<const char*, QuantizeRows>> out;
    if (isa_available(Isa::avx2)) out.emplace_back("avx2 (eight blocks at a time)", avx2::quantize_rows);
    if (isa_available(Isa::avx512) && !avx512_emulated()) out.emplace_back("avx512", avx512::quantize_rows);
#ifdef QUILL_AVX512_EMULATION
    out.emplace_back("avx512 on SIMDe", avx512_simde::quantize_rows);
#endif
    return out;
}

}  // namespace

TEST_CASE("the wide activation quantizers write what quantize_activations writes", "[matmul]") {
    const auto quantizers = wide_quantizers();
    if (quantizers.empty()) {
        quill::test::skip_no_device("neither AVX2 nor AVX-512 (native or SIMDe): no wide quantizer can run");
        return;
    }
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> pick(0, 9);
    for (int64_t n_in : {32, 64, 96, 512, 544, 576, 1024, 1536, 1568}) {
        for (int64_t n_tokens : {1, 3, 17}) {
            std::vector<float> x(static_cast<size_t>(n_in * n_tokens));
            for (size_t b = 0; b < x.size() / 32; ++b) {  // blocks of every kind of scale, zeros and exact ties
                const int kind = pick(rng);
                const float scale = std::pow(10.0f, static_cast<float>(kind) - 5.0f);
                for (size_t i = 0; i < 32; ++i) {
                    float& v = x[32 * b + i];
                    v = kind == 0 ? 0.0f : normal(rng) * scale;
                    if (kind == 9) v = static_cast<float>(i % 2 ? i : -static_cast<int>(i)) + (i == 0 ? 127.0f : 0.5f);
                }
                if (kind == 8) x[32 * b + 5] = 1e-42f;  // a subnormal among normal values
                if (kind == 1) x[32 * b + 31] = 7e-45f * static_cast<float>(b % 3);  // scales below fp16's range
                if (kind == 7) x[32 * b + 2] = 3e37f;  // a scale past fp16's range
            }
            for (const bool tiles : {false, true}) {
                const bool unsigned_copy = n_tokens > 1;
                ActBuffers want(n_tokens, n_in, unsigned_copy, tiles);
                quantize_activations(x.data(), n_in, 0, n_tokens, want.view, generic::quantize_block);
                for (const auto& [name, quantize] : quantizers) {
                    ActBuffers got(n_tokens, n_in, unsigned_copy, tiles);
                    // Two calls, as the threads split the tokens.
                    REQUIRE(quantize(x.data(), n_in, 0, n_tokens / 2, got.view));
                    REQUIRE(quantize(x.data(), n_in, n_tokens / 2, n_tokens, got.view));
                    INFO(name << ", n_in " << n_in << ", " << n_tokens << " tokens, tiles " << tiles);
                    CHECK(got == want);
                }
            }
        }
    }
}

TEST_CASE("the wide activation quantizers keep non-finite inputs in range", "[matmul]") {
    const auto quantizers = wide_quantizers();
    if (quantizers.empty()) {
        quill::test::skip_no_device("neither AVX2 nor AVX-512 (native or SIMDe): no wide quantizer can run");
        return;
    }
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float big = std::numeric_limits<float>::max();
    std::vector<float> x(32 * 20);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 37) - 18.0f;
    x[3] = nan;
    x[32 * 2 + 7] = inf;
    x[32 * 5 + 30] = -inf;
    for (size_t i = 32 * 9; i < 32 * 10; ++i) x[i] = nan;
    for (size_t i = 32 * 17; i < 32 * 18; ++i) x[i] = i % 2 ? big : -big;
    const std::vector<size_t> non_finite = {0, 2, 5, 9};
    ActBuffers want(1, 640, false, false);
    quantize_activations(x.data(), 640, 0, 1, want.view, generic::quantize_block);
    for (const auto& [name, quantize] : quantizers) {
        ActBuffers got(1, 640, false, false);
        REQUIRE(quantize(x.data(), 640, 0, 1, got.view));
        INFO(name);
        for (size_t b = 0; b < 20; ++b) {
            INFO("block " << b);
            const int8_t* q = got.qs.data() + 32 * b;
            int32_t sum = 0;
            for (size_t i = 0; i < 32; ++i) {
                CHECK((q[i] >= -127 && q[i] <= 127));
                if (std::isnan(x[32 * b + i])) CHECK(q[i] == 0);
                sum += q[i];
            }
            CHECK(got.isum[b] == sum);
            if (std::find(non_finite.begin(), non_finite.end(), b) == non_finite.end()) {
                CHECK(std::equal(q, q + 32, want.qs.data() + 32 * b));
                CHECK(std::memcmp(&got.d[b], &want.d[b], sizeof(float)) == 0);
            }
        }
    }
}

TEST_CASE("the thread pool runs every task of every section once, with more threads than cores", "[matmul]") {
    const int cores = ThreadPool::physical_cores();
    REQUIRE(cores >= 1);
    for (int threads : {2, 3, 4 * cores + 1}) {
        INFO(threads << " threads on " << cores << " cores");
        ThreadPool pool(threads);
        std::vector<std::atomic<int>> runs(static_cast<size_t>(threads));
        std::atomic<int> in_flight_same{0};
        std::vector<std::atomic<int>> busy(static_cast<size_t>(threads));
        constexpr int kSections = 3000;
        for (int s = 0; s < kSections; ++s) {
            pool.run([&](int ith, int nth) {
                if (nth != threads) in_flight_same.fetch_add(1000);  // no Catch assertions off the main thread
                // Two calls with one ith never overlap (ith indexes per-thread scratch).
                if (busy[ith].fetch_add(1) != 0) in_flight_same.fetch_add(1);
                runs[ith].fetch_add(1);
                if (s % 500 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // a slow task
                busy[ith].fetch_sub(1);
            });
        }
        CHECK(in_flight_same.load() == 0);
        for (int i = 0; i < threads; ++i) CHECK(runs[i].load() == kSections);
    }
}

TEST_CASE("the lane layout of int8 activations holds each whole group's blocks as the AVX2 lane kernels read them",
          "[matmul]") {
    // QuantizedActs::lanes: block b of group g at lanes[g * nb + b], qs[k] bytes 4j .. 4j + 3 = bytes 4k .. 4k + 3
    // of token 8g + j's block, then its d, ds and isum; tokens past the last whole group have none. The portable
    // writer against that definition, and the AVX2 one (as the threads call it: ranges of tokens, ranges of blocks)
    // against the portable one.
    std::mt19937 rng(99);
    const int64_t n_in = 352, nb = n_in / 32;
    for (int64_t n_tokens : {8, 16, 27}) {
        const std::vector<float> x = make_input(n_tokens, n_in, rng);
        ActBuffers acts(n_tokens, n_in, false, false);
        quantize_activations(x.data(), n_in, 0, n_tokens, acts.view, generic::quantize_block);
        const int64_t n_groups = n_tokens / kLaneTokens;
        std::vector<LaneActs> want(static_cast<size_t>(n_groups * nb + 1));  // one more, left as made
        std::memset(want.data(), 0x5A, want.size() * sizeof(LaneActs));
        QuantizedActs q = acts.view;
        q.lanes = want.data();
        generic::lay_out_lanes(q, 0, n_tokens, 0, nb);
        INFO(n_tokens << " tokens");
        for (int64_t t = 0; t < n_groups * kLaneTokens; ++t) {
            for (int64_t b = 0; b < nb; ++b) {
                const LaneActs& l = want[static_cast<size_t>(t / 8 * nb + b)];
                const int64_t j = t % 8, at = t * q.blk_stride + b;
                for (int k = 0; k < 8; ++k)
                    CHECK(std::memcmp(l.qs[k] + 4 * j, q.qs + t * q.qs_stride + 32 * b + 4 * k, 4) == 0);
                CHECK(l.d[j] == q.d[at]);
                CHECK(l.ds[j] == q.ds[at]);
                CHECK(l.isum[j] == q.isum[at]);
            }
        }
        const auto* last = reinterpret_cast<const uint8_t*>(&want.back());
        CHECK(std::all_of(last, last + sizeof(LaneActs), [](uint8_t v) { return v == 0x5A; }));
        if (!isa_available(Isa::avx2)) continue;
        for (int split = 0; split < 2; ++split) {
            std::vector<LaneActs> got(want.size());
            std::memset(got.data(), 0x5A, got.size() * sizeof(LaneActs));
            q.lanes = got.data();
            if (split == 0) {
                avx2::lay_out_lanes(q, 0, 8, 0, nb);
                avx2::lay_out_lanes(q, 8, n_tokens, 0, nb);
            } else {
                avx2::lay_out_lanes(q, 0, n_tokens, 0, 4);
                avx2::lay_out_lanes(q, 0, n_tokens, 4, nb);
            }
            INFO("split by " << (split == 0 ? "tokens" : "blocks"));
            CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(LaneActs)) == 0);
        }
    }
}

TEST_CASE("an input quantized for another ISA (no lane layout) gives the AVX2 lane kernels' bits", "[matmul]") {
    // The AVX2 kernels read the lane layout where reserve_int8 made one (AVX2, eight tokens or more); an int8 form
    // made for the generic ISA has none, and the same products then go the row way, with the same bits.
    if (!isa_available(Isa::avx2)) return quill::test::skip_no_device("no AVX2 here: the lane kernels cannot run");
    std::mt19937 rng(2718);
    ThreadPool pool(2);
    for (GgmlType type : {GgmlType::Q4_1, GgmlType::Q8_0}) {
        const TestMatrix m = make_matrix(type, 40, 352, rng);
        const std::vector<float> x = make_input(19, 352, rng);
        PackedWeights packed(m.view(), &pool);
        WeightMatrix w = m.view();
        w.packed = packed.data();
        std::vector<float> y[2];
        for (int i = 0; i < 2; ++i) {
            Activations act;
            act.set(x.data(), 19, 352);
            if (i == 1) {
                act.begin_int8(Isa::generic);
                act.quantize_int8(0, 19);
                act.end_int8();
            }
            y[i] = poisoned(static_cast<size_t>(19 * m.n_out));
            matmul(w, act, y[i].data(), pool, Isa::avx2);
        }
        INFO(type_name(type));
        CHECK(std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)) == 0);
    }
}

TEST_CASE("greedy_search finds first_max's index and any non-finite value in one pass", "[matmul]") {
    int64_t index = -1;
    bool finite = false;
    const float probe = 1.0f;
    if (!isa_available(Isa::avx512) || avx512_emulated() || !avx512::greedy_search(&probe, 1, 1, &index, &finite))
        return quill::test::skip_no_device("no AVX-512 here: greedy rows take the portable check and search");
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    for (int64_t n : {1, 15, 16, 17, 100, 4099}) {
        for (int round = 0; round < 20; ++round) {
            // logits on a coarse grid, so that the largest value often comes more than once (ties: the first wins),
            // with signed zeros mixed in
            std::vector<float> x(static_cast<size_t>(n));
            for (float& v : x) v = std::round(u(rng));
            if (round % 4 == 1) std::fill(x.begin(), x.end(), round % 8 == 1 ? 0.0f : -0.0f);
            if (round % 4 == 2)
                for (size_t i = 0; i < x.size(); i += 3) x[i] = -x[i] == 0.0f ? -0.0f : x[i];
            const int64_t n_search = round % 3 == 0 ? n : std::max<int64_t>(1, n / 2);
            INFO(n << " values, " << n_search << " searched, round " << round);
            REQUIRE(avx512::greedy_search(x.data(), n_search, n, &index, &finite));
            CHECK(finite);
            CHECK(index == static_cast<int64_t>(first_max({x.data(), static_cast<size_t>(n_search)})));
            // one non-finite value anywhere in [0, n), searched or not, is found
            for (float bad : {INFINITY, -INFINITY, NAN}) {
                const size_t at = static_cast<size_t>(rng() % static_cast<uint32_t>(n));
                const float keep = x[at];
                x[at] = bad;
                REQUIRE(avx512::greedy_search(x.data(), n_search, n, &index, &finite));
                CHECK_FALSE(finite);
                x[at] = keep;
            }
        }
    }
    // nothing but -inf: first_max's answer, the first of them
    const std::vector<float> low(40, -INFINITY);
    REQUIRE(avx512::greedy_search(low.data(), 40, 40, &index, &finite));
    CHECK_FALSE(finite);
    CHECK(index == 0);
}
