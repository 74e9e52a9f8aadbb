// The assistant message `quill chat` keeps after a reasoning model's reply: the content without the reasoning and the
// reasoning in the field the template reads, so that the next turn renders as Python's Jinja2 renders the same
// conversation (tests/data/reasoning/*.txt, made by make_history.py there with the real templates); /load keeps the
// field. A scripted backend makes the tiny model say exactly the reply under test.
#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "tests/support/random_model.h"
#include "tests/support/scripted_backend.h"
#include "tests/support/test_util.h"
#include "tests/unit/chat/golden_clock.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

namespace test_reasoning_history {

using namespace quill;
using namespace quill::chat;

namespace {

const std::filesystem::path kSource = QUILL_SOURCE_DIR;

using test::ScriptedBackend;

struct Scripted {
    std::unique_ptr<Model> model = Model::load(test::tiny_model_file(test::TinyModel::bpe_chat).string());
    std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(model->file);
    std::unique_ptr<cpu::CpuBackend> cpu;
    std::unique_ptr<ScriptedBackend> backend;

    Scripted() {
        cpu::CpuBackendOptions o;
        o.n_threads = 1;
        o.n_ctx = 2048;
        cpu = std::make_unique<cpu::CpuBackend>(model->config, model->weights, o);
        backend = std::make_unique<ScriptedBackend>(*cpu, tok->eog_ids().front());
    }
};

GenerationParams greedy() {
    GenerationParams p;
    p.max_tokens = 200;
    p.sampling.temperature = 0;
    return p;
}

ChatFormat real_format(const std::string& name) {
    return ChatFormat::from_source(test::read_file(kSource / "tests/data/templates/src" / (name + ".jinja")), name, "",
                                   "");
}

// The conversation and a next user message, rendered by the template with the goldens' clock.
std::string next_turn(const Conversation& conv, const nlohmann::json& after, bool generation_prompt) {
    nlohmann::json messages = conv.messages();
    for (const auto& m : after) messages.push_back(m);
    const ChatTemplate tmpl = ChatTemplate::parse(conv.format().source(), "golden");
    const nlohmann::json vars{{"messages", messages},
                                      {"add_generation_prompt", generation_prompt},
                                      {"bos_token", ""},
                                      {"eos_token", ""}};
    return tmpl.render(vars, test::golden_options());
}

std::string golden(const std::string& name) { return test::read_file(kSource / "tests/data/reasoning" / (name + ".txt")); }

// A conversation on the scripted backend under a real template (tests/data/templates/src/NAME.jinja).
struct ScriptedChat {
    Scripted s;
    ChatFormat format;
    Conversation conv;
    explicit ScriptedChat(const std::string& name)
        : format(real_format(name)), conv(*s.backend, *s.tok, format, 2048, greedy(), ContextOverflow::error) {}
};

struct Reply {
    std::string shown, reasoning;
    TurnResult result;
};

Reply say(ScriptedChat& chat, const std::string& reply) {
    Conversation& conv = chat.conv;
    chat.s.backend->say(chat.s.tok->encode(reply, false, false));
    Reply r;
    conv.on_reasoning([&](std::string_view t) { r.reasoning += t; });
    r.result = conv.send("Hi", [&](std::string_view t) { r.shown += t; });
    conv.on_reasoning(nullptr);
    return r;
}

const nlohmann::json kNext = nlohmann::json::array({{{"role", "user"}, {"content", "And you?"}}});

}  // namespace

TEST_CASE("chat keeps a Qwen3 reply's thinking in reasoning_content and the next turns render as Jinja2's", "[chat]") {
    ScriptedChat chat("Qwen-Qwen3-0.6B");
    Conversation& conv = chat.conv;
    const Reply r = say(chat, "<think>\nThe user greets.\n</think>\n\nHello!");
    CHECK(r.shown == "Hello!");
    CHECK(r.reasoning == "The user greets.");
    CHECK(r.result.text == "Hello!");
    CHECK(r.result.reasoning == "The user greets.");
    const nlohmann::json stored = conv.messages().back();
    CHECK(stored == nlohmann::json{{"role", "assistant"}, {"content", "Hello!"}, {"reasoning_content", "The user greets."}});
    CHECK(next_turn(conv, kNext, true) == golden("qwen3_next_turn"));
    CHECK(next_turn(conv, nlohmann::json::array(), false) == golden("qwen3_last_turn"));

    // /save then /load keeps the field (and so the rendering).
    Conversation loaded(*chat.s.backend, *chat.s.tok, chat.format, 2048, greedy(), ContextOverflow::error);
    loaded.load(nlohmann::json::parse(conv.messages().dump()));
    CHECK(loaded.messages() == conv.messages());
    CHECK(next_turn(loaded, nlohmann::json::array(), false) == golden("qwen3_last_turn"));
}

TEST_CASE("chat keeps SmolLM3's <think> block out of the content it renders again", "[chat]") {
    ScriptedChat chat("HuggingFaceTB-SmolLM3-3B");
    Conversation& conv = chat.conv;
    const Reply r = say(chat, "<think>\nThe user greets.\n</think>\nHello!");
    CHECK(r.shown == "Hello!");
    CHECK(conv.messages().back()["content"] == "Hello!");
    CHECK(next_turn(conv, kNext, true) == golden("smollm3_next_turn"));
}

TEST_CASE("chat keeps gpt-oss's analysis channel in thinking and its final message as the content", "[chat]") {
    ScriptedChat chat("openai-gpt-oss-120b");
    Conversation& conv = chat.conv;
    const Reply r = say(chat,
                        "<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final"
                        "<|message|>Hello!");
    CHECK(r.shown == "Hello!");
    CHECK(r.reasoning == "The user greets.");
    const nlohmann::json stored = conv.messages().back();
    CHECK(stored == nlohmann::json{{"role", "assistant"}, {"content", "Hello!"}, {"thinking", "The user greets."}});
    CHECK(next_turn(conv, kNext, true) == golden("gpt_oss_next_turn"));
    // The conversation goes on (the template accepts what was kept).
    chat.s.backend->say(chat.s.tok->encode("<|channel|>final<|message|>Fine.", false, false));
    CHECK(conv.send("And you?", [](std::string_view) {}).text == "Fine.");
}

TEST_CASE("a non-reasoning template's replies are kept as they were said", "[chat]") {
    ScriptedChat chat("Qwen-Qwen2.5-7B-Instruct");
    Conversation& conv = chat.conv;
    const Reply r = say(chat, "<think>not a reasoning model</think> Hi");
    CHECK(r.shown == "<think>not a reasoning model</think> Hi");
    CHECK(r.reasoning.empty());
    CHECK(conv.messages().back() ==
          nlohmann::ordered_json{{"role", "assistant"}, {"content", "<think>not a reasoning model</think> Hi"}});
}

}  // namespace test_reasoning_history
