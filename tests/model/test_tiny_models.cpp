// The tiny models and vocabularies the tests write themselves (tests/support/random_model.h,
// tests/support/tiny_vocab.h), which the CLI, generation, scheduling and chat tests run in place of a real small
// model: they are the same bytes from the same seed, load with their vocabulary and template, tokenize the tests'
// prompts into whole words, and the fast CPU backend runs them as the reference backend (the oracle) does.
#include "engine/chat/template.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/backend_checks.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace test_tiny_models {

using namespace quill;
using namespace quill::test;

TEST_CASE("tiny models are the same bytes from their seed and load with their vocabulary and template", "[tiny]") {
    for (TinyModel which : {TinyModel::spm, TinyModel::spm_q8_0, TinyModel::spm_chat, TinyModel::bpe_chat}) {
        INFO(tiny_model_file(which).filename().string());
        const std::vector<uint8_t> bytes = make_tiny_gguf(tiny_model_spec(which));
        CHECK(make_tiny_gguf(tiny_model_spec(which)) == bytes);
        const std::string file = read_file(tiny_model_file(which));
        CHECK(std::vector<uint8_t>(file.begin(), file.end()) == bytes);
        auto model = Model::load(tiny_model_file(which).string());
        CHECK(model->config.n_layer == 5);
        CHECK(model->config.n_ctx_train == 2048);
        auto tok = Tokenizer::from_gguf(model->file);
        CHECK(tok->n_vocab() == model->config.n_vocab);
        const bool chat = which == TinyModel::spm_chat || which == TinyModel::bpe_chat;
        CHECK(model->file.get_string("tokenizer.chat_template").has_value() == chat);
    }
    // Same weights in every SPM file but for their type: the F32 and Q8_0 embeddings hold the same rows.
    auto f32 = Model::load(tiny_model_file(TinyModel::spm).string());
    auto q8 = Model::load(tiny_model_file(TinyModel::spm_q8_0).string());
    CHECK(q8->weights.tok_embd.type == GgmlType::Q8_0);
    std::vector<float> row(64);
    dequantize_row(GgmlType::Q8_0, q8->weights.tok_embd.data, row.data(), 64);
    for (int i = 0; i < 64; ++i) CHECK(row[i] == Approx(reinterpret_cast<const float*>(f32->weights.tok_embd.data)[i]).margin(0.01));
}

TEST_CASE("the tiny vocabularies hold the tests' words whole, with byte fallback and control tokens", "[tiny][tokenizer]") {
    const TinyVocab spm = tiny_spm_vocab(true);
    const auto s = make_tokenizer(spm);
    CHECK(s->encode("Once upon a time", true, false) ==
          std::vector<int32_t>{1, spm.id("▁Once"), spm.id("▁upon"), spm.id("▁a"), spm.id("▁time")});
    CHECK(decode(*s, s->encode("Lily and Tom went to the park.", false, false)) == "Lily and Tom went to the park.");
    // A word the vocabulary lacks is its longest known prefix and then characters; a character it lacks, its bytes.
    CHECK(s->encode("timely", false, false) ==
          std::vector<int32_t>{spm.id("▁time"), spm.id("l"), spm.id("y")});
    CHECK(s->encode("\xC3\xA9", false, false) == std::vector<int32_t>{spm.id("▁"), 3 + 0xC3, 3 + 0xA9});
    CHECK(s->is_control(spm.id("<|im_end|>")));
    CHECK(s->is_eog(spm.id("<|im_end|>")));
    CHECK(s->encode("<|im_start|>user", false, true).front() == spm.id("<|im_start|>"));

    const TinyVocab bpe = tiny_bpe_vocab();
    const auto b = make_tokenizer(bpe);
    CHECK_FALSE(b->add_bos());
    CHECK(b->encode("Hi Once upon a time", true, false) ==
          std::vector<int32_t>{'H', 'i', bpe.id("ĠOnce"), bpe.id("Ġupon"), bpe.id("Ġa"), bpe.id("Ġtime")});
    CHECK(decode(*b, b->encode("caf\xC3\xA9 Tom\n", false, false)) == "caf\xC3\xA9 Tom\n");
    CHECK(b->is_eog(bpe.id("<|endoftext|>")));
    CHECK(b->encode("a<|im_end|>", false, true).back() == bpe.id("<|im_end|>"));
    CHECK(b->encode("a<|im_end|>", false, false).back() != bpe.id("<|im_end|>"));

    // The template renders as chatml with its default system message.
    const nlohmann::json vars = {{"messages", nlohmann::json::array({{{"role", "user"}, {"content", "Hi"}}})},
                                 {"add_generation_prompt", true}};
    CHECK(chat::ChatTemplate::parse(kTinyChatTemplate, "tiny").render(vars) ==
          "<|im_start|>system\nYou are a tiny test model.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
          "<|im_start|>assistant\n");
}

TEST_CASE("on the tiny models the fast CPU backend's greedy tokens are the reference backend's", "[tiny][reference]") {
    // The reference backend is the oracle: with F32 weights and an f32 cache the fast path differs from it by float
    // summation order only, so 48 greedy tokens agree, on every kernel family. Q8_0 weights: the fast path quantizes
    // its inputs to int8, the reference does not (test_reference.cpp's limit on random models: 0.15 of the RMS).
    const std::vector<int32_t> prompt = make_tokenizer(tiny_spm_vocab())->encode("Once upon a time", true, false);
    for (TinyModel which : {TinyModel::spm, TinyModel::spm_q8_0}) {
        auto model = Model::load(tiny_model_file(which).string());
        ReferenceBackend ref(model->config, model->weights, ReferenceBackendOptions{128, 1, KvType::f32});
        std::vector<float> ref_logits;
        const std::vector<int32_t> want = greedy_tokens(ref, prompt, 48, &ref_logits);
        for (cpu::Isa isa : model_test_isas()) {
            INFO(tiny_model_file(which).filename().string() << ", " << cpu::isa_name(isa));
            cpu::CpuBackendOptions o;
            o.n_threads = 2;
            o.n_ctx = 128;
            o.kv_type = KvType::f32;
            o.isa = isa;
            cpu::CpuBackend fast(model->config, model->weights, o);
            std::vector<float> logits;
            const std::vector<int32_t> got = greedy_tokens(fast, prompt, 48, &logits);
            if (which == TinyModel::spm) {
                CHECK(got == want);
                CHECK(max_diff(logits, ref_logits) / rms(ref_logits) <= 1e-5);
            } else {
                CHECK(max_diff(logits, ref_logits) / rms(ref_logits) <= 0.15);
            }
        }
    }
}

}  // namespace test_tiny_models
