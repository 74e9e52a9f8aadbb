// Chat: the conversation on one KV slot (prefix reuse, undo, regenerate, interrupts, context overflow), the REPL's
// commands, chat formats from real model files, and `quill chat` / `quill template` / `quill run` end to end.
#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/cli/repl.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <deque>
#include <fstream>

namespace test_chat {

using namespace quill;
using namespace quill::chat;

namespace {

struct Tiny {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
    std::unique_ptr<ChatFormat> format;
};

// The tiny chat model the tests write, with the built-in chatml format.
Tiny load_tiny() {
    Tiny s;
    s.model = Model::load(test::tiny_model_file(test::TinyModel::spm_chat).string());
    s.tok = Tokenizer::from_gguf(s.model->file);
    s.format = std::make_unique<ChatFormat>(ChatFormat::from_source(*builtin_template("chatml"), "chatml", "", ""));
    return s;
}

std::unique_ptr<cpu::CpuBackend> backend_for(const Tiny& s, int64_t n_ctx) {
    cpu::CpuBackendOptions o;
    o.n_threads = 1;
    o.n_ctx = n_ctx;
    return std::make_unique<cpu::CpuBackend>(s.model->config, s.model->weights, o);
}

GenerationParams greedy(int max_tokens) {
    GenerationParams p;
    p.max_tokens = max_tokens;
    p.sampling.temperature = 0;
    return p;
}

const auto kIgnore = [](std::string_view) {};

// The reply a fresh backend gives for these messages (no cache reuse): the oracle for every reused prefix.
std::string fresh_reply(const Tiny& s, const nlohmann::json& messages, int max_tokens, int64_t n_ctx = 512) {
    auto b = backend_for(s, n_ctx);
    Generation gen(*s.tok, s.format->tokenize(*s.tok, messages, true), greedy(max_tokens), n_ctx);
    std::string text;
    generate(*b, gen, 0, [&](std::string_view p) { text += p; });
    return text;
}

}  // namespace

TEST_CASE("a second turn reuses the cached prefix and replies as a fresh run would", "[chat]") {
    const Tiny s = load_tiny();
    auto b = backend_for(s, 512);
    Conversation conv(*b, *s.tok, *s.format, 512, greedy(12), ContextOverflow::error);
    conv.set_system("Tell a story.");
    TurnResult t1 = conv.send("Once upon a time", kIgnore);
    CHECK(t1.stats.reused_tokens == 0);
    CHECK(t1.text == fresh_reply(s, nlohmann::json::array({{{"role", "system"}, {"content", "Tell a story."}},
                                                             {{"role", "user"}, {"content", "Once upon a time"}}}),
                                 12));
    TurnResult t2 = conv.send("The cat sat", kIgnore);
    // Everything of turn 1 that the template renders the same way is reused.
    const auto prompt2 = s.format->tokenize(*s.tok, conv.messages(), false);
    CHECK(t2.stats.reused_tokens > t1.stats.prompt_tokens);
    CHECK(t2.stats.reused_tokens + t2.stats.prefilled_tokens == t2.stats.prompt_tokens);
    nlohmann::json upto2 = conv.messages();
    upto2.erase(upto2.end() - 1);  // without the reply of turn 2
    CHECK(t2.text == fresh_reply(s, upto2, 12));
    CHECK(conv.turns().size() == 4);
    CHECK(prompt2.size() > 0);
}

TEST_CASE("undo removes the last exchange and regen gives the same greedy reply from the cache", "[chat]") {
    const Tiny s = load_tiny();
    auto b = backend_for(s, 512);
    Conversation conv(*b, *s.tok, *s.format, 512, greedy(10), ContextOverflow::error);
    conv.send("Lily went to the park", kIgnore);
    TurnResult t2 = conv.send("She saw a dog", kIgnore);
    TurnResult again = conv.regenerate(kIgnore);
    CHECK(again.text == t2.text);
    CHECK(again.stats.reused_tokens > 0);
    CHECK(conv.turns().size() == 4);
    CHECK(conv.undo());
    CHECK(conv.turns().size() == 2);
    CHECK(conv.turns().back()["role"] == "assistant");
    CHECK(conv.undo());
    CHECK_FALSE(conv.undo());
    CHECK_THROWS_AS(conv.regenerate(kIgnore), UsageError);
    // After undoing everything the next turn equals a fresh conversation's first turn.
    TurnResult t = conv.send("She saw a dog", kIgnore);
    CHECK(t.text == fresh_reply(s, nlohmann::json::array({{{"role", "user"}, {"content", "She saw a dog"}}}), 10));
}

namespace {
// A backend that keeps only the last `limit` positions for going back (as sliding-window rings do).
class RewindLimited final : public Backend {
public:
    RewindLimited(Backend& inner, int64_t limit) : inner_(inner), limit_(limit) {}
    std::string_view name() const override { return inner_.name(); }
    const ModelConfig& config() const override { return inner_.config(); }
    const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
    void forward(const Batch& batch, std::span<float> logits) override { inner_.forward(batch, logits); }
    int64_t max_rewind() const override { return limit_; }

private:
    Backend& inner_;
    int64_t limit_;
};
}  // namespace

TEST_CASE("a turn that would go back past what the cache keeps starts again from position 0", "[chat]") {
    const Tiny s = load_tiny();
    auto inner = backend_for(s, 512);
    RewindLimited b(*inner, 4);
    Conversation conv(b, *s.tok, *s.format, 512, greedy(10), ContextOverflow::error);
    conv.send("Lily went to the park", kIgnore);
    TurnResult t2 = conv.send("She saw a dog", kIgnore);
    CHECK(t2.stats.reused_tokens > 0);  // a turn continuing where the last one ended goes back a token or two
    // Regenerating goes back over the whole reply (10 tokens): further than the backend keeps.
    TurnResult again = conv.regenerate(kIgnore);
    CHECK(again.stats.reused_tokens == 0);
    CHECK(again.stats.prefilled_tokens == again.stats.prompt_tokens);
    CHECK(again.text == t2.text);
}

TEST_CASE("an interrupted reply stays in the conversation and the next turn is still right", "[chat]") {
    const Tiny s = load_tiny();
    auto b = backend_for(s, 512);
    Conversation conv(*b, *s.tok, *s.format, 512, greedy(40), ContextOverflow::error);
    std::atomic<bool> cancel{false};
    int pieces = 0;
    TurnResult t1 = conv.send("Once upon a time", [&](std::string_view) {
        if (++pieces == 3) cancel = true;
    }, &cancel);
    CHECK(t1.finish == FinishReason::interrupted);
    CHECK(t1.stats.completion_tokens < 40);
    REQUIRE(conv.turns().size() == 2);
    CHECK(conv.turns()[1]["content"] == t1.text);
    cancel = false;
    TurnResult t2 = conv.send("Then", kIgnore, &cancel);
    nlohmann::json upto = conv.messages();
    upto.erase(upto.end() - 1);
    CHECK(t2.text == fresh_reply(s, upto, 40));

    // Cancelled before the prefill: nothing generated, the cache keeps only what is known to be there.
    cancel = true;
    TurnResult t3 = conv.send("And", kIgnore, &cancel);
    CHECK(t3.finish == FinishReason::interrupted);
    CHECK(t3.text.empty());
    cancel = false;
    TurnResult t4 = conv.regenerate(kIgnore, &cancel);
    upto = conv.messages();
    upto.erase(upto.end() - 1);
    CHECK(t4.text == fresh_reply(s, upto, 40));
}

TEST_CASE("a conversation that outgrows the context drops its oldest turns or fails as asked", "[chat]") {
    const Tiny s = load_tiny();
    const int64_t n_ctx = 192;
    auto b = backend_for(s, n_ctx);
    Conversation drop(*b, *s.tok, *s.format, n_ctx, greedy(12), ContextOverflow::drop_oldest);
    drop.set_system("Stories.");
    int dropped = 0;
    for (int i = 0; i < 6; ++i) {
        TurnResult t = drop.send("Tell me about the little red ball in the park", kIgnore);
        dropped += t.dropped_messages;
        CHECK(t.stats.prompt_tokens + 12 <= n_ctx);
        // The reply after dropping equals a fresh run of the conversation as it now stands.
        nlohmann::json upto = drop.messages();
        upto.erase(upto.end() - 1);
        CHECK(t.text == fresh_reply(s, upto, 12, n_ctx));
    }
    CHECK(dropped > 0);
    CHECK(drop.messages()[0]["role"] == "system");

    auto b2 = backend_for(s, n_ctx);
    Conversation strict(*b2, *s.tok, *s.format, n_ctx, greedy(12), ContextOverflow::error);
    bool failed = false;
    for (int i = 0; i < 6 && !failed; ++i) {
        const auto before = strict.turns();
        try {
            strict.send("Tell me about the little red ball in the park", kIgnore);
        } catch (const UsageError& e) {
            failed = true;
            CHECK(std::string(e.what()).find("context") != std::string::npos);
            CHECK(strict.turns() == before);  // the failed message is not kept
        }
    }
    CHECK(failed);
    // A single message longer than the context is an error under either policy.
    std::string huge;
    for (int i = 0; i < 120; ++i) huge += "the big dog ";
    CHECK_THROWS_AS(drop.send(huge, kIgnore), UsageError);
}

namespace {

// Scripted input for the REPL.
class ScriptReader final : public LineReader {
public:
    explicit ScriptReader(std::vector<std::string> lines) : lines_(lines.begin(), lines.end()) {}
    InputLine read(const std::string&) override {
        if (lines_.empty()) return {};
        InputLine l{InputLine::Status::line, lines_.front()};
        lines_.pop_front();
        return l;
    }
    bool interactive() const override { return false; }

private:
    std::deque<std::string> lines_;
};

struct Captured {
    std::FILE* f = std::tmpfile();
    ~Captured() { std::fclose(f); }
    std::string text() {
        std::fflush(f);
        std::rewind(f);
        std::string s;
        for (int c; (c = std::fgetc(f)) != EOF;) s.push_back(static_cast<char>(c));
        return s;
    }
};

}  // namespace

TEST_CASE("REPL commands: system, undo, regen, save and load, reset, unknown commands", "[chat]") {
    const Tiny s = load_tiny();
    auto b = backend_for(s, 512);
    Conversation conv(*b, *s.tok, *s.format, 512, greedy(6), ContextOverflow::error);
    const auto dir = test::temp_dir("chat-repl");
    const std::string saved = (dir / "conv.json").string();
    ScriptReader in({"/system Be brief.", "Hello there", "\"\"\"", "two", "lines", "\"\"\"", "joined \\", "line",
                     "/undo", "/regen", "/save " + saved, "/reset", "/frob", "/load " + saved, "/stats", "//slash",
                     "", "/exit", "never read"});
    Captured out, err;
    Output o(out.f, "out"), e(err.f, "err");
    ChatRepl repl(conv, in, o, e, {});
    CHECK(repl.run() == 1);  // /frob failed
    const std::string status = err.text();
    INFO(status);
    CHECK(status.find("system message set") != std::string::npos);
    CHECK(status.find("removed the last exchange") != std::string::npos);
    CHECK(status.find("unknown command /frob") != std::string::npos);
    CHECK(status.find("saved 5 messages") != std::string::npos);  // system + 2 exchanges
    CHECK(status.find("conversation cleared") != std::string::npos);
    CHECK(status.find("loaded 5 messages") != std::string::npos);
    // The conversation: system, "Hello there", "two\nlines\n", then "/slash" (after /load); "joined\nline" undone.
    auto msgs = conv.messages();
    REQUIRE(msgs.size() == 7);
    CHECK(msgs[0]["content"] == "Be brief.");
    CHECK(msgs[1]["content"] == "Hello there");
    CHECK(msgs[3]["content"] == "two\nlines\n");
    CHECK(msgs[5]["content"] == "/slash");
    auto file = parse_messages(test::read_file(saved), saved);
    CHECK(file.size() == 5);
    CHECK(nlohmann::json::parse(test::read_file(saved))["sampling"]["temperature"] == 0.0);
    // Replies are printed, each followed by a blank line (not a terminal).
    const std::string printed = out.text();
    CHECK(printed.find(msgs[2]["content"].get<std::string>() + "\n\n") != std::string::npos);
}

TEST_CASE("parse_messages accepts an array or an object with messages and names what is wrong", "[chat]") {
    CHECK(parse_messages(R"([{"role":"user","content":"hi"}])", "x").size() == 1);
    CHECK(parse_messages(R"({"messages":[{"role":"user","content":"hi"}],"model":"m"})", "x").size() == 1);
    CHECK_THROWS_WITH(parse_messages("[1", "f.json"), Catch::Contains("f.json: not valid JSON"));
    CHECK_THROWS_WITH(parse_messages(R"([{"content":"hi"}])", "f"), Catch::Contains("message 1 has no string \"role\""));
    CHECK_THROWS_WITH(parse_messages(R"({"a":1})", "f"), Catch::Contains("expected a JSON array"));
}

TEST_CASE("on the default model a second turn reuses the whole first turn as sampled", "[chat][model]") {
    auto path = test::default_model();
    if (!path) {
        test::skip("the default model is absent (run models/fetch_default.sh)");
        return;
    }
    auto model = Model::load(path->string());
    auto tok = Tokenizer::from_gguf(model->file);
    ChatFormat format = ChatFormat::choose(&model->file, tok.get(), "", {});
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = 1024;
    cpu::CpuBackend b(model->config, model->weights, o);
    Conversation conv(b, *tok, format, 1024, greedy(48), ContextOverflow::error);
    TurnResult t1 = conv.send("Write a short poem about the sea.", kIgnore);
    REQUIRE(t1.stats.completion_tokens > 8);
    TurnResult t2 = conv.send("Now one about mountains.", kIgnore);
    // Everything fed in turn 1 is reused (but the last sampled token, which the cache may not hold).
    CHECK(t2.stats.reused_tokens == t1.stats.prompt_tokens + t1.stats.completion_tokens - 1);
    CHECK(t2.stats.reused_tokens + t2.stats.prefilled_tokens == t2.stats.prompt_tokens);
    CHECK(!t2.text.empty());
}

}  // namespace test_chat
