// MoeRouting with a router bias (gpt-oss): the bias joins the logits before the top-k and the weights' softmax.
#include "engine/cpu/moe.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

namespace test_moe_routing_bias {

using quill::cpu::MoeRouting;

TEST_CASE("MoE routing adds the router's bias before choosing the experts and weighting them", "[cpu]") {
    // 1 token, 4 experts, 2 used: logits favour experts 0 and 1; the bias makes 3 first and 0 second.
    const std::vector<float> logits = {2.0f, 1.5f, 0.0f, 0.0f};
    const std::vector<float> bias = {0.0f, -1.0f, 0.0f, 3.0f};
    MoeRouting r;
    r.route(logits.data(), 1, 4, 2, bias.data());
    CHECK((r.experts_of(0)[0] == 0 && r.experts_of(0)[1] == 3));
    // softmax over the chosen biased logits 2 and 3
    const double w3 = 1.0 / (1.0 + std::exp(-1.0));
    CHECK(r.weight(r.begin(3)) == Approx(w3));
    CHECK(r.weight(r.begin(0)) == Approx(1.0 - w3));
    CHECK(r.end(1) == r.begin(1));
    // Without the bias: experts 0 and 1.
    r.route(logits.data(), 1, 4, 2);
    CHECK((r.experts_of(0)[0] == 0 && r.experts_of(0)[1] == 1));
}

}  // namespace test_moe_routing_bias
