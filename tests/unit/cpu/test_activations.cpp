// The CPU backend's activation side: int8 quantization of activations (each ISA, wide quantizers, non-finite
// inputs, the lane layout), the portable packer, the thread pool and the logits search.
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

#ifdef QUILL_AVX512_EMULATION
namespace quill::cpu::avx512_simde {
bool quantize_rows(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out);
}
#endif

namespace test_activations {

using namespace quill;
using namespace quill::cpu;
using quill::test::make_input;
using quill::test::make_matrix;
using quill::test::TestMatrix;
using quill::test::poisoned;

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
        const PackedWeights packed(m.view(), Isa::avx2, &pool);
        const WeightMatrix w = packed.reading(m.view());
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

}  // namespace test_activations
