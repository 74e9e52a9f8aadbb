// The CPU attention (engine/cpu/attention.*): the tiled kernel of each available ISA against the plain two-pass
// attention (the reference backend's arithmetic) at cache lengths from 1 to 2048, for decode rows (one token's heads)
// and prefill tiles (several tokens of one slot), with and without a sliding window, head sizes with and without a
// multiple of 16, every grouping of query heads on a KV head, both cache types; and batch invariance: a row's output
// has the same bits whichever rows share its call and whichever of the kernel's lane layouts runs it.
#include "engine/cpu/attention.h"
#include "engine/format/quant.h"
#include "tests/support/attention_inputs.h"
#include "tests/support/backend_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace test_attention {

using namespace quill;
using namespace quill::cpu;

using namespace quill::test::attention;

TEST_CASE("tiled attention equals the plain attention at cache lengths 1 to 2048", "[cpu]") {
    const Shape shapes[] = {{4, 4, 64}, {6, 2, 128}, {8, 1, 72}, {16, 2, 64}, {12, 1, 40}, {3, 3, 8}, {9, 3, 64},
                            {4, 1, 256}};
    if (tiled_kv_ops().empty()) return test::skip_no_device("no AVX2 here: the CPU has no tiled attention kernel");
    const KvOps& plain = kv_ops(Isa::generic, true);
    for (const Shape& s : shapes) {
        for (int n_kv : {1, 17, 511, 2048}) {
            const Inputs in = random_inputs(s, n_kv, static_cast<uint32_t>(n_kv * 31 + s.head_dim));
            for (KvType kv : {KvType::f32, KvType::f16}) {
                for (int window : {0, 100}) {
                    // The last token alone (a decode), then the last 16 as a prefill in tiles of 4.
                    const int t0 = std::max(0, n_kv - 16);
                    const std::vector<float> want = slice(attend_tokens(in, kv, plain, t0, n_kv, 1, window), in, t0, n_kv);
                    const std::vector<float> want_last(want.end() - static_cast<ptrdiff_t>(want.size()) /
                                                                        (n_kv - t0), want.end());
                    for (const KvOps* ops : tiled_kv_ops()) {
                        INFO(s.n_head << "/" << s.n_head_kv << " heads of " << s.head_dim << ", " << n_kv
                                      << " positions, KV " << kv_type_name(kv) << ", window " << window);
                        const std::vector<float> decode =
                            slice(attend_tokens(in, kv, *ops, n_kv - 1, n_kv, 1, window), in, n_kv - 1, n_kv);
                        const std::vector<float> tiled =
                            slice(attend_tokens(in, kv, *ops, t0, n_kv, 4, window), in, t0, n_kv);
                        // Both round q and the probabilities to fp16 with an f16 cache; they differ in summation
                        // order and in exp (a polynomial within 2 ulp of expf), and where an intermediate sits that
                        // close to an fp16 rounding boundary one probability moves one fp16 step (2^-11 of itself).
                        // Measured here, max |diff| / rms over all cases: f32 cache 1.3e-5 (scores reach |s| ~ 10
                        // with these sharp queries, so their float error of a few 1e-7 shows in exp), f16 cache
                        // 8.6e-4; limits 4e-5 and 2e-3.
                        const double tol = kv == KvType::f32 ? 4e-5 : 2e-3;
                        CHECK(test::max_diff(tiled, want) / test::rms(want) <= tol);
                        CHECK(test::max_diff(decode, want_last) / test::rms(want_last) <= tol);
                    }
                }
            }
        }
    }
}

