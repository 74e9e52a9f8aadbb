// qwen35 (Qwen3.5, a hybrid of gated delta net and full-attention layers) against llama.cpp: the synthetic
// qwen35-tiny model (engine/model/synthetic.cpp, seed 42, as `quill bench --synthetic qwen35-tiny --dtype f32|f16
// --save FILE` writes it: 5 layers, 0-2 and 4 recurrent, 3 full attention with gated queries, GQA, 16 of 64 dims
// rotated; delta nets of 2 key heads for 4 value heads) regenerated, saved and loaded back, then run on the
// reference backend and the CPU backend of every kernel family this machine has. References in tests/data/arch/:
// llama.cpp (llama-cpp-python 0.3.36's vendored copy, CPU, KV f32, n_ctx 256) over the 32 tokens below, made with
// tests/data/arch/dump_logits.cpp (its header says how): dump_logits FILE STEM 24 1 300 45 72 ... 202.
#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/chat/template.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/layer_matrices.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "engine/runtime/split_backend.h"
#include "tests/support/arch_checks.h"
#include "tests/support/arch_cli_checks.h"
#include "tests/support/fault_util.h"
#include "tests/support/random_model.h"
#include "tests/support/recurrent_checks.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace test_arch_qwen35 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kCtx = 256;

std::unique_ptr<Model> saved_model(GgmlType type) { return test::saved_synthetic("qwen35-tiny", type); }

// The limits on max |diff| / range, the reference backend's and the CPU backend's. Measured: F32 1.1e-6 on every
// backend; F16 1.9e-3 on the reference backend (it does not round the F16 products' inputs to fp16, which llama.cpp
// does, and the recurrence carries the difference on), 6.3e-4 to 6.7e-4 on the CPU backend's paths.
constexpr test::ArchCase kCases[] = {{GgmlType::F32, 1e-4, 1e-4}, {GgmlType::F16, 4e-3, 1.5e-3}};


std::string with_metadata(const fs::path& dir, const std::string& name, const std::function<void(GgufWriter&)>& edit) {
    return test::synthetic_with_metadata(dir, "qwen35-tiny", name, edit);
}

}  // namespace

TEST_CASE("qwen35 tiny model: the reference backend gives llama.cpp's logits and greedy tokens", "[arch][reference]") {
    test::check_shape_against_llama_cpp("qwen35-tiny", kCases, kCtx, false);
}

TEST_CASE("qwen35 tiny model: the CPU backend gives llama.cpp's logits and greedy tokens on every ISA", "[arch][cpu]") {
    test::check_shape_against_llama_cpp("qwen35-tiny", kCases, kCtx, true);
}

TEST_CASE("qwen35 settings and delta net tensors are read from the file as llama.cpp reads them", "[arch][model]") {
    auto m = saved_model(GgmlType::F16);
    const ModelConfig& c = m->config;
    CHECK(c.arch == "qwen35");
    CHECK(c.rope == ModelConfig::Rope::neox);
    CHECK((c.n_layer == 5 && c.full_attn_interval == 4 && c.recurrent() && c.attn_out_gate));
    CHECK((c.ssm_conv == 4 && c.ssm_head_k == 32 && c.ssm_head_v == 32 && c.ssm_n_k_heads == 2 &&
           c.ssm_n_v_heads == 4 && c.ssm_conv_channels() == 256 && c.n_rot == 16 && c.head_dim == 64));
    for (int64_t l = 0; l < 5; ++l) CHECK(c.layer_is_recurrent(l) == (l != 3));
    const LayerWeights& r = m->weights.layers[4];
    CHECK((r.recurrent() && r.wq.data == nullptr && r.attn_q_norm.empty()));
    CHECK((r.ssm_conv1d.size() == 256 * 4 && r.ssm_a.size() == 4 && r.ssm_norm.size() == 32));
    CHECK(r.ffn_norm.size() == 128);  // (the file's post_attention_norm)
    const auto mats = layer_matrices(r);
    REQUIRE(mats.size() == 5 + 3);
    CHECK(mats[0]->name == "blk.4.attn_qkv.weight");
    CHECK(mats[4]->name == "blk.4.ssm_out.weight");
    const LayerWeights& f = m->weights.layers[3];
    CHECK((!f.recurrent() && f.wq.n_rows() == 2 * 4 * 64 && f.attn_q_norm.size() == 64 && f.wo.ne[0] == 256));
}

TEST_CASE("qwen35: a prompt in one batch gives the logits of its tokens one at a time, bit for bit", "[arch][cpu]") {
    test::check_prompt_equals_stepwise("qwen35-tiny");
}

TEST_CASE("qwen35: a token's logits have the same bits in any batch as alone", "[arch][cpu]") {
    test::check_mixed_batches(synthetic_config("qwen35-tiny"), {GgmlType::F32, GgmlType::Q4_0}, kCtx);
}

