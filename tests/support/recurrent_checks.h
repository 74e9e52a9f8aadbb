// Helpers for the tests of recurrent models (qwen35, lfm2): chat turns that continue a recurrent state against the
// same conversation run from position 0 each turn.
#pragma once

#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/chat/template.h"
#include "engine/model/model.h"
#include "tests/support/arch_checks.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

namespace quill::test {

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
