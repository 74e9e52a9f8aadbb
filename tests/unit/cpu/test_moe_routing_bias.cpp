// MoeRouting with a router bias (gpt-oss): the bias joins the logits before the top-k and the weights' softmax; with
// DeepSeek-V3-style gating (glm4moe, lfm2moe): a selection bias that chooses and does not weight.
#include "engine/cpu/moe.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

namespace test_moe_routing_bias {

using quill::cpu::MoeGating;
using quill::cpu::MoeRouting;

TEST_CASE("MoE routing adds the router's bias before choosing the experts and weighting them", "[cpu]") {
    // 1 token, 4 experts, 2 used: logits favour experts 0 and 1; the bias makes 3 first and 0 second.
    const std::vector<float> logits = {2.0f, 1.5f, 0.0f, 0.0f};
    const std::vector<float> bias = {0.0f, -1.0f, 0.0f, 3.0f};
    MoeRouting r;
    r.route(logits.data(), 1, 4, 2, MoeGating{bias.data()});
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

TEST_CASE("MoE routing with sigmoid gating chooses by sigmoid(logit) plus the selection bias and weights by the "
          "normalized sigmoids times the scale", "[cpu]") {
    // 1 token, 4 experts, 2 used: sigmoids favour 0 and 1; the selection bias makes 2 first and 0 second.
    const std::vector<float> logits = {2.0f, 1.5f, 0.0f, -1.0f};
    const std::vector<float> selection = {0.0f, -0.5f, 0.6f, 0.0f};
    auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
    MoeRouting r;
    r.route(logits.data(), 1, 4, 2, MoeGating{nullptr, selection.data(), true, true, 2.5f});
    CHECK((r.experts_of(0)[0] == 0 && r.experts_of(0)[1] == 2));
    // the weights: the unbiased sigmoids over their sum, times 2.5
    const double s0 = sigmoid(2.0), s2 = sigmoid(0.0);
    CHECK(r.weight(r.begin(0)) == Approx(2.5 * s0 / (s0 + s2)));
    CHECK(r.weight(r.begin(2)) == Approx(2.5 * s2 / (s0 + s2)));
    // Not normalized: the sigmoids themselves (times the scale).
    r.route(logits.data(), 1, 4, 2, MoeGating{nullptr, selection.data(), true, false, 1.0f});
    CHECK(r.weight(r.begin(0)) == Approx(s0));
    CHECK(r.weight(r.begin(2)) == Approx(s2));
}

}  // namespace test_moe_routing_bias
