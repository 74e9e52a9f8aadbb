// The assistant message `quill chat` keeps after a reply that calls a tool, in every call syntax: its content and
// its "tool_calls" (arguments as the object, ids the template accepts), then the "tool" message of /tool's result,
// so that the next turn renders as Python's Jinja2 renders the same conversation with the real template
// (tests/data/tool_history/*.txt, made by make_history.py there); /load of OpenAI's shape (arguments as text) keeps
// the same history. A scripted backend makes the tiny model say exactly the reply under test.
#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "tests/support/random_model.h"
#include "tests/support/scripted_backend.h"
#include "tests/support/test_util.h"
#include "tests/unit/chat/golden_clock.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>

namespace test_tool_call_history {

using namespace quill;
using namespace quill::chat;
using ojson = nlohmann::ordered_json;

namespace {

const std::filesystem::path kSource = QUILL_SOURCE_DIR;

const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Get the current weather in a city", "parameters": {"type": "object", "properties":
    {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"]}}}])");

struct ToolChat {
    std::unique_ptr<Model> model = Model::load(test::tiny_model_file(test::TinyModel::bpe_chat).string());
    std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(model->file);
    std::unique_ptr<cpu::CpuBackend> cpu;
    std::unique_ptr<test::ScriptedBackend> backend;
    ChatFormat format;
    std::unique_ptr<Conversation> conv;

    explicit ToolChat(const std::string& name)
        : format(ChatFormat::from_source(test::read_file(kSource / "tests/data/templates/src" / (name + ".jinja")),
                                         name, "", "")) {
        cpu::CpuBackendOptions o;
        o.n_threads = 1;
        o.n_ctx = 4096;
        cpu = std::make_unique<cpu::CpuBackend>(model->config, model->weights, o);
        backend = std::make_unique<test::ScriptedBackend>(*cpu, tok->eog_ids().front());
        conv = make();
    }
    std::unique_ptr<Conversation> make() {
        GenerationParams p;
        p.max_tokens = 400;
        p.sampling.temperature = 0;
        p.sampling.seed = 7;
        auto c = std::make_unique<Conversation>(*backend, *tok, format, 4096, p, ContextOverflow::error);
        c->set_template_vars({{"tools", kTools}}, "test");
        return c;
    }
    void will_say(const std::string& reply) { backend->say(tok->encode(reply, false, false)); }

    // The conversation and a next user message, rendered by the template with the goldens' clock.
    std::string next_turn(const Conversation& c) const {
        ojson messages = c.messages();
        messages.push_back({{"role", "user"}, {"content", "Thanks!"}});
        const ChatTemplate tmpl = ChatTemplate::parse(format.source(), "golden");
        const ojson vars{{"messages", messages},
                         {"tools", kTools},
                         {"add_generation_prompt", true},
                         {"bos_token", ""},
                         {"eos_token", ""}};
        return tmpl.render(vars, test::golden_options());
    }
};

std::string golden(const std::string& name) {
    return test::read_file(kSource / "tests/data/tool_history" / (name + ".txt"));
}

// What `quill chat` shows and keeps for one call reply, the result and the reply after it.
void check_call_history(const std::string& tmpl, const std::string& call_reply, const std::string& golden_name,
                        const std::string& id) {
    CAPTURE(tmpl);
    ToolChat chat(tmpl);
    Conversation& conv = *chat.conv;
    std::string shown;
    std::vector<ToolCall> seen;
    conv.on_call([&](const ToolCall& c) { seen.push_back(c); });
    chat.will_say(call_reply);
    const TurnResult r = conv.send("What is the weather in Paris?", [&](std::string_view t) { shown += t; });
    CHECK(shown.empty());
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].name == "get_weather");
    CHECK(seen[0].arguments == R"({"city":"Paris","unit":"celsius"})");
    REQUIRE(r.calls.size() == 1);
    CHECK(r.text.empty());
    const ojson stored = conv.messages().back();
    CHECK(stored["content"] == "");
    REQUIRE(stored["tool_calls"].size() == 1);
    CHECK(stored["tool_calls"][0]["id"] == id);
    CHECK(stored["tool_calls"][0]["function"]["arguments"] == ojson{{"city", "Paris"}, {"unit", "celsius"}});

    const auto open = conv.open_call();
    REQUIRE(open);
    CHECK(open->id == id);
    CHECK(open->name == "get_weather");
    CHECK(open->left == 1);
    chat.will_say("It is 18 °C and clear in Paris.");
    std::string after;
    const auto answered = conv.send_tool_result(R"({"temperature": 18, "sky": "clear"})",
                                                [&](std::string_view t) { after += t; });
    REQUIRE(answered);
    CHECK(after == "It is 18 °C and clear in Paris.");
    CHECK(!conv.open_call());
    CHECK_THROWS_AS(conv.send_tool_result("again", [](std::string_view) {}), UsageError);
    CHECK(chat.next_turn(conv) == golden(golden_name));

    // A saved conversation in OpenAI's shape (arguments as text) loads as the same history.
    ojson saved = conv.messages();
    for (auto& m : saved)
        if (m.contains("tool_calls"))
            for (auto& c : m["tool_calls"]) c["function"]["arguments"] = c["function"]["arguments"].dump();
    auto loaded = chat.make();
    loaded->load(saved);
    CHECK(loaded->messages() == conv.messages());
    CHECK(chat.next_turn(*loaded) == golden(golden_name));
}

}  // namespace

