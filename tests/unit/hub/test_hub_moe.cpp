// The GGUF header of a mixture of experts (qwen3moe): its expert matrices are checked before a download, and name
// the model's weight type in quill list.
#include "engine/format/gguf.h"
#include "engine/hub/gguf_header.h"

#include <catch2/catch.hpp>

namespace test_hub_moe {

using namespace quill;
using namespace quill::hub;

namespace {

// The header of a one-layer qwen3moe whose attention matrices are Q8_0 and whose 8 experts (256 wide) are `experts`.
GgufHeader moe_header(GgmlType experts) {
    GgufWriter w;
    w.set("general.architecture", "qwen3moe");
    auto add = [&](const std::string& name, GgmlType type, std::vector<int64_t> ne) {
        int64_t rows = 1;
        for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
        w.add_tensor(name, type, ne, std::vector<uint8_t>(row_size(type, ne[0]) * static_cast<size_t>(rows)));
    };
    add("blk.0.attn_norm.weight", GgmlType::F32, {256});
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"})
        add(std::string("blk.0.") + m + ".weight", GgmlType::Q8_0, {256, 256});
    add("blk.0.ffn_gate_inp.weight", GgmlType::F32, {256, 8});
    for (const char* m : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"})
        add(std::string("blk.0.") + m + ".weight", experts, {256, 256, 8});
    const auto h = parse_gguf_header(w.to_bytes(), "moe");
    REQUIRE(h);
    return *h;
}

}  // namespace

TEST_CASE("hub: a mixture of experts whose experts quill cannot multiply is refused from its header", "[hub]") {
    CHECK(why_unsupported(moe_header(GgmlType::TQ1_0)) ==
          "tensor 'blk.0.ffn_gate_exps.weight' has weight type tq1_0, which quill cannot multiply");
    CHECK(why_unsupported(moe_header(GgmlType::IQ2_XXS)).empty());
    CHECK(why_unsupported(moe_header(GgmlType::IQ1_M)).empty());
    CHECK(why_unsupported(moe_header(GgmlType::Q4_K)).empty());
}

TEST_CASE("hub: a mixture of experts is named by its experts' weight type, which most of its weights have", "[hub]") {
    // Fewer tensors than the attention's Q8_0 ones (3 against 4), but most of the elements.
    CHECK(main_weight_type(moe_header(GgmlType::Q4_K)) == "q4_K");
    CHECK(main_weight_type(moe_header(GgmlType::IQ2_XXS)) == "iq2_xxs");
}

}  // namespace test_hub_moe
