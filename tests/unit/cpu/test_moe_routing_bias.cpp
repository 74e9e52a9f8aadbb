// MoeRouting with a router bias (gpt-oss): the bias joins the logits before the top-k and the weights' softmax; with
// DeepSeek-style routing (glm4moe, lfm2moe, deepseek2: route_experts): a selection bias that chooses and does not
// weight, expert groups, the normalization and the scale.
#include "engine/cpu/moe.h"
#include "engine/model/model_config.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

namespace test_moe_routing_bias {

using quill::ModelConfig;
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

TEST_CASE("MoE routing with sigmoid gating chooses by sigmoid(logit) plus the selection bias and weights by the "
          "normalized sigmoids times the scale", "[cpu]") {
    // 1 token, 4 experts, 2 used: sigmoids favour 0 and 1; the selection bias makes 2 first and 0 second.
    const std::vector<float> logits = {2.0f, 1.5f, 0.0f, -1.0f};
    const std::vector<float> selection = {0.0f, -0.5f, 0.6f, 0.0f};
    auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
    ModelConfig c;
    c.n_expert = 4;
    c.n_expert_used = 2;
    c.moe_gating_sigmoid = c.moe_selection_bias = true;
    c.moe_weights_scale = 2.5f;
    REQUIRE(c.moe_routing_general());
    MoeRouting r;
    r.route_general(logits.data(), 1, c, selection.data());
    CHECK((r.experts_of(0)[0] == 0 && r.experts_of(0)[1] == 2));
    // the weights: the unbiased sigmoids over their sum, times 2.5
    const double s0 = sigmoid(2.0), s2 = sigmoid(0.0);
    CHECK(r.weight(r.begin(0)) == Approx(2.5 * s0 / (s0 + s2)));
    CHECK(r.weight(r.begin(2)) == Approx(2.5 * s2 / (s0 + s2)));
    // Not normalized: the sigmoids themselves (times the scale).
    c.moe_norm_weights = false;
    c.moe_weights_scale = 1.0f;
    r.route_general(logits.data(), 1, c, selection.data());
    CHECK(r.weight(r.begin(0)) == Approx(s0));
    CHECK(r.weight(r.begin(2)) == Approx(s2));
}

TEST_CASE("MoE routing with expert groups chooses only among the groups whose two best scores sum highest",
          "[cpu]") {
    // 8 experts in 4 groups of 2, 2 groups used, 2 experts used, sigmoid gating. Expert 0 has the largest logit but
    // its partner the smallest: group {0,1} sums lower than {2,3} and {6,7}, so 0 is out and 2 and 6 are chosen.
    const std::vector<float> logits = {3.0f, -4.0f, 2.0f, 1.5f, 0.0f, 0.0f, 1.8f, 1.6f};
    ModelConfig c;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.moe_n_group = 4;
    c.moe_n_group_used = 2;
    c.moe_gating_sigmoid = true;
    REQUIRE(c.moe_routing_general());
    MoeRouting r;
    r.route_general(logits.data(), 1, c, nullptr);
    CHECK((r.experts_of(0)[0] == 2 && r.experts_of(0)[1] == 6));
    // normalized over the chosen: sigmoid(2) / (sigmoid(2) + sigmoid(1.8))
    auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
    CHECK(r.weight(r.begin(2)) == Approx(sigmoid(2.0) / (sigmoid(2.0) + sigmoid(1.8))));
    // Without groups: experts 0 and 2.
    c.moe_n_group = 0;
    r.route_general(logits.data(), 1, c, nullptr);
    CHECK((r.experts_of(0)[0] == 0 && r.experts_of(0)[1] == 2));
}

}  // namespace test_moe_routing_bias