TEST_CASE("chat keeps a Hermes call of Qwen2.5 as tool_calls and the next turn renders as Jinja2's", "[chat][tools]") {
    check_call_history("Qwen-Qwen2.5-7B-Instruct",
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
                       "\"celsius\"}}\n</tool_call>",
                       "qwen2_5", "call_b358faf74ef9765a475c3d96");
}

TEST_CASE("chat keeps a Mistral call with a 9-character id its template accepts", "[chat][tools]") {
    check_call_history("Mistral-Small-3.2-24B-Instruct-2506",
                       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}", "mistral_small",
                       "6gGuqVYqG");
}

TEST_CASE("chat keeps a Mistral Nemo list call", "[chat][tools]") {
    check_call_history("mistralai-Mistral-Nemo-Instruct-2407",
                       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
                       "\"celsius\"}}]",
                       "mistral_nemo", "6gGuqVYqG");
}

TEST_CASE("chat keeps a Llama 3.1 JSON call", "[chat][tools]") {
    check_call_history("meta-llama-Llama-3.1-8B-Instruct",
                       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}",
                       "llama3_1", "call_b358faf74ef9765a475c3d96");
}

TEST_CASE("chat keeps a Qwen3-Coder XML call", "[chat][tools]") {
    check_call_history("Qwen3-Coder",
                       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\n"
                       "celsius\n</parameter>\n</function>\n</tool_call>",
                       "qwen3_coder", "call_b358faf74ef9765a475c3d96");
}

TEST_CASE("chat keeps a gpt-oss harmony call", "[chat][tools]") {
    check_call_history("openai-gpt-oss-120b",
                       "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
                       "\"Paris\", \"unit\": \"celsius\"}<|call|>",
                       "gpt_oss", "call_b358faf74ef9765a475c3d96");
}

TEST_CASE("chat answers several calls of one reply in order and replies after the last result", "[chat][tools]") {
    ToolChat chat("Qwen-Qwen2.5-7B-Instruct");
    Conversation& conv = *chat.conv;
    chat.will_say("Checking both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                  "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
                  "</tool_call>");
    std::string shown;
    conv.on_call([&](const ToolCall& c) { shown += call_display(c); });
    const TurnResult r = conv.send("Paris and Oslo?", [&](std::string_view t) { shown += t; });
    CHECK(shown == "Checking both.\n[tool call get_weather {\"city\":\"Paris\"}]\n"
                   "[tool call get_weather {\"city\":\"Oslo\"}]");
    CHECK(r.text == "Checking both.");
    REQUIRE(r.calls.size() == 2);
    const ojson calls = conv.messages().back()["tool_calls"];
    REQUIRE(conv.open_call());
    CHECK(conv.open_call()->left == 2);
    CHECK(!conv.send_tool_result("18", [](std::string_view) {}));  // one more waits: no reply yet
    CHECK(conv.open_call()->id == calls[1]["id"]);
    CHECK(conv.messages().back() ==
          ojson{{"role", "tool"}, {"tool_call_id", calls[0]["id"]}, {"name", "get_weather"}, {"content", "18"}});
    chat.will_say("Mild in both.");
    const auto reply = conv.send_tool_result("9", [](std::string_view) {});
    REQUIRE(reply);
    CHECK(reply->text == "Mild in both.");
    // /regen after a tool result generates the reply to it again; /undo removes the whole exchange.
    chat.will_say("Mild.");
    CHECK(conv.regenerate([](std::string_view) {}).text == "Mild.");
    CHECK(conv.turns().size() == 5);
    CHECK(conv.undo());
    CHECK(conv.turns().empty());
}

TEST_CASE("a malformed call stays in the reply's text and no call waits for a result", "[chat][tools]") {
    ToolChat chat("Qwen-Qwen2.5-7B-Instruct");
    Conversation& conv = *chat.conv;
    const std::string reply = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1]}\n</tool_call> and <tool_call>";
    chat.will_say(reply);
    std::string shown;
    int calls = 0;
    conv.on_call([&](const ToolCall&) { ++calls; });
    const TurnResult r = conv.send("Weather?", [&](std::string_view t) { shown += t; });
    CHECK(calls == 0);
    CHECK(shown == reply);
    CHECK(r.text == reply);
    CHECK(!conv.messages().back().contains("tool_calls"));
    CHECK(!conv.open_call());
}

TEST_CASE("a loaded call whose id or name is not a string waits for a result without them", "[chat][tools]") {
    // (the fuzzer's input: a function "name" that is an object threw nlohmann's type error out of Conversation::load)
    ToolChat chat("Qwen-Qwen2.5-7B-Instruct");
    auto conv = chat.make();
    conv->load(ojson::parse(R"([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "",
        "tool_calls": [{"id": 7, "function": {"name": {"a": [4, 2.5, true]}, "arguments": {}}}]}])"));
    const auto open = conv->open_call();
    REQUIRE(open);
    CHECK(open->id.empty());
    CHECK(open->name.empty());
    CHECK(open->left == 1);
}

}  // namespace test_tool_call_history
