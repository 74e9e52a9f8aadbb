// gpt-oss's host-side and host-compiled expert arithmetic on the CUDA backend: the router's bias in the routing
// (cuda/moe_routing.h) against the CPU backend's (engine/cpu/moe.h), each assignment's owner, and the clamped SwiGLU
// (cuda/moe_math.h) against the CPU backend's formula (engine/cpu/moe.cpp swiglu_oai). Runs in every build.
#include "cuda/moe_math.h"
#include "cuda/moe_routing.h"
#include "engine/cpu/moe.h"
#include "engine/model/synthetic.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace test_cuda_gpt_oss_math {

using namespace quill;

TEST_CASE("CUDA expert routing adds the router's bias as the CPU backend does and names each assignment's expert",
          "[moe]") {
    const int64_t n = 40, ne = 8, k = 4, lead = 3;
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> logits(static_cast<size_t>(n * ne)), bias(static_cast<size_t>(ne));
    for (float& x : logits) x = dist(rng);
    for (float& b : bias) b = 3.0f * dist(rng);  // large enough to change which experts win
    cuda::ExpertGroups g, plain;
    g.route(logits.data(), n, ne, k, lead, bias.data());
    plain.route(logits.data(), n, ne, k, lead);
    cpu::MoeRouting want;
    want.route(logits.data(), n, ne, k, bias.data());
    CHECK(g.experts() != plain.experts());  // the bias matters
    REQUIRE(g.owners().size() == static_cast<size_t>(n * k));
    for (int64_t e = 0; e < ne; ++e) {
        REQUIRE(g.begin(e) == want.begin(e));
        REQUIRE(g.end(e) == want.end(e));
        for (int64_t i = g.begin(e); i < g.end(e); ++i) {
            CHECK(g.owners()[static_cast<size_t>(i)] == e);
            CHECK(g.rows()[static_cast<size_t>(i)] == want.token(i));
        }
    }
    for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < k; ++i) {
            const auto at = static_cast<size_t>(t * k + i);
            CHECK(g.experts()[at] == want.experts_of(t)[i]);
            // the token's weight is the CPU's (float rounding of the same double quotient, 1 ulp apart at most)
            const int32_t slot = g.slots()[at];
            CHECK(g.owners()[static_cast<size_t>(slot)] == g.experts()[at]);
            CHECK(g.weights()[at] == Approx(want.weight(slot)).epsilon(1e-6));
        }
}

TEST_CASE("the CUDA clamped SwiGLU is the CPU backend's, bit for bit on the host", "[moe]") {
    const ModelConfig c = synthetic_config("gpt-oss-tiny");
    const float alpha = c.swiglu_alpha, limit = c.swiglu_limit;
    REQUIRE((alpha == 1.702f && limit == 7.0f));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> v(-12.0f, 12.0f);
    for (int i = 0; i < 20000; ++i) {
        const float g = v(rng), u = v(rng);
        // engine/cpu/moe.cpp: g' = min(g, limit), u' = clamp(u, -limit, limit), g' / (1 + e^(-alpha g')) (u' + 1)
        const float gc = std::min(g, limit), uc = std::clamp(u, -limit, limit);
        const float want = gc / (1.0f + std::exp(alpha * -gc)) * (uc + 1.0f);
        INFO(g << " " << u);
        CHECK(cuda::swiglu_oai(g, u, alpha, limit) == want);
    }
    // The clamps: the gate from above only, the up value both ways.
    CHECK(cuda::swiglu_oai(100.0f, 0.0f, alpha, limit) == cuda::swiglu_oai(limit, 0.0f, alpha, limit));
    CHECK(cuda::swiglu_oai(-20.0f, 0.0f, alpha, limit) != cuda::swiglu_oai(-limit, 0.0f, alpha, limit));
    CHECK(cuda::swiglu_oai(1.0f, 50.0f, alpha, limit) == cuda::swiglu_oai(1.0f, limit, alpha, limit));
    CHECK(cuda::swiglu_oai(1.0f, -50.0f, alpha, limit) == cuda::swiglu_oai(1.0f, -limit, alpha, limit));
    CHECK(cuda::swiglu_oai(1.0f, -1.0f, alpha, limit) == 0.0f);  // u' + 1 = 0
}

}  // namespace test_cuda_gpt_oss_math
