// Attention sinks (gpt-oss) in the tiled CPU attention kernels: each row's sink, a logit with no value, joins the
// softmax's maximum and denominator. The kernels of every available ISA against a double-precision softmax and the
// plain per-row path over long caches (GQA groups of 4 and 8, with and without a sliding window, both cache types),
// with sinks large enough that a kernel which dropped them would fail; and batch invariance with sinks: a row has the
// same bits whichever rows share its call and in the AVX-512 build as in the AVX2 one (the split form's bits with
// sinks: test_attention.cpp).
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

namespace test_attention_sinks {

using namespace quill;
using namespace quill::cpu;

using namespace quill::test::attention;

namespace {

// Inputs with a sink on every head.
Inputs sink_inputs(const Shape& s, int n_kv, uint32_t seed) {
    Inputs in = random_inputs(s, n_kv, seed);
    add_sinks(in, seed + 1);
    return in;
}

int first_visible(int t, int window) { return window > 0 && t >= window ? t - window + 1 : 0; }

// Tokens [t0, t1) through attend_rows (attend_tokens), the outputs of those tokens: [t1 - t0, n_head, head_dim].
std::vector<float> attend_with_sinks(const Inputs& in, KvType type, const KvOps& ops, int t0, int t1, int tile,
                                     int window) {
    return slice(attend_tokens(in, type, ops, t0, t1, tile, window), in, t0, t1);
}

// The same in double from the values the kernels see (q, K and V, and the probabilities before they meet V,
// fp16-rounded with an F16 cache): softmax over the visible scores and the sink, then the mix.
std::vector<float> attend_double(const Inputs& in, KvType type, int t0, int t1, int window) {
    const int hd = in.s.head_dim, group = in.s.n_head / in.s.n_head_kv;
    const int64_t row = static_cast<int64_t>(in.s.n_head_kv) * hd;
    const bool f16 = type == KvType::f16;
    auto rounded = [&](float x) { return f16 ? fp16_to_fp32(fp32_to_fp16(x)) : x; };
    const double scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> out;
    std::vector<double> p;
    for (int t = t0; t < t1; ++t)
        for (int h = 0; h < in.s.n_head; ++h) {
            const int g = h / group, first = first_visible(t, window);
            const float* q = in.q.data() + (static_cast<size_t>(t) * in.s.n_head + h) * hd;
            p.assign(static_cast<size_t>(t - first + 1), 0.0);
            double m = in.sinks[h];
            for (int j = first; j <= t; ++j) {
                double s = 0.0;
                for (int d = 0; d < hd; ++d)
                    s += static_cast<double>(rounded(q[d])) * rounded(in.k[k_cache_offset(j, g * hd + d, row)]);
                p[j - first] = s * scale;
                m = std::max(m, p[j - first]);
            }
            double sum = std::exp(in.sinks[h] - m);
            for (double& x : p) sum += x = std::exp(x - m);
            for (double& x : p) x = rounded(static_cast<float>(x / sum));
            for (int d = 0; d < hd; ++d) {
                double o = 0.0;
                for (int j = first; j <= t; ++j) o += p[j - first] * rounded(in.v[j * row + g * hd + d]);
                out.push_back(static_cast<float>(o));
            }
        }
    return out;
}

}  // namespace

TEST_CASE("tiled attention with sinks equals a double-precision softmax over long caches", "[cpu][sinks]") {
    if (tiled_kv_ops().empty()) return test::skip_no_device("no AVX2 here: the CPU has no tiled attention kernel");
    const KvOps& plain = kv_ops(Isa::generic, true);
    // GQA groups of 4 and of 8 (gpt-oss: 64 query heads on 8 KV heads of 64), a global and a windowed layer.
    for (const Shape& s : {Shape{8, 2, 64}, Shape{16, 2, 64}}) {
        const int n_kv = 1100, t0 = n_kv - 8;
        const Inputs in = sink_inputs(s, n_kv, static_cast<uint32_t>(s.n_head));
        for (KvType kv : {KvType::f32, KvType::f16}) {
            for (int window : {0, 128}) {
                INFO(s.n_head << "/" << s.n_head_kv << " heads, KV " << kv_type_name(kv) << ", window " << window);
                const std::vector<float> want = attend_double(in, kv, t0, n_kv, window);
                const std::vector<float> row_path = attend_with_sinks(in, kv, plain, t0, n_kv, 1, window);
                // Limits as for the attention without sinks (test_attention.cpp): summation order and exp differ
                // from the double's, and with an F16 cache the probabilities are rounded to fp16 before V.
                const double tol = kv == KvType::f32 ? 4e-5 : 2e-3;
                CHECK(test::max_diff(row_path, want) / test::rms(want) <= tol);
                // A kernel that left the sinks out is far off: the sinks take much of the rows' weight.
                Inputs without = in;
                without.sinks.clear();
                const std::vector<float> no_sinks = attend_with_sinks(without, kv, plain, t0, n_kv, 1, window);
                CHECK(test::max_diff(no_sinks, want) / test::rms(want) > 0.05);
                for (const KvOps* ops : tiled_kv_ops()) {
                    // A decode's rows (keys in lanes: a token's heads of a KV head, 4 or 8 at a time) and a
                    // prefill's tiles of 4 tokens (rows in lanes).
                    for (int tile : {1, 4}) {
                        INFO("tiles of " << tile << " tokens");
                        const std::vector<float> got = attend_with_sinks(in, kv, *ops, t0, n_kv, tile, window);
                        CHECK(test::max_diff(got, want) / test::rms(want) <= tol);
                        CHECK(test::max_diff(got, row_path) / test::rms(want) <= tol);
                    }
                }
            }
        }
    }
}

TEST_CASE("with sinks, a row's tiled attention has the same bits whichever rows share its call", "[cpu][sinks]") {
    if (tiled_kv_ops().empty()) return test::skip_no_device("no AVX2 here: the CPU has no tiled attention kernel");
    const Shape s{12, 3, 64};  // groups of 4 query heads per KV head
    const int n_kv = 1030, t0 = n_kv - 16;
    const Inputs in = sink_inputs(s, n_kv, 21);
    for (const KvOps* ops : tiled_kv_ops()) {
        for (KvType kv : {KvType::f32, KvType::f16}) {
            for (int window : {0, 128}) {
                INFO("KV " << kv_type_name(kv) << ", window " << window);
                // tiles of 1 token (4 rows: keys in lanes), 2, 4 and 8 tokens (8 to 32 rows: rows in lanes)
                const std::vector<float> one = attend_with_sinks(in, kv, *ops, t0, n_kv, 1, window);
                for (int tile : {2, 4, 8}) {
                    INFO("tiles of " << tile << " tokens");
                    CHECK(same_bits(attend_with_sinks(in, kv, *ops, t0, n_kv, tile, window), one));
                }
            }
        }
    }
}

TEST_CASE("with sinks, the AVX-512 build of the attention gives the AVX2 build's bits", "[cpu][sinks]") {
    const KvOps& avx2 = kv_ops(Isa::avx2, false);
    const KvOps& avx512 = kv_ops(Isa::avx512, false);
    if (&avx512 == &avx2) return test::skip_no_device("no AVX-512 here: the attention runs its AVX2 build");
    for (const Shape& s : {Shape{8, 2, 64}, Shape{16, 2, 64}, Shape{6, 2, 64}}) {
        const int n_kv = 1030, t0 = n_kv - 8;
        const Inputs in = sink_inputs(s, n_kv, 45);
        for (KvType kv : {KvType::f32, KvType::f16})
            for (int window : {0, 128})
                for (int tile : {1, 4}) {
                    INFO(s.n_head << " heads, KV " << kv_type_name(kv) << ", window " << window << ", tile " << tile);
                    CHECK(same_bits(attend_with_sinks(in, kv, avx512, t0, n_kv, tile, window),
                                    attend_with_sinks(in, kv, avx2, t0, n_kv, tile, window)));
                }
    }
}

}  // namespace test_attention_sinks