TEST_CASE("a row's attention has the same bits whichever rows share its call", "[cpu]") {
    const Shape s{12, 3, 64};  // groups of 4 query heads per KV head
    const int n_kv = 300, t0 = 284;
    if (tiled_kv_ops().empty()) return test::skip_no_device("no AVX2 here: the CPU has no tiled attention kernel");
    const Inputs in = random_inputs(s, n_kv, 5);
    for (const KvOps* fast : tiled_kv_ops()) {
        for (KvType kv : {KvType::f32, KvType::f16}) {
            for (int window : {0, 70}) {
                INFO("KV " << kv_type_name(kv) << ", window " << window);
                const KvOps& ops = *fast;
                // Rows one by one, then tiles of 1 token (4 rows: keys in lanes) and of 2, 4, 6 and 8 tokens (8, 16, 24
                // and 32 rows: one to four vectors of rows in lanes).
                std::vector<float> alone(in.q.size(), NAN);
                std::vector<float> scratch(attend_scratch_floats(n_kv));
                for (int g = 0; g < s.n_head_kv; ++g)
                    for (int t = t0; t < n_kv; ++t)
                        for (int h = 4 * g; h < 4 * g + 4; ++h) {
                            const std::vector<AttnRow> row = rows_of(in, t, t + 1, h, h + 1, window, alone);
                            attend_rows(row.data(), 1, kv_head(in, kv, g), ops, scratch.data());
                        }
                for (int tile : {1, 2, 4, 6, 8}) {
                    INFO("tiles of " << tile << " tokens");
                    CHECK(same_bits(slice(attend_tokens(in, kv, ops, t0, n_kv, tile, window), in, t0, n_kv),
                                    slice(alone, in, t0, n_kv)));
                }
                // One token's heads two and three at a time (keys in lanes, rows sharing each key vector), the rest
                // of the group alone.
                for (int heads : {2, 3}) {
                    INFO(heads << " heads per call");
                    std::vector<float> shared(in.q.size(), NAN);
                    for (int g = 0; g < s.n_head_kv; ++g)
                        for (int t = t0; t < n_kv; ++t)
                            for (int h = 4 * g; h < 4 * g + 4; h += heads) {
                                const std::vector<AttnRow> rows =
                                    rows_of(in, t, t + 1, h, std::min(h + heads, 4 * g + 4), window, shared);
                                attend_rows(rows.data(), static_cast<int>(rows.size()), kv_head(in, kv, g), ops,
                                            scratch.data());
                            }
                    CHECK(same_bits(slice(shared, in, t0, n_kv), slice(alone, in, t0, n_kv)));
                }
            }
        }
    }
}

TEST_CASE("KvPrefetch covers its two ranges' whole lines in order", "[cpu]") {
    alignas(64) static char buf[1024];
    KvPrefetch p;
    CHECK(p.left() == 0);
    p.set(buf + 60, 10, buf + 256, 129);  // lines 0 and 1, then 4, 5 and 6
    CHECK(p.left() == 5);
    p.step(1);
    CHECK(p.left() == 4);
    p.step(3);  // across the end of the first range
    CHECK(p.left() == 1);
    p.step(10);
    CHECK(p.left() == 0);
    p.set(buf, 0, buf + 64, 64);  // an empty range, then one line
    CHECK(p.left() == 1);
    p.finish();
    CHECK(p.left() == 0);
    p.set(buf, 1024, nullptr, 0);
    p.set(buf, 64, nullptr, 0);  // what was left is dropped
    CHECK(p.left() == 1);
}

// The backend hands the kernels the next unit's lines to prefetch as they go: the kernels step through them, and a
// row's result is the same with or without them.
TEST_CASE("the tiled kernels step a KvPrefetch and give the same bits with it", "[cpu]") {
    const Shape s{9, 3, 64};  // SmolLM2's heads
    const int n_kv = 200;
    if (tiled_kv_ops().empty()) return test::skip_no_device("no AVX2 here: the CPU has no tiled attention kernel");
    const Inputs in = random_inputs(s, n_kv, 9);
    std::vector<float> scratch(attend_scratch_floats(n_kv));
    for (const KvOps* ops : tiled_kv_ops()) {
        for (KvType kv : {KvType::f32, KvType::f16}) {
            for (int tile : {1, 4}) {  // a decode's three rows (keys in lanes), four tokens' twelve (rows in lanes)
                INFO("KV " << kv_type_name(kv) << ", tiles of " << tile << " tokens");
                std::vector<float> plain(in.q.size(), NAN), stepped(in.q.size(), NAN);
                for (int g = 0; g < s.n_head_kv; ++g)
                    for (int t = n_kv - 2 * tile; t < n_kv; t += tile) {
                        const std::vector<AttnRow> a = rows_of(in, t, t + tile, 3 * g, 3 * g + 3, 0, plain);
                        attend_rows(a.data(), static_cast<int>(a.size()), kv_head(in, kv, g), *ops, scratch.data());
                        KvPrefetch ahead;
                        ahead.set(in.k16.data(), in.k16.size() * 2, in.v16.data(), in.v16.size() * 2);
                        const size_t lines = ahead.left();
                        const std::vector<AttnRow> b = rows_of(in, t, t + tile, 3 * g, 3 * g + 3, 0, stepped);
                        attend_rows(b.data(), static_cast<int>(b.size()), kv_head(in, kv, g), *ops, scratch.data(),
                                    &ahead);
                        CHECK(ahead.left() < lines);
                    }
                CHECK(same_bits(slice(stepped, in, n_kv - 2 * tile, n_kv), slice(plain, in, n_kv - 2 * tile, n_kv)));
            }
        }
    }
}

