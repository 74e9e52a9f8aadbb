// falcon-h1 (TII's Falcon-H1, 0.5B-34B: in every layer GQA attention with NEOX RoPE and a Mamba-2 mixer side by side
// on the same normed input, their outputs summed into the residual stream, then a SwiGLU FFN) against llama.cpp: the
// synthetic falcon-h1-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic falcon-h1-tiny
// --dtype f32|f16 --save FILE` writes it: 3 layers, GQA 4/2 of 48 (192 wide beside n_embd 128), Mamba-2 of 8 heads of
// 32 over 2 groups of B and C of d_state 64 with a conv of 4 taps and its bias, the grouped norm in layer 1 alone, an
// FFN of 256) regenerated, saved and loaded back, then run on the reference backend and the CPU backend of every
// kernel family this machine has. References in tests/data/arch/: llama.cpp (llama-cpp-python 0.3.36's vendored
// copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with tests/data/arch/dump_logits.cpp (its header says
// how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/model/layer_matrices.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/recurrent_checks.h"
#include "tests/support/test_util.h"
#include "tokenizer/pre_tokenizer.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace test_arch_falcon_h1 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;
constexpr const char* kShape = "falcon-h1-tiny";

// The limits on max |diff| / range, the reference backend's and the CPU backend's (measured: see the commit).
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-5, 1e-5}, {GgmlType::F16, 1e-3, 1e-3}};

std::vector<std::string> names(const LayerWeights& L) {
    std::vector<std::string> n;
    for (const TensorView* t : layer_matrices(L)) n.push_back(t->name);
    return n;
}

// Each layer l of c as two layers one after the other: attention alone (2l), then the Mamba-2 mixer and the FFN
// (2l + 1), each reading the residual stream after the one before: the blocks in sequence instead of side by side.
void make_sequential(ModelConfig& c, Weights& w) {
    std::vector<LayerWeights> layers;
    c.mamba2_layers.clear();
    for (const LayerWeights& L : w.layers) {
        LayerWeights attn = L, ssm = L;
        attn.ssm_in = TensorView{};
        ssm.wo = TensorView{};
        layers.insert(layers.end(), {attn, ssm});
        c.mamba2_layers.insert(c.mamba2_layers.end(), {0, 1});
        c.layer_blocks.insert(c.layer_blocks.end(),
                              {ModelConfig::kMixerBlock, ModelConfig::kMixerBlock | ModelConfig::kFfnBlock});
    }
    w.layers = layers;
    c.n_layer *= 2;
    c.ssm_beside_attn = false;
}

}  // namespace

TEST_CASE("falcon-h1 tiny model: the reference backend gives llama.cpp's logits and greedy tokens",
          "[arch][reference]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, false);
}

TEST_CASE("falcon-h1 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA",
          "[arch][cpu]") {
    test::check_shape_against_llama_cpp(kShape, kCases, kCtx, true);
}

TEST_CASE("falcon-h1 settings and tensors are read from the file as llama.cpp reads them, and the blocks side by "
          "side are what llama.cpp runs", "[arch][model]") {
    auto m = test::saved_synthetic(kShape, GgmlType::F32);
    const ModelConfig& c = m->config;
    CHECK((c.arch == "falcon-h1" && c.n_layer == 3 && c.mamba2() && c.recurrent() && c.ssm_beside_attn));
    for (int64_t l = 0; l < 3; ++l) {
        INFO("layer " << l);
        CHECK((c.layer_is_recurrent(l) && c.layer_has_attention(l) && c.layer_has_kv(l) && c.layer_has_ffn(l)));
        CHECK(c.layer_has_rope(l));
    }
    CHECK((c.n_layer_kv() == 3 && c.n_head == 4 && c.n_head_kv == 2 && c.head_dim == 48 && c.n_ff == 256));
    CHECK((c.rope == ModelConfig::Rope::neox && c.rope_base == 1e6f && c.attn_scale == 1.0f / std::sqrt(48.0f)));
    CHECK((c.embd_scale == 1.0f && c.residual_scale == 1.0f && c.logit_scale == 1.0f && c.logit_mul == 1.0f));
    CHECK((c.ssm_conv == 4 && c.ssm_head_k == 64 && c.ssm_n_k_heads == 2 && c.ssm_n_v_heads == 8 &&
           c.ssm_head_v == 32 && c.ssm_d_inner() == 256));
    // The attention's matrices, then the Mamba-2 mixer's, then the FFN's; the grouped norm in layer 1 alone
    CHECK(names(m->weights.layers[0]) ==
          std::vector<std::string>{"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                                   "blk.0.attn_output.weight", "blk.0.ssm_in.weight", "blk.0.ssm_out.weight",
                                   "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"});
    CHECK((m->weights.layers[0].ssm_norm.empty() && m->weights.layers[1].ssm_norm.size() == 256 &&
           m->weights.layers[2].ssm_norm.empty() && m->weights.layers[0].ssm_conv1d_b.size() == 512));
    // Falcon-H1-0.5B's widths
    const ModelConfig big = synthetic_config("falcon-h1-0.5b-4l");
    CHECK((big.n_embd == 1024 && big.n_head * big.head_dim == 512 && big.ssm_d_inner() == 1536 &&
           big.ssm_n_v_heads == 24 && big.ssm_head_k == 128 && big.n_ff == 2048 && big.layer_has_kv(3)));

    // What the blocks side by side are for: each of these leaves llama.cpp's logits (max |diff| / range on the
    // reference backend and the CPU backend's generic kernels, against 1e-5 above).
    auto check_mutant = [](const char* what, const std::function<void(ModelConfig&, Weights&)>& mutate) {
        const std::vector<double> e = test::mutant_error(kShape, kCtx, mutate);
        INFO(what << ": " << e[0] << ", " << e[1]);
        CHECK((e[0] > 1e-2 && e[1] > 1e-2));
    };
    // the attention and the Mamba-2 mixer in sequence, the mixer reading the stream after the attention
    check_mutant("sequential", make_sequential);
    // the attention beside the mixer dropped
    check_mutant("no attention", [](ModelConfig& mc, Weights&) { mc.ssm_beside_attn = false; });
    // a multiplier applied at run time that the converter folded into the weights (Falcon-H1-0.5B's
    // embedding_multiplier, 5.656854)
    check_mutant("embedding multiplier twice", [](ModelConfig& mc, Weights&) { mc.embd_scale = 5.656854f; });
    // and one the converter did not fold (the embeddings divided by it again)
    check_mutant("embedding multiplier dropped", [](ModelConfig& mc, Weights&) { mc.embd_scale = 1 / 5.656854f; });
    // layer 1's grouped norm dropped
    check_mutant("no ssm_norm", [](ModelConfig&, Weights& w) { w.layers[1].ssm_norm.clear(); });
}

