// The CUDA mixture of experts' host-side edges: the clamped SwiGLU (cuda/moe_math.h) on a NaN gate, as the CPU
// backend's std::min keeps it, and the routing (cuda/moe_routing.h) when every token picks the same expert (the
// other experts get no rows: their products are skipped) or every expert (n_used = n_expert: each group the whole
// batch). Runs in every build, GPU or not.
#include "cuda/moe_math.h"
#include "cuda/moe_routing.h"
#include "engine/cpu/moe.h"
#include "engine/model/synthetic.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

namespace test_cuda_moe_edges {

using namespace quill;

TEST_CASE("the CUDA clamped SwiGLU keeps a NaN gate or up value NaN, as the CPU backend's formula does", "[moe]") {
    const ModelConfig c = synthetic_config("gpt-oss-tiny");
    const float alpha = c.swiglu_alpha, limit = c.swiglu_limit;
    for (const float other : {-3.0f, 0.5f, 20.0f}) {
        INFO(other);
        // engine/cpu/moe.cpp: std::min(NaN, limit) and std::clamp(NaN, -limit, limit) are NaN
        const float gc = std::min(NAN, limit), uc = std::clamp(NAN, -limit, limit);
        REQUIRE(std::isnan(gc / (1.0f + std::exp(alpha * -gc)) * (std::clamp(other, -limit, limit) + 1.0f)));
        REQUIRE(std::isnan(std::min(other, limit) / (1.0f + std::exp(alpha * -std::min(other, limit))) * (uc + 1.0f)));
        CHECK(std::isnan(cuda::swiglu_oai(NAN, other, alpha, limit)));
        CHECK(std::isnan(cuda::swiglu_oai(other, NAN, alpha, limit)));
    }
    // Infinities clamp as on the CPU: +inf to the limit, either sign of up to +-limit.
    CHECK(cuda::swiglu_oai(INFINITY, 1.0f, alpha, limit) == cuda::swiglu_oai(limit, 1.0f, alpha, limit));
    CHECK(cuda::swiglu_oai(1.0f, -INFINITY, alpha, limit) == cuda::swiglu_oai(1.0f, -limit, alpha, limit));
}

namespace {

// The CUDA routing against the CPU backend's, assignment by assignment, and its own invariants: groups in batch
// order with the decode steps first, owners, slots.
void check_groups(const cuda::ExpertGroups& g, const std::vector<float>& logits, int64_t n, int64_t ne, int64_t k,
                  int64_t n_lead) {
    cpu::MoeRouting want;
    want.route(logits.data(), n, ne, k);
    REQUIRE(g.rows().size() == static_cast<size_t>(n * k));
    REQUIRE(g.owners().size() == static_cast<size_t>(n * k));
    for (int64_t e = 0; e < ne; ++e) {
        INFO("expert " << e);
        REQUIRE(g.begin(e) == want.begin(e));
        REQUIRE(g.end(e) == want.end(e));
        const int64_t m = g.end(e) - g.begin(e);
        CHECK(g.lead(e) == std::min(m, n_lead));  // (here every group with a decode step has all of them)
        for (int64_t i = g.begin(e); i < g.end(e); ++i) {
            CHECK(g.rows()[static_cast<size_t>(i)] == want.token(i));
            CHECK(g.owners()[static_cast<size_t>(i)] == e);
        }
    }
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < k; ++j) {
            const auto at = static_cast<size_t>(t * k + j);
            CHECK(g.experts()[at] == want.experts_of(t)[j]);
            CHECK(g.rows()[static_cast<size_t>(g.slots()[at])] == t);
            CHECK(g.owners()[static_cast<size_t>(g.slots()[at])] == g.experts()[at]);
        }
}

}  // namespace

TEST_CASE("CUDA expert routing when every token picks the same experts: the others get empty groups", "[moe]") {
    const int64_t n = 70, ne = 8, k = 2, n_lead = 6;
    std::vector<float> logits(static_cast<size_t>(n * ne));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t e = 0; e < ne; ++e)  // experts 5 and 2 win for every token, by a margin that varies
            logits[static_cast<size_t>(t * ne + e)] = e == 5 ? 4.0f + 0.01f * t : e == 2 ? 3.0f : -0.1f * e;
    cuda::ExpertGroups g;
    g.route(logits.data(), n, ne, k, n_lead);
    check_groups(g, logits, n, ne, k, n_lead);
    for (int64_t e = 0; e < ne; ++e) CHECK(g.end(e) - g.begin(e) == (e == 2 || e == 5 ? n : 0));
    CHECK(g.begin(5) == n);  // expert 2's rows [0, n), then expert 5's
    CHECK(g.lead(2) == n_lead);
    CHECK(g.lead(5) == n_lead);
    CHECK(g.lead(0) == 0);
    for (int64_t t = 0; t < n; ++t) {
        CHECK(g.slots()[static_cast<size_t>(2 * t)] == t);
        CHECK(g.slots()[static_cast<size_t>(2 * t + 1)] == n + t);
        CHECK(g.weights()[static_cast<size_t>(2 * t)] + g.weights()[static_cast<size_t>(2 * t + 1)] ==
              Approx(1.0f).epsilon(1e-6));
    }
}

TEST_CASE("CUDA expert routing with every expert used: each group is the whole batch in order", "[moe]") {
    const int64_t n = 13, ne = 4, k = 4, n_lead = 13;
    std::vector<float> logits(static_cast<size_t>(n * ne));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.7f * static_cast<float>(i));
    cuda::ExpertGroups g;
    g.route(logits.data(), n, ne, k, n_lead);
    check_groups(g, logits, n, ne, k, n_lead);
    for (int64_t e = 0; e < ne; ++e) {
        CHECK(g.begin(e) == e * n);
        CHECK(g.lead(e) == n);
    }
    for (int64_t t = 0; t < n; ++t) {
        // the weights are the softmax over every logit of the token
        double sum = 0.0;
        for (int64_t e = 0; e < ne; ++e) sum += std::exp(static_cast<double>(logits[static_cast<size_t>(t * ne + e)]));
        for (int64_t e = 0; e < ne; ++e)
            CHECK(g.weights()[static_cast<size_t>(t * ne + e)] ==
                  Approx(std::exp(static_cast<double>(logits[static_cast<size_t>(t * ne + e)])) / sum).epsilon(1e-6));
    }
}

}  // namespace test_cuda_moe_edges