// Sequences that copied a prompt prefix read it from one copy (KvShare): the kernels must read exactly the positions
// it covers there and the rest from the head's own cache. Against a cache whose first positions hold other values,
// attending with those values given as the shared copy must give the bits of attending over a cache that holds them
// itself; and a shared copy of the same values, the bits without one. Shared lengths within a key block and whole
// blocks; decode rows and prefill tiles that see only shared positions, both, or none; the whole and the split form
// (which reads only whole key blocks there).
TEST_CASE("the tiled kernels read the positions a KvShare covers from the shared copy", "[cpu]") {
    const Shape s{9, 3, 64};
    const int n_kv = 230;
    if (tiled_kv_ops().empty()) return test::skip_no_device("no AVX2 here: the CPU has no tiled attention kernel");
    const Inputs in = random_inputs(s, n_kv, 21), other = random_inputs(s, n_kv, 22);
    const Inputs copy = in;
    // in with other's values at positions below n
    auto other_below = [&](int n) {
        Inputs m = in;
        const int64_t row = static_cast<int64_t>(s.n_head_kv) * s.head_dim;
        for (int j = 0; j < n; ++j)
            for (int64_t e = 0; e < row; ++e) {
                const size_t ko = k_cache_offset(j, e, row), vo = static_cast<size_t>(j * row + e);
                m.k[ko] = other.k[ko];
                m.k16[ko] = other.k16[ko];
                m.v[vo] = other.v[vo];
                m.v16[vo] = other.v16[vo];
            }
        return m;
    };
    auto shared = [&](const Inputs& own, const Inputs& from, KvType kv, int g, int n_shared) {
        KvHead h = kv_head(own, kv, g);
        const KvHead f = kv_head(from, kv, g);
        h.share = KvShare{f.k, f.v, n_shared};
        return h;
    };
    std::vector<float> scratch(attend_scratch_floats(n_kv));
    for (int n_shared : {8, 96, 128}) {
        const Inputs mixed = other_below(n_shared), mixed_blocks = other_below(n_shared / kKeyBlock * kKeyBlock);
        for (const KvOps* ops : tiled_kv_ops()) {
            for (KvType kv : {KvType::f32, KvType::f16}) {
                for (int tile : {1, 4}) {
                    for (int t0 : {4, 40, 126, 200, n_kv - tile}) {
                        INFO(n_shared << " shared, KV " << kv_type_name(kv) << ", tiles of " << tile << " from " << t0);
                        std::vector<float> want(in.q.size(), NAN), got(in.q.size(), NAN);
                        std::vector<float> plain(in.q.size(), NAN), same(in.q.size(), NAN);
                        for (int g = 0; g < s.n_head_kv; ++g) {
                            const std::vector<AttnRow> w = rows_of(mixed, t0, t0 + tile, 3 * g, 3 * g + 3, 0, want);
                            attend_rows(w.data(), 3 * tile, kv_head(mixed, kv, g), *ops, scratch.data());
                            const std::vector<AttnRow> a = rows_of(in, t0, t0 + tile, 3 * g, 3 * g + 3, 0, got);
                            attend_rows(a.data(), 3 * tile, shared(in, other, kv, g, n_shared), *ops, scratch.data());
                            const std::vector<AttnRow> p = rows_of(in, t0, t0 + tile, 3 * g, 3 * g + 3, 0, plain);
                            attend_rows(p.data(), 3 * tile, kv_head(in, kv, g), *ops, scratch.data());
                            const std::vector<AttnRow> c = rows_of(in, t0, t0 + tile, 3 * g, 3 * g + 3, 0, same);
                            attend_rows(c.data(), 3 * tile, shared(in, copy, kv, g, n_shared), *ops, scratch.data());
                        }
                        CHECK(same_bits(slice(got, in, t0, t0 + tile), slice(want, in, t0, t0 + tile)));
                        CHECK(same_bits(slice(same, in, t0, t0 + tile), slice(plain, in, t0, t0 + tile)));
                        CHECK_FALSE(same_bits(slice(want, in, t0, t0 + tile), slice(plain, in, t0, t0 + tile)));
                    }
                }
                // The split form: a decode row over every block, block by block.
                INFO(n_shared << " shared, KV " << kv_type_name(kv) << ", split form");
                std::vector<float> want(in.q.size(), NAN), got(in.q.size(), NAN);
                auto split = [&](const Inputs& from, const KvHead& h, std::vector<float>& out) {
                    const std::vector<AttnRow> r = rows_of(from, n_kv - 1, n_kv, 0, 3, 0, out);
                    int b_first = 0;
                    const int n_blocks = attend_block_span(r.data(), 3, &b_first);
                    std::vector<float> sc(attend_score_floats(r.data(), 3, *ops) + 8);
                    std::vector<float> parts(static_cast<size_t>(n_blocks) * 3 * s.head_dim);
                    float* s32 =
                        reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(sc.data()) + 31) & ~uintptr_t{31});
                    for (int b = 0; b < n_blocks; ++b) attend_split_scores(r.data(), 3, h, *ops, b_first + b, s32);
                    attend_split_softmax(r.data(), 3, h, *ops, s32);
                    for (int b = 0; b < n_blocks; ++b)
                        attend_split_mix(r.data(), 3, h, *ops, b_first + b, s32,
                                         parts.data() + static_cast<size_t>(b) * 3 * s.head_dim);
                    attend_split_sum(r.data(), 3, s.head_dim, parts.data(), n_blocks);
                };
                split(mixed_blocks, kv_head(mixed_blocks, kv, 0), want);
                split(in, shared(in, other, kv, 0, n_shared), got);
                CHECK(same_bits(slice(got, in, n_kv - 1, n_kv), slice(want, in, n_kv - 1, n_kv)));
            }
        }
    }
}