TEST_CASE("falcon-h1: a prompt in one batch gives its tokens one at a time bit for bit, a token's logits in any "
          "batch as alone", "[arch][cpu]") {
    test::check_prompt_equals_stepwise(kShape);
    test::check_mixed_batches(synthetic_config(kShape), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("falcon-h1: a slot's state and KV cache continue only from where they stand, or start again at 0, and "
          "chat turns continue them", "[arch][cpu][reference]") {
    test::check_state_continues_or_restarts(kShape);
    test::check_chat_turns_continue_state(*test::saved_synthetic(kShape, GgmlType::F32));
}

// (No tokenizer vectors of a Falcon-H1 vocabulary exist here; llama-bpe's, the same rule, are checked with the other
// fetched vocabularies.)
TEST_CASE("falcon-h1's pre-tokenizer is llama.cpp's LLAMA3 one: llama-bpe's regex, merges ignored, BOS added",
          "[arch][tokenizer]") {
    const auto falcon = pre_tokenizer_spec("falcon-h1"), llama3 = pre_tokenizer_spec("llama-bpe");
    REQUIRE((falcon && llama3));
    CHECK(falcon->regexes == llama3->regexes);
    CHECK((falcon->ignore_merges && falcon->add_bos && !falcon->raw_utf8));
}

TEST_CASE("falcon-h1 files quill cannot run are refused with one line naming what is wrong", "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_falcon_h1_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"inner", [](GgufWriter& w) { w.set("falcon-h1.ssm.inner_size", uint32_t(250)); },
         "metadata 'falcon-h1.ssm.inner_size' 250 is not a multiple of 'falcon-h1.ssm.time_step_rank' 8, or that of "
         "'falcon-h1.ssm.group_count' 2"},
        {"conv", [](GgufWriter& w) { w.set("falcon-h1.ssm.conv_kernel", uint32_t(0)); },
         "metadata 'falcon-h1.ssm.conv_kernel' is 0, expected 1..64"},
    };
    test::check_refused_metadata(dir, kShape, cases);
}

TEST_CASE("quill run and chat work end to end on a falcon-h1 file, --device auto runs it on the CPU, two CPU ranges "
          "give one backend's text and --lookup is refused", "[arch][cli]") {
    // (no Falcon-H1 chat template in the corpus: the file's own, ChatML)
    test::check_run_and_chat(kShape, "",
                             {"Mamba-2 in 3 layers, attention beside it in each: conv=4 n_group=2 n_head=8 "
                              "head_dim=32 d_state=64"});
    const fs::path file = test::temp_dir("arch_falcon_h1_cli") / "tiny.gguf";
    SyntheticModel::make(synthetic_config(kShape), GgmlType::F32, 42)->save(file.string());
    test::check_split_over_two_cpus(file.string(), "2 of 3 layers on cpu (layers 0-1");
    auto lookup =
        test::run_quill({"run", "-m", file.string(), "-p", "Why is the sky blue?", "-n", "4", "--lookup", "4"});
    CHECK(lookup.status != 0);
    CHECK(lookup.err.find("--lookup and --draft-model cannot run on falcon-h1 models") != std::string::npos);
}

}  // namespace test_arch_falcon_h1
