// MoeRouting: each token's experts and weights from its router logits, and the batch's tokens grouped by expert.
#include "engine/cpu/moe.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

namespace test_moe_routing {

using quill::cpu::MoeRouting;

TEST_CASE("MoE routing picks each token's top experts by softmax, renormalizes their weights, groups by expert",
          "[cpu]") {
    // 3 tokens, 4 experts, 2 used. Token 1 ties experts 1 and 3 for second place: the lower one wins.
    const std::vector<float> logits = {
        0.0f, 2.0f, 1.0f, -1.0f,  // token 0: experts 1, 2
        3.0f, 1.0f, 0.5f, 1.0f,   // token 1: experts 0, 1
        0.0f, 0.0f, 5.0f, 4.0f,   // token 2: experts 2, 3
    };
    MoeRouting r;
    r.route(logits.data(), 3, 4, 2);
    REQUIRE(r.n_used() == 2);
    CHECK((r.experts_of(0)[0] == 1 && r.experts_of(0)[1] == 2));
    CHECK((r.experts_of(1)[0] == 0 && r.experts_of(1)[1] == 1));
    CHECK((r.experts_of(2)[0] == 2 && r.experts_of(2)[1] == 3));
    // Expert e's tokens in batch order, each with p_e over the sum of its token's two chosen p.
    const std::vector<std::vector<int64_t>> tokens = {{1}, {0, 1}, {0, 2}, {2}};
    for (int64_t e = 0; e < 4; ++e) {
        INFO("expert " << e);
        REQUIRE(r.end(e) - r.begin(e) == static_cast<int64_t>(tokens[e].size()));
        for (size_t i = 0; i < tokens[e].size(); ++i)
            CHECK(r.token(r.begin(e) + static_cast<int64_t>(i)) == tokens[e][i]);
    }
    const double sig = 1.0 / (1.0 + std::exp(-1.0));  // p_a / (p_a + p_b) for logits a - b = 1
    CHECK(r.weight(r.begin(1)) == Approx(sig));          // token 0 at expert 1: 2 against 1
    CHECK(r.weight(r.begin(2)) == Approx(1.0 - sig));    // token 0 at expert 2
    CHECK(r.weight(r.begin(0)) == Approx(1.0 / (1.0 + std::exp(-2.0))));  // token 1 at expert 0: 3 against 1
    CHECK(r.weight(r.begin(3)) == Approx(1.0 - sig));    // token 2 at expert 3: 4 against 5
    CHECK(r.weight(r.begin(2) + 1) == Approx(sig));      // token 2 at expert 2
}

}  // namespace test_moe_routing