TEST_CASE("the split form spread over key blocks gives attend_rows' bits", "[cpu]") {
    if (tiled_kv_ops().empty()) return test::skip_no_device("no AVX2 here: the CPU has no tiled attention kernel");
    const Shape s{16, 1, 64};  // one KV head: a token's 16 heads fill a tile
    const int n_kv = 300;
    // without sinks and with them (gpt-oss)
    Inputs with_sinks = random_inputs(s, n_kv, 9);
    add_sinks(with_sinks, 10);
    for (const Inputs& in : {random_inputs(s, n_kv, 9), with_sinks}) {
        for (const KvOps* ops : tiled_kv_ops()) {
            for (KvType kv : {KvType::f32, KvType::f16}) {
                for (int window : {0, 70}) {
                    // Three heads of the last token (keys in lanes), and sixteen rows of the last four tokens (rows in
                    // lanes), each over its whole range in one call and in the split form.
                    for (auto [t0, h1] : {std::pair{n_kv - 1, 3}, std::pair{n_kv - 4, 4}}) {
                        INFO("KV " << kv_type_name(kv) << ", window " << window << ", " << (n_kv - t0) * h1 << " rows"
                                    << (in.sinks.empty() ? "" : ", sinks"));
                        std::vector<float> whole(in.q.size(), NAN), split(in.q.size(), NAN);
                        std::vector<float> scratch(attend_scratch_floats(n_kv));
                        const KvHead head = kv_head(in, kv, 0);
                        const std::vector<AttnRow> a = rows_of(in, t0, n_kv, 0, h1, window, whole);
                        attend_rows(a.data(), static_cast<int>(a.size()), head, *ops, scratch.data());
                        const std::vector<AttnRow> b = rows_of(in, t0, n_kv, 0, h1, window, split);
                        const int n = static_cast<int>(b.size());
                        int b_first = 0;
                        const int n_blocks = attend_block_span(b.data(), n, &b_first);
                        REQUIRE(n_blocks == (n_kv - 1) / kKeyBlock - b_first + 1);
                        REQUIRE(n_blocks >= 2);
                        attend_split_all(b, head, *ops);
                        CHECK(same_bits(slice(whole, in, t0, n_kv), slice(split, in, t0, n_kv)));
                    }
                }
            }
        }
    }
}