TEST_CASE("qwen35: a slot's recurrent state continues only from where it stands, or starts again at 0",
          "[arch][cpu][reference]") {
    test::check_state_continues_or_restarts("qwen35-tiny");
}

TEST_CASE("qwen35: a multi-token-prediction block after the layers is loaded and not run, as llama.cpp does",
          "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_qwen35_mtp");
    const std::string plain = with_metadata(dir, "plain", [](GgufWriter&) {});
    const std::string mtp = with_metadata(dir, "mtp", [](GgufWriter& w) {
        w.set("qwen35.block_count", uint32_t(6));
        w.set("qwen35.nextn_predict_layers", uint32_t(1));
        w.add_tensor("blk.5.attn_norm.weight", GgmlType::F32, {128}, std::vector<uint8_t>(128 * 4, 0));
        w.add_tensor("blk.5.nextn.eh_proj.weight", GgmlType::F32, {256, 128}, std::vector<uint8_t>(256 * 128 * 4, 0));
    });
    auto a = Model::load(plain), b = Model::load(mtp);
    CHECK(b->config.n_layer == 5);
    const auto tokens = test::some_tokens(6, static_cast<int>(a->config.n_vocab), 4);
    ReferenceBackend ra(a->config, a->weights, ReferenceBackendOptions{64, 1, KvType::f32});
    ReferenceBackend rb(b->config, b->weights, ReferenceBackendOptions{64, 1, KvType::f32});
    CHECK(test::max_diff(test::prefill_logits(ra, tokens), test::prefill_logits(rb, tokens)) == 0.0);
}

TEST_CASE("qwen35 files whose recurrent settings quill cannot follow are refused with one line naming the key",
          "[arch][model]") {
    const fs::path dir = test::temp_dir("arch_qwen35_refused");
    const std::vector<test::RefusedMetadata> cases = {
        {"inner", [](GgufWriter& w) { w.set("qwen35.ssm.inner_size", uint32_t(96)); },
         "metadata 'qwen35.ssm.inner_size' is 96, expected ssm.time_step_rank 4 * ssm.state_size 32 (value heads of "
         "the keys' size, as llama.cpp requires)"},
        {"v-heads", [](GgufWriter& w) {
             w.set("qwen35.ssm.group_count", uint32_t(3));
         },
         "metadata 'qwen35.ssm.time_step_rank' 4 is not a multiple of 'qwen35.ssm.group_count' 3"},
        {"sections",
         [](GgufWriter& w) {
             std::vector<GgufValue> s{int32_t(0), int32_t(0), int32_t(0), int32_t(8)};
             w.set("qwen35.rope.dimension_sections", GgufValue::array(GgufType::I32, s));
         },
         "metadata 'qwen35.rope.dimension_sections' gives no pair to the text position's sections"},
        {"pattern",
         [](GgufWriter& w) {
             std::vector<GgufValue> r{true, false, false, true, true};
             w.set("qwen35.attention.recurrent_layers", GgufValue::array(GgufType::BOOL, r));
         },
         "metadata 'qwen35.attention.recurrent_layers' marks the recurrent layers in a pattern quill does not "
         "support (every Nth layer full attention, the others recurrent)"},
    };
    test::check_refused_metadata(dir, "qwen35-tiny", cases);
    // The same layers as a recurrent_layers array say them: accepted.
    auto same = Model::load(with_metadata(dir, "array", [](GgufWriter& w) {
        std::vector<GgufValue> r{true, true, true, false, true};
        w.set("qwen35.attention.recurrent_layers", GgufValue::array(GgufType::BOOL, r));
    }));
    CHECK(same->config.full_attn_interval == 4);
}

