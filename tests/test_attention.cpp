// The CPU attention kernels (engine/cpu/attention.*): the fast grouped-query kernel of each available ISA against
// the plain scalar path (the reference backend's arithmetic), at cache lengths from 1 to 2048, head sizes with and
// without a multiple of 16, every grouping of query heads on a KV head (MHA, GQA, MQA, groups above the kernel's 8),
// both cache types; and batch invariance: a head's output has the same bits whichever heads share its call.
#include "engine/cpu/attention.h"
#include "engine/format/quant.h"
#include "tests/backend_checks.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

using namespace quill;
using namespace quill::cpu;

namespace {

struct Shape {
    int n_head, n_head_kv, head_dim;
};

struct Inputs {
    std::vector<float> q;       // [n_head, head_dim]
    std::vector<float> k, v;    // [n_kv, n_head_kv, head_dim]
    std::vector<uint16_t> k16, v16;
};

Inputs random_inputs(const Shape& s, int n_kv, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Inputs in;
    in.q.resize(static_cast<size_t>(s.n_head) * s.head_dim);
    for (float& x : in.q) x = 2.0f * normal(rng);  // sharp enough softmaxes to matter
    const size_t n = static_cast<size_t>(n_kv) * s.n_head_kv * s.head_dim;
    in.k.resize(n);
    in.v.resize(n);
    for (float& x : in.k) x = normal(rng);
    for (float& x : in.v) x = normal(rng);
    for (float x : in.k) in.k16.push_back(fp32_to_fp16(x));
    for (float x : in.v) in.v16.push_back(fp32_to_fp16(x));
    return in;
}

// out [n_head, head_dim] for heads [h0, h1) (the rest left NaN).
std::vector<float> attend_range(const Shape& s, const Inputs& in, KvType kv, int n_kv, const KvOps& ops, int h0,
                                int h1) {
    AttentionArgs a{in.q.data(),
                    kv == KvType::f16 ? static_cast<const void*>(in.k16.data()) : in.k.data(),
                    kv == KvType::f16 ? static_cast<const void*>(in.v16.data()) : in.v.data(),
                    kv,
                    n_kv,
                    s.n_head,
                    s.n_head_kv,
                    s.head_dim,
                    1.0f / std::sqrt(static_cast<float>(s.head_dim))};
    std::vector<float> scores(static_cast<size_t>(kMaxGroupHeads) * n_kv);
    std::vector<float> out(static_cast<size_t>(s.n_head) * s.head_dim, NAN);
    attend(a, ops, h0, h1, scores.data(), out.data());
    return out;
}

}  // namespace

TEST_CASE("grouped attention kernels equal the plain attention at cache lengths 1 to 2048", "[cpu]") {
    const Shape shapes[] = {{4, 4, 64}, {6, 2, 128}, {8, 1, 72}, {16, 2, 64}, {12, 1, 40}, {3, 3, 8}};
    for (Isa isa : test::available_isas()) {
        for (const Shape& s : shapes) {
            for (int n_kv : {1, 17, 511, 2048}) {
                const Inputs in = random_inputs(s, n_kv, static_cast<uint32_t>(n_kv * 31 + s.head_dim));
                for (KvType kv : {KvType::f32, KvType::f16}) {
                    INFO(isa_name(isa) << ", " << s.n_head << "/" << s.n_head_kv << " heads of " << s.head_dim
                                       << ", " << n_kv << " positions, KV " << kv_type_name(kv));
                    const std::vector<float> want = attend_range(s, in, kv, n_kv, kv_ops(isa, true), 0, s.n_head);
                    const std::vector<float> got = attend_range(s, in, kv, n_kv, kv_ops(isa, false), 0, s.n_head);
                    // Both round q and the probabilities to fp16 with an f16 cache; they differ in summation order and
                    // in exp (a polynomial within 2 ulp of expf), and where an intermediate sits that close to an
                    // fp16 rounding boundary one probability moves one fp16 step (2^-11 of itself). Measured here,
                    // max |diff| / rms over all cases: f32 cache 6.0e-6, f16 cache 4.2e-4; limits 2e-5 and 2e-3.
                    CHECK(test::max_diff(got, want) / test::rms(want) <= (kv == KvType::f32 ? 2e-5 : 2e-3));
                }
            }
        }
    }
}

TEST_CASE("a head's attention has the same bits whichever heads share the call", "[cpu]") {
    const Shape s{12, 3, 64};  // groups of 4 query heads per KV head
    const int n_kv = 300;
    const Inputs in = random_inputs(s, n_kv, 5);
    for (Isa isa : test::available_isas()) {
        for (KvType kv : {KvType::f32, KvType::f16}) {
            INFO(isa_name(isa) << ", KV " << kv_type_name(kv));
            const KvOps& ops = kv_ops(isa, false);
            const std::vector<float> all = attend_range(s, in, kv, n_kv, ops, 0, s.n_head);
            // Each head alone, then ragged ranges cutting groups apart (as the thread split of a decode does).
            std::vector<float> alone(all.size()), ragged(all.size());
            for (int h = 0; h < s.n_head; ++h) {
                const std::vector<float> one = attend_range(s, in, kv, n_kv, ops, h, h + 1);
                std::copy_n(one.begin() + h * s.head_dim, s.head_dim, alone.begin() + h * s.head_dim);
            }
            for (auto [h0, h1] : {std::pair{0, 3}, std::pair{3, 7}, std::pair{7, 12}}) {
                const std::vector<float> part = attend_range(s, in, kv, n_kv, ops, h0, h1);
                std::copy(part.begin() + h0 * s.head_dim, part.begin() + h1 * s.head_dim,
                          ragged.begin() + h0 * s.head_dim);
            }
            CHECK(std::memcmp(alone.data(), all.data(), all.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(ragged.data(), all.data(), all.size() * sizeof(float)) == 0);
        }
    }
}