TEST_CASE("the AVX-512 build of the attention gives the AVX2 build's bits", "[cpu]") {
    const KvOps& avx2 = kv_ops(Isa::avx2, false);
    const KvOps& avx512 = kv_ops(Isa::avx512, false);
    if (&avx512 == &avx2) return test::skip_no_device("no AVX-512 here: the attention runs its AVX2 build");
    // Head sizes with 64-, 16- and 8-column remainders; decode rows (1 to 4 heads of a token: keys in lanes, 16
    // positions to a register and an odd key vector left) and prefill tiles (rows in lanes); both cache types.
    // (a token's group of 1, 2, 3 or 4 heads is keys in lanes, of 8 or 12 rows in lanes)
    const Shape shapes[] = {{9, 3, 64}, {2, 2, 64}, {4, 2, 48}, {8, 1, 72}, {12, 1, 40}, {3, 3, 8}, {4, 1, 256},
                            {16, 2, 64}};
    for (const Shape& s : shapes) {
        for (int n_kv : {1, 9, 100, 517}) {
            const Inputs in = random_inputs(s, n_kv, static_cast<uint32_t>(n_kv + 7 * s.head_dim));
            for (KvType kv : {KvType::f32, KvType::f16}) {
                for (int window : {0, 70}) {
                    INFO(s.n_head << "/" << s.n_head_kv << " heads of " << s.head_dim << ", " << n_kv
                                  << " positions, KV " << kv_type_name(kv) << ", window " << window);
                    const int t0 = std::max(0, n_kv - 8);
                    for (int tile : {1, 4}) {
                        INFO("tiles of " << tile << " tokens");
                        CHECK(same_bits(attend_tokens(in, kv, avx512, t0, n_kv, tile, window),
                                        attend_tokens(in, kv, avx2, t0, n_kv, tile, window)));
                    }
                }
            }
        }
    }
}

