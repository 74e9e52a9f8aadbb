// Helpers for the tests of recurrent models (qwen35, lfm2, granitehybrid): a prompt in one batch against its tokens
// one at a time, a slot's state refusing to go back, and chat turns that continue a recurrent state against the same
// conversation run from position 0 each turn.
#pragma once

#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/chat/template.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/arch_checks.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace quill::test {

// A prompt of `shape` (F32 and Q8_0 weights) in one batch gives the logits of its tokens one at a time, bit for bit,
// on every kernel family: the recurrence runs token by token in both, and every product is batch invariant.
inline void check_prompt_equals_stepwise(const std::string& shape) {
    for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0}) {
        auto m = SyntheticModel::make(synthetic_config(shape), type, 7);
        const auto tokens = some_tokens(12, static_cast<int>(m->config.n_vocab), 5);
        for (cpu::Isa isa : model_test_isas()) {
            INFO(type_name(type) << ", " << cpu::isa_name(isa));
            auto one = arch_cpu_backend(m->config, m->weights, isa, 64);
            auto many = arch_cpu_backend(m->config, m->weights, isa, 64);
            CHECK(max_diff(prefill_logits(*many, tokens), stepwise_logits(*one, tokens)) == 0.0);
        }
    }
}

// On the reference backend and the CPU backend of `shape`: no rewind and no KV copies; a cached prefix is taken only
// where the state stands (all of it, never part); a token back at position 3 (a rewind) or on at 7 (a gap) after 6 is
// refused naming the slot and where its state stands; starting again at 0 gives a fresh backend's logits.
inline void check_state_continues_or_restarts(const std::string& shape) {
    auto m = SyntheticModel::make(synthetic_config(shape), GgmlType::F32, 3);
    const auto a = some_tokens(6, static_cast<int>(m->config.n_vocab), 1);
    const auto b = some_tokens(4, static_cast<int>(m->config.n_vocab), 2);
    ReferenceBackend ref(m->config, m->weights, ReferenceBackendOptions{64, 2, KvType::f32});
    auto cpu = arch_cpu_backend(m->config, m->weights, std::nullopt, 64, 2);
    for (Backend* be : {static_cast<Backend*>(&ref), static_cast<Backend*>(cpu.get())}) {
        INFO(be->name());
        CHECK(be->max_rewind() == 0);
        CHECK(!be->can_copy_kv());
        CHECK(be->reusable_prefix(a, 6, std::vector<int32_t>{a[0], a[1], a[2], a[3], a[4], a[5], 9}) == 6);
        CHECK(be->reusable_prefix(a, 6, std::vector<int32_t>{a[0], a[1], a[2], 9}) == 0);
        prefill_logits(*be, a);
        for (int32_t pos : {3, 7}) {
            Batch bad;
            bad.add(b[0], pos, 0, true);
            std::vector<float> out(m->config.n_vocab);
            CHECK_THROWS_WITH(be->forward(bad, out), Catch::Contains("slot 0: position " + std::to_string(pos)) &&
                                                         Catch::Contains("state stands at position 6"));
        }
        const auto again = prefill_logits(*be, b);
        ReferenceBackend fresh(m->config, m->weights, ReferenceBackendOptions{64, 1, KvType::f32});
        CHECK(max_diff(again, prefill_logits(fresh, b)) <= 1e-4 * max_abs(again));
    }
}

// A backend that never continues a cached prefix (every turn from position 0), over another.
class FromScratch final : public Backend {
public:
    explicit FromScratch(Backend& inner) : inner_(inner) {}
    std::string_view name() const override { return inner_.name(); }
    const ModelConfig& config() const override { return inner_.config(); }
    const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
    void forward(const Batch& batch, std::span<float> logits) override { inner_.forward(batch, logits); }
    int64_t max_rewind() const override { return -1; }

private:
    Backend& inner_;
};

// Three chat turns (ChatML, greedy, 6 tokens each) on the CPU backend's generic kernels give the replies of the
// conversation run afresh each turn, and turns 2 and 3 continue the state where the turns before left it (the
// tokens fed so far) rather than from 0.
inline void check_chat_turns_continue_state(const Model& m) {
    auto tok = Tokenizer::from_gguf(m.file);
    const chat::ChatFormat format =
        chat::ChatFormat::from_source(*chat::builtin_template("chatml"), "chatml", "", "");
    GenerationParams gp;
    gp.max_tokens = 6;
    gp.sampling.temperature = 0;
    auto kept = arch_cpu_backend(m.config, m.weights, cpu::Isa::generic, 256);
    auto inner = arch_cpu_backend(m.config, m.weights, cpu::Isa::generic, 256);
    FromScratch scratch(*inner);
    chat::Conversation conv(*kept, *tok, format, 256, gp, chat::ContextOverflow::error);
    chat::Conversation again(scratch, *tok, format, 256, gp, chat::ContextOverflow::error);
    int reused = 0;
    for (const char* said : {"Hello there", "And again", "Once more"}) {
        INFO(said);
        const chat::TurnResult t = conv.send(said, [](std::string_view) {});
        const chat::TurnResult want = again.send(said, [](std::string_view) {});
        CHECK(want.stats.reused_tokens == 0);
        CHECK(t.text == want.text);
        reused += t.stats.reused_tokens;
    }
    CHECK(reused > 0);
}

}  // namespace quill::test
