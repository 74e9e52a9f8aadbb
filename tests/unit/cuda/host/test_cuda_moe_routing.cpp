// The CUDA backend's mixture-of-experts routing (cuda/moe_routing.h), which runs on the host: the CPU backend's
// experts and weights for every token (engine/cpu/moe.h), the assignments grouped by expert in batch order with the
// decode steps first, each token's slots pointing at its own assignments, and no crash on NaN logits. Runs in every
// build, GPU or not.
#include "cuda/moe_routing.h"
#include "engine/cpu/moe.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

namespace test_cuda_moe_routing {

using namespace quill;

namespace {

std::vector<float> random_logits(int64_t n, int64_t n_expert, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    std::vector<float> v(static_cast<size_t>(n * n_expert));
    for (float& x : v) x = dist(rng);
    return v;
}

}  // namespace

TEST_CASE("CUDA expert routing picks the CPU backend's experts and weights, grouped by expert in batch order",
          "[moe]") {
    struct Shape {
        int64_t n, n_expert, n_used, n_lead;
    };
    for (const Shape& s : {Shape{37, 8, 2, 5}, Shape{50, 8, 3, 0}, Shape{9, 128, 8, 9}, Shape{1, 4, 4, 1}}) {
        INFO(s.n << " tokens, " << s.n_used << " of " << s.n_expert << " experts, " << s.n_lead << " decode");
        std::vector<float> logits = random_logits(s.n, s.n_expert, static_cast<uint32_t>(s.n * s.n_expert));
        if (s.n_expert > 4) logits[3] = logits[4];  // a tie in token 0
        cuda::ExpertGroups g;
        g.route(logits.data(), s.n, s.n_expert, s.n_used, s.n_lead);
        cpu::MoeRouting want;
        want.route(logits.data(), s.n, s.n_expert, s.n_used);
        const auto k = static_cast<size_t>(s.n_used);
        REQUIRE(g.rows().size() == static_cast<size_t>(s.n) * k);
        for (int64_t e = 0; e < s.n_expert; ++e) {
            REQUIRE(g.begin(e) == want.begin(e));
            REQUIRE(g.end(e) == want.end(e));
            int64_t lead = 0;
            for (int64_t i = g.begin(e); i < g.end(e); ++i) {
                const int32_t t = g.rows()[static_cast<size_t>(i)];
                CHECK(t == want.token(i));
                if (i > g.begin(e)) CHECK(t > g.rows()[static_cast<size_t>(i) - 1]);  // batch order
                if (t < s.n_lead) {
                    CHECK(i - g.begin(e) == lead);  // the decode steps lead the group
                    ++lead;
                }
                // the assignment is one of token t's slots, with the CPU's weight (same bits)
                size_t slot = k;
                for (size_t j = 0; j < k; ++j)
                    if (g.slots()[t * k + j] == i) slot = j;
                REQUIRE(slot < k);
                CHECK(g.experts()[t * k + slot] == e);
                CHECK(g.weights()[t * k + slot] == want.weight(i));
            }
            CHECK(g.lead(e) == lead);
        }
        for (int64_t t = 0; t < s.n; ++t) {
            float sum = 0.0f;
            for (size_t j = 0; j < k; ++j) {
                CHECK(g.experts()[t * k + j] == want.experts_of(t)[j]);  // increasing expert order
                CHECK(g.rows()[static_cast<size_t>(g.slots()[t * k + j])] == t);
                sum += g.weights()[t * k + j];
            }
            CHECK(sum == Approx(1.0f).epsilon(1e-6));
        }
    }
}

TEST_CASE("CUDA expert routing gives a token the same experts and weights alone as in a batch", "[moe]") {
    const std::vector<float> logits = random_logits(20, 8, 5);
    cuda::ExpertGroups batch, alone;
    batch.route(logits.data(), 20, 8, 3, 2);
    for (int64_t t = 0; t < 20; ++t) {
        alone.route(logits.data() + t * 8, 1, 8, 3, 1);
        for (size_t j = 0; j < 3; ++j) {
            CHECK(alone.experts()[j] == batch.experts()[t * 3 + j]);
            CHECK(alone.weights()[j] == batch.weights()[t * 3 + j]);
        }
    }
}

TEST_CASE("CUDA expert routing of ties and NaN logits: the lower expert, valid experts, NaN weights", "[moe]") {
    cuda::ExpertGroups g;
    const std::vector<float> tie{1.0f, 3.0f, 3.0f, 3.0f, 0.5f};
    g.route(tie.data(), 1, 5, 2, 0);
    CHECK(g.experts() == std::vector<int32_t>{1, 2});
    CHECK(g.weights() == std::vector<float>{0.5f, 0.5f});
    // A NaN logit (corrupt weights): experts still in range and distinct, weights NaN, so that the layer's output is
    // not finite and the backend's check names the layer.
    const std::vector<float> bad{0.0f, NAN, 2.0f, 1.0f, -1.0f, NAN, NAN, NAN};
    g.route(bad.data(), 2, 4, 2, 0);
    for (size_t i = 0; i < 4; ++i) {
        CHECK((g.experts()[i] >= 0 && g.experts()[i] < 4));
        CHECK(std::isnan(g.weights()[i]));
    }
    CHECK(g.experts()[0] != g.experts()[1]);
    CHECK(g.end(3) == 4);
}

}  // namespace test_cuda_moe_routing