TEST_CASE("the AVX-512 build's SwiGLU and GeGLU give the AVX2 build's bits", "[cpu]") {
    const KvOps& avx2 = kv_ops(Isa::avx2, false);
    const KvOps& avx512 = kv_ops(Isa::avx512, false);
    if (&avx512 == &avx2) return test::skip_no_device("no AVX-512 here: the activations run their AVX2 build");
    std::mt19937 rng(17);
    std::normal_distribution<float> normal(0.0f, 4.0f);
    // lengths with sixteen-, eight- and one-lane remainders; values up to the exponential's clamps and past them
    for (int64_t n : {1, 7, 8, 15, 16, 17, 24, 31, 100, 1536}) {
        std::vector<float> gate(static_cast<size_t>(n)), up(gate.size());
        for (size_t i = 0; i < gate.size(); ++i) {
            gate[i] = normal(rng) * (i % 5 == 0 ? 30.0f : 1.0f);
            up[i] = normal(rng);
        }
        for (bool gelu : {false, true}) {
            INFO(n << " values, " << (gelu ? "GeGLU" : "SwiGLU"));
            std::vector<float> a = gate, b = gate;
            (gelu ? avx2.geglu : avx2.swiglu)(a.data(), up.data(), n);
            (gelu ? avx512.geglu : avx512.swiglu)(b.data(), up.data(), n);
            CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("the vector builds' RMS norm gives the plain loop's bits, and finds inf and NaN", "[cpu]") {
    if (tiled_kv_ops().empty()) return test::skip_no_device("no AVX2 here: the norm runs its plain loop alone");
    const KvOps& plain = kv_ops(Isa::generic, true);
    std::mt19937 rng(23);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // rows with sixteen-, eight- and one-lane remainders (576: SmolLM2's width, 18 vectors of 32)
    for (int64_t d : {1, 5, 8, 13, 16, 24, 31, 64, 256, 576, 577}) {
        const int64_t n = 3;
        std::vector<float> x(static_cast<size_t>(n * d)), p(x.size()), w(static_cast<size_t>(d));
        for (size_t i = 0; i < x.size(); ++i) {
            x[i] = normal(rng) * (i % 7 == 0 ? 300.0f : 1.0f);
            p[i] = normal(rng) * (i % 11 == 0 ? 1e-3f : 2.0f);
        }
        for (float& v : w) v = normal(rng);
        std::vector<float> want_x = x, want_y(x.size()), want_norm(x.size());
        REQUIRE(plain.add_norm(want_x.data(), p.data(), w.data(), want_y.data(), n, d, 1e-5f));
        plain.rms_norm(x.data(), w.data(), want_norm.data(), n, d, 1e-5f);
        // (the plain loop is the scalar sum_squares: rows of a few values are checked against the formula too)
        if (d == 5) {
            double ss = 0.0;
            for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(want_x[i]) * want_x[i];
            const auto scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + 1e-5f));
            for (int64_t i = 0; i < d; ++i) CHECK(want_y[i] == want_x[i] * scale * w[i]);
        }
        for (const KvOps* ops : tiled_kv_ops()) {
            INFO((ops == &kv_ops(Isa::avx2, false) ? "AVX2" : "AVX-512") << " build, rows of " << d);
            std::vector<float> got_x = x, got_y(x.size()), got_norm(x.size());
            CHECK(ops->add_norm(got_x.data(), p.data(), w.data(), got_y.data(), n, d, 1e-5f));
            ops->rms_norm(x.data(), w.data(), got_norm.data(), n, d, 1e-5f);
            CHECK(std::memcmp(got_x.data(), want_x.data(), x.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(got_y.data(), want_y.data(), x.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(got_norm.data(), want_norm.data(), x.size() * sizeof(float)) == 0);
            std::vector<float> in_place = want_x;  // y may be x (the post-norms of gemma3)
            ops->rms_norm(in_place.data(), w.data(), in_place.data(), n, d, 1e-5f);
            CHECK(std::memcmp(in_place.data(), got_y.data(), x.size() * sizeof(float)) == 0);
            // no norm asked: the sum alone
            std::vector<float> sum_only = x;
            CHECK(ops->add_norm(sum_only.data(), p.data(), nullptr, nullptr, n, d, 1e-5f));
            CHECK(std::memcmp(sum_only.data(), want_x.data(), x.size() * sizeof(float)) == 0);
            // an inf or a NaN anywhere (a vector's lanes, a remainder, the last row) makes the sum non-finite
            for (const float bad : {INFINITY, -INFINITY, NAN}) {
                for (int64_t at : {int64_t{0}, d / 2, d - 1, n * d - 1}) {
                    std::vector<float> xb = x;
                    xb[static_cast<size_t>(at)] = bad;
                    INFO("a " << bad << " at " << at);
                    CHECK_FALSE(ops->add_norm(xb.data(), p.data(), nullptr, nullptr, n, d, 1e-5f));
                    xb = x;
                    std::vector<float> pb = p;
                    pb[static_cast<size_t>(at)] = bad;
                    CHECK_FALSE(plain.add_norm(xb.data(), pb.data(), nullptr, nullptr, n, d, 1e-5f));
                    xb = x;
                    CHECK_FALSE(ops->add_norm(xb.data(), pb.data(), nullptr, nullptr, n, d, 1e-5f));
                }
            }
            // values whose sum overflows float: inf from finite inputs
            std::vector<float> big(x.size(), 3e38f);
            CHECK_FALSE(ops->add_norm(big.data(), big.data(), nullptr, nullptr, n, d, 1e-5f));
        }
    }
}

}  // namespace test_attention