TEST_CASE("quill run, chat and batch work end to end on a qwen35 file with Qwen3.5's chat template", "[arch][cli]") {
    const fs::path dir = test::temp_dir("arch_cli_qwen35");
    const std::string file = (dir / "qwen35-tiny.gguf").string();
    auto save = test::run_quill(
        {"bench", "--synthetic", "qwen35-tiny", "--dtype", "f16", "--save", file, "-p", "4", "-n", "2", "-r", "1"});
    REQUIRE(save.status == 0);
    // The template Qwen ships with Qwen3.5-4B (tests/data/templates/src, rendered byte for byte as Jinja2 does by
    // test_template_corpus.cpp).
    const std::string tmpl =
        (fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" / "Qwen3.5-4B.jinja").string();
    auto info = test::run_quill({"info", file});
    CHECK(info.status == 0);
    CHECK(info.out.find("gated delta nets, every 4th layer full attention: conv=4 n_k_heads=2 n_v_heads=4 "
                        "head_dim=32") != std::string::npos);
    // 512 bytes of K and V a position in layer 3 alone; 4 x 19456 bytes of state (conv windows, delta net states)
    CHECK(info.out.find("a sequence's KV cache 0.50 KiB a position (1 of 5 layers, f16), 0.57 MiB at the training "
                        "context with its recurrent state of 0.07 MiB") != std::string::npos);
    auto run = test::run_quill({"run", "-m", file, "--chat-template", tmpl, "-p", "Why is the sky blue?", "--temp",
                                "0", "-n", "8", "--json"});
    CHECK(run.status == 0);
    CHECK(run.out.find("\"completion_tokens\":8") != std::string::npos);
    // Guessed tokens are refused: a recurrent state cannot take back a rejected one.
    auto lookup = test::run_quill({"run", "-m", file, "-p", "Why is the sky blue?", "-n", "4", "--lookup", "4"});
    CHECK(lookup.status != 0);
    CHECK(lookup.err.find("--lookup and --draft-model cannot run on qwen35 models") != std::string::npos);
    auto draft = test::run_quill({"run", "-m", test::tiny_model_file(test::TinyModel::spm).string(), "-p", "Hi",
                                  "-n", "4", "--draft-model", file});
    CHECK(draft.status != 0);
    CHECK(draft.err.find("--draft-model " + file + ": qwen35 models cannot draft") != std::string::npos);
    // Three turns of a chat give the replies of each conversation run afresh, with --raw as the reference: the chat
    // reuses its state only where it stands, else runs again from 0.
    auto chat = test::run_quill({"chat", "-m", file, "--chat-template", "chatml", "--temp", "0", "-n", "6"},
                                "Hello there\nAnd again\nOnce more\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
    // Batch: sequences of different lengths side by side give each one's text alone.
    for (const char* parallel : {"1", "3"})
        test::check_batch_texts_alone(file, {"a", "The longer prompt of the two here", "mid length one"}, parallel);
}

TEST_CASE("qwen35: three chat turns give the replies of the conversation run from position 0 each turn, and "
          "continue the state where it stands", "[arch][chat]") {
    test::check_chat_turns_continue_state(*saved_model(GgmlType::F32));
}

namespace {
cpu::CpuBackendOptions snapshot_options(int64_t n_ctx, int64_t snapshots) {
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.state_snapshots = snapshots;
    o.isa = cpu::Isa::generic;
    return o;
}

// Tokens [n, n_vocab] of one batch into slot 0 from position `from`.
std::vector<float> logits_from(Backend& b, const std::vector<int32_t>& tokens, int32_t from) {
    Batch batch;
    for (size_t i = 0; i < tokens.size(); ++i) batch.add(tokens[i], from + static_cast<int32_t>(i), 0, true);
    std::vector<float> logits(tokens.size() * b.config().n_vocab);
    b.forward(batch, logits);
    return logits;
}
}  // namespace

TEST_CASE("qwen35: a slot continues from a kept copy of its state as a fresh run does, until it writes below it",
          "[arch][cpu]") {
    auto m = SyntheticModel::make(synthetic_config("qwen35-tiny"), GgmlType::F32, 3);
    const int nv = static_cast<int>(m->config.n_vocab);
    const auto a = test::some_tokens(10, nv, 1), b = test::some_tokens(4, nv, 2);
    // one backend, and a split forward of two ranges (each keeps the copies of its layers' states)
    std::vector<std::unique_ptr<Backend>> ranges;
    for (const LayerRange r : {LayerRange{0, 2}, LayerRange{2, 5}}) {
        cpu::CpuBackendOptions o = snapshot_options(64, 2);
        o.layers = r;
        ranges.push_back(std::make_unique<cpu::CpuBackend>(m->config, m->weights, o));
    }
    SplitBackend split(std::move(ranges), "split");
    cpu::CpuBackend one(m->config, m->weights, snapshot_options(64, 2));
    cpu::CpuBackend fresh(m->config, m->weights, snapshot_options(64, 0));
    for (Backend* backend : {static_cast<Backend*>(&one), static_cast<Backend*>(&split)}) {
        Backend& be = *backend;
        INFO(be.name());
        be.keep_state(0, 6);
        be.keep_state(0, 2);
        const auto whole = test::prefill_logits(be, a);  // (one batch, run in parts that end at 2 and 6)
        CHECK(test::max_diff(whole, test::prefill_logits(fresh, a)) == 0.0);
        CHECK(be.resume_position(0, 10) == 10);  // where the state stands
        CHECK(be.resume_position(0, 9) == 6);
        CHECK(be.resume_position(0, 5) == 2);
        CHECK(be.resume_position(0, 1) == 0);
        CHECK(be.reusable_prefix(a, 10, std::vector<int32_t>{a[0], a[1], a[2], a[3], a[4], a[5], a[6], 7}, 0) == 6);
        CHECK(be.reusable_prefix(a, 10, std::vector<int32_t>{a[0], a[1], a[2], a[3], a[4], a[5], a[6], 7}) == 0);
        // a[0..6) then b, continued from the copy at 6: the logits of a fresh run of those tokens, bit for bit
        std::vector<int32_t> ab(a.begin(), a.begin() + 6);
        ab.insert(ab.end(), b.begin(), b.end());
        const auto want = test::rows(test::prefill_logits(fresh, ab), nv, 6, 10);
        CHECK(test::max_diff(logits_from(be, b, 6), want) == 0.0);
        CHECK(test::max_diff(logits_from(be, b, 6), want) == 0.0);  // (again: the copy at 6 stays)
        CHECK(be.resume_position(0, 9) == 6);
        // Continued from the copy at 2 over positions 2-4: the copy at 6 is gone, the one at 2 stays.
        logits_from(be, {b[0], b[1], b[2]}, 2);
        CHECK(be.resume_position(0, 9) == 5);  // (where the state now stands)
        CHECK(be.resume_position(0, 4) == 2);
        CHECK_THROWS_WITH(logits_from(be, b, 6), Catch::Contains("state stands at position 5"));
        // Starting again at 0 drops them all.
        logits_from(be, {b[3]}, 0);
        CHECK(be.resume_position(0, 4) == 1);
    }
}

TEST_CASE("qwen35: three chat turns with reasoning continue from the state kept where each prompt's history ends, "
          "with the replies of the conversation run from position 0 each turn", "[arch][chat]") {
    auto m = saved_model(GgmlType::F32);
    auto tok = Tokenizer::from_gguf(m->file);
    // The template Qwen ships with Qwen3.5-4B: the generation prompt opens <think>, and an earlier reply is rendered
    // without its reasoning, so the next turn's rendering departs from the tokens fed where that prompt began.
    const std::string source = test::read_file(fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" /
                                               "Qwen3.5-4B.jinja");
    const chat::ChatFormat format = chat::ChatFormat::from_source(source, "Qwen3.5-4B", "", "");
    // (sampled at temperature 1, seeded: each token follows the logits more closely than the greedy ones)
    GenerationParams gp;
    gp.max_tokens = 8;
    gp.sampling.temperature = 1.0f;
    gp.sampling.seed = 11;
    cpu::CpuBackend kept(m->config, m->weights, snapshot_options(512, chat::kStateSnapshots));
    cpu::CpuBackend plain(m->config, m->weights, snapshot_options(512, 0));
    auto inner = test::arch_cpu_backend(m->config, m->weights, cpu::Isa::generic, 512);
    test::FromScratch scratch(*inner);
    chat::Conversation conv(kept, *tok, format, 512, gp, chat::ContextOverflow::error);
    chat::Conversation unkept(plain, *tok, format, 512, gp, chat::ContextOverflow::error);
    chat::Conversation again(scratch, *tok, format, 512, gp, chat::ContextOverflow::error);
    int turn = 0;
    for (const char* said : {"Hello there", "And again", "Once more"}) {
        INFO(said);
        const chat::TurnResult t = conv.send(said, [](std::string_view) {});
        const chat::TurnResult u = unkept.send(said, [](std::string_view) {});
        const chat::TurnResult want = again.send(said, [](std::string_view) {});
        CHECK(t.text == want.text);
        CHECK(t.reasoning == want.reasoning);
        CHECK(u.text == want.text);
        if (turn++ == 0) continue;
        // Without a kept state the turn runs from 0; with one, from where the last prompt's history ended.
        CHECK(!want.reasoning.empty());
        CHECK(u.stats.reused_tokens == 0);
        CHECK(t.stats.reused_tokens > 0);
        CHECK(t.stats.prefilled_tokens + t.stats.reused_tokens == want.stats.prefilled_tokens);
    }
}

TEST_CASE("qwen35: a chat whose template refuses to render without the generation prompt still answers",
          "[arch][chat]") {
    auto m = saved_model(GgmlType::F32);
    auto tok = Tokenizer::from_gguf(m->file);
    const chat::ChatFormat format = chat::ChatFormat::from_source(
        "{%- if not add_generation_prompt %}{{ raise_exception('a generation prompt, please') }}{%- endif %}"
        "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
        "{{ '<|im_start|>assistant\\n' }}",
        "refusing", "", "");
    GenerationParams gp;
    gp.max_tokens = 4;
    gp.sampling.temperature = 0;
    cpu::CpuBackend kept(m->config, m->weights, snapshot_options(256, chat::kStateSnapshots));
    chat::Conversation conv(kept, *tok, format, 256, gp, chat::ContextOverflow::error);
    for (const char* said : {"Hello there", "And again"}) CHECK_NOTHROW(conv.send(said, [](std::string_view) {}));
}

}  // namespace test_arch_qwen35
