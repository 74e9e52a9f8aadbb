// A chat format's markers that the vocabulary makes control tokens (Mistral's [TOOL_CALLS] and [ARGS], <think> in
// some vocabularies) print their text where answers are parsed: a batch answer made of those token ids is a tool
// call and its reasoning is apart, and a grammar forcing a call can choose the marker's token instead of spelling
// it. A scripted backend makes a tiny random model say exactly the token ids under test.
#include "engine/batch/input.h"
#include "engine/batch/records.h"
#include "engine/batch/runner.h"
#include "engine/chat/conversation.h"
#include "engine/chat/markers.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/grammar/constraint.h"
#include "tests/support/random_model.h"
#include "tests/support/scripted_backend.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace test_control_markers {

using namespace quill;
using namespace quill::batch;

namespace {

constexpr const char* kTools =
    R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": )"
    R"({"city": {"type": "string"}}, "required": ["city"]}}}])";

constexpr int64_t kContext = 4096;

// The tiny BPE vocabulary with Mistral's call markers and <think>/</think> as control tokens, a random model of its
// size, and the scripted backend over it.
struct MarkerModel {
    test::TinyVocab vocab = [] {
        test::TinyVocab v = test::tiny_bpe_vocab();
        for (const char* t : {"[TOOL_CALLS]", "[ARGS]", "<think>", "</think>"}) {
            v.pieces.push_back(t);
            v.types.push_back(3);  // control
        }
        return v;
    }();
    std::unique_ptr<Tokenizer> tok = test::make_tokenizer(vocab);
    std::unique_ptr<Model> model;
    std::unique_ptr<cpu::CpuBackend> cpu;
    std::unique_ptr<test::ScriptedBackend> backend;

    MarkerModel() {
        test::TinySpec spec;
        spec.n_vocab = vocab.size();
        spec.n_ctx_train = kContext;
        model = test::make_tiny_model(spec);
        cpu::CpuBackendOptions o;
        o.n_threads = 1;
        o.n_ctx = kContext;
        cpu = std::make_unique<cpu::CpuBackend>(model->config, model->weights, o);
        backend = std::make_unique<test::ScriptedBackend>(*cpu, tok->eog_ids().front());
    }

    // Marker tokens and text, as a model's answer spells them: "[TOOL_CALLS]" for that control token, and so on.
    std::vector<int32_t> script(const std::vector<std::string>& parts) const {
        std::vector<int32_t> ids;
        for (const std::string& p : parts) {
            if (p.size() > 2 && (p.front() == '[' || p.front() == '<') && (p.back() == ']' || p.back() == '>')) {
                ids.push_back(vocab.id(p));
                continue;
            }
            for (int32_t id : tok->encode(p, false, false)) ids.push_back(id);
        }
        return ids;
    }

    // One JSONL request run through `quill batch`'s runner with these syntaxes; its record.
    nlohmann::json batch_record(const std::string& line, chat::ToolCallSyntax tools, chat::ReasoningSyntax reasoning) {
        const BatchInput input = parse_batch_input(line + "\n", FormatHint::jsonl);
        REQUIRE(!input.entries[0].error);
        RunnerOptions options;
        options.defaults.max_tokens = 64;
        options.defaults.sampling.temperature = 0;
        options.seed = 1;
        options.tool_syntax = tools;
        options.reasoning_syntax = reasoning;
        std::FILE* f = std::tmpfile();
        REQUIRE(f);
        {
            RecordWriter out(f, "records", false);
            const PromptEncoder encode = [&](const BatchRequest&) { return tok->encode("Hi", false, false); };
            const BatchProgress p =
                run_batch(*backend, *tok, kContext, input, {}, encode, out, RecordContext{InputFormat::jsonl, "m", 0}, options);
            REQUIRE(p.done == 1);
            REQUIRE(p.errors == 0);
        }
        std::rewind(f);
        std::string text;
        for (int c; (c = std::fgetc(f)) != EOF;) text.push_back(static_cast<char>(c));
        std::fclose(f);
        return nlohmann::json::parse(text);
    }
};

bool contains(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

}  // namespace

TEST_CASE("marker_tokens: the syntaxes' markers that are control tokens, nothing else", "[chat][tools]") {
    MarkerModel m;
    const auto mistral = chat::marker_tokens(*m.tok, chat::ToolCallSyntax::mistral, chat::ReasoningSyntax::none);
    CHECK(mistral == std::vector<int32_t>{m.vocab.id("[TOOL_CALLS]"), m.vocab.id("[ARGS]")});
    CHECK(chat::marker_tokens(*m.tok, chat::ToolCallSyntax::mistral_list, chat::ReasoningSyntax::none) == mistral);
    CHECK(chat::marker_tokens(*m.tok, chat::ToolCallSyntax::hermes, chat::ReasoningSyntax::think) ==
          std::vector<int32_t>{m.vocab.id("<think>"), m.vocab.id("</think>")});
    CHECK(chat::marker_tokens(*m.tok, chat::ToolCallSyntax::none, chat::ReasoningSyntax::none).empty());
    // The shown markers print their text; the chat format's other control tokens still print nothing.
    const auto ids = m.script({"[TOOL_CALLS]", "get_weather", "[ARGS]", "{}"});
    std::vector<int32_t> with_end = ids;
    with_end.push_back(m.vocab.id("<|im_end|>"));
    Detokenizer d(*m.tok, true, mistral);
    std::string text;
    for (int32_t id : with_end) text += d.push(id);
    text += d.finish();
    CHECK(text == "[TOOL_CALLS]get_weather[ARGS]{}");
    CHECK(decode(*m.tok, ids) == "get_weather{}");
}

TEST_CASE("a Mistral answer whose call markers are control tokens is a tool call in its batch record",
          "[batch][tools]") {
    MarkerModel m;
    m.backend->say(m.script({"[TOOL_CALLS]", "get_weather", "[ARGS]", R"({"city": "Paris"})"}));
    const std::string line =
        std::string(R"({"id": "w", "messages": [{"role": "user", "content": "Weather?"}], "tools": )") + kTools + "}";
    const auto record = m.batch_record(line, chat::ToolCallSyntax::mistral, chat::ReasoningSyntax::none);
    CHECK(record["finish_reason"] == "tool_calls");
    REQUIRE(record["tool_calls"].size() == 1);
    CHECK(record["tool_calls"][0]["function"]["name"] == "get_weather");
    CHECK(record["tool_calls"][0]["function"]["arguments"] == R"({"city":"Paris"})");
    CHECK(record["text"] == "");
}

TEST_CASE("a <think> block of control tokens is a batch record's reasoning_content", "[batch]") {
    MarkerModel m;
    m.backend->say(m.script({"<think>", "Add them.", "</think>", "Four."}));
    const auto record = m.batch_record(R"({"id": "q", "messages": [{"role": "user", "content": "2+2?"}]})",
                                       chat::ToolCallSyntax::none, chat::ReasoningSyntax::think);
    CHECK(record["text"] == "Four.");
    CHECK(record["reasoning_content"] == "Add them.");
}

TEST_CASE("tool_choice required in Mistral's syntax lets the grammar choose the control tokens of its markers",
          "[batch][tools]") {
    MarkerModel m;
    const int32_t calls = m.vocab.id("[TOOL_CALLS]"), args = m.vocab.id("[ARGS]");
    // Through the batch runner: the forced call is read from the record.
    m.backend->say(m.script({"[TOOL_CALLS]", "get_weather", "[ARGS]", R"({"city": "Paris"})"}));
    const std::string line = std::string(R"({"id": "w", "messages": [{"role": "user", "content": "Weather?"}], )") +
                             R"("tool_choice": "required", "tools": )" + kTools + "}";
    const auto record = m.batch_record(line, chat::ToolCallSyntax::mistral, chat::ReasoningSyntax::none);
    REQUIRE(record["tool_calls"].size() == 1);
    CHECK(record["tool_calls"][0]["function"]["arguments"] == R"({"city":"Paris"})");

    // A generation under the forced grammar takes the markers' own tokens, which print as the markers.
    const nlohmann::ordered_json vars = {{"tools", nlohmann::ordered_json::parse(kTools)}, {"tool_choice", "required"}};
    const auto spec = chat::tool_choice_constraint(vars, chat::ToolCallSyntax::mistral, "test");
    REQUIRE(spec);
    GenerationParams gp;
    gp.max_tokens = 64;
    gp.sampling.temperature = 0;
    gp.shown_tokens = chat::marker_tokens(*m.tok, chat::ToolCallSyntax::mistral, chat::ReasoningSyntax::none);
    gp.grammar = grammar::token_grammar(*spec, *m.tok, gp.shown_tokens);
    m.backend->say(m.script({"[TOOL_CALLS]", "get_weather", "[ARGS]", R"({"city": "Paris"})"}));
    Generation gen(*m.tok, m.tok->encode("Hi", false, false), gp, kContext);
    std::string text;
    generate(*m.backend, gen, 0, [&](std::string_view t) { text += t; });
    CHECK(contains(gen.generated(), calls));
    CHECK(contains(gen.generated(), args));
    CHECK(text == R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})");
    const auto parsed = chat::parse_tool_calls(text, chat::ToolCallSyntax::mistral);
    REQUIRE(parsed.calls.size() == 1);
    CHECK(parsed.calls[0].name == "get_weather");
}

TEST_CASE("chat with Mistral's template and tool_choice required: the reply is the call, shown as one",
          "[chat][tools]") {
    MarkerModel m;
    const chat::ChatFormat format = chat::ChatFormat::from_source(
        test::read_file(std::filesystem::path(QUILL_SOURCE_DIR) / "tests/data/templates/src" /
                        "Mistral-Small-3.2-24B-Instruct-2506.jinja"),
        "mistral", "<s>", "</s>");
    REQUIRE(chat::tool_call_syntax(format.source()) == chat::ToolCallSyntax::mistral);
    GenerationParams gp;
    gp.max_tokens = 64;
    gp.sampling.temperature = 0;
    chat::Conversation conv(*m.backend, *m.tok, format, kContext, gp, chat::ContextOverflow::error);
    conv.set_template_vars({{"tools", nlohmann::ordered_json::parse(kTools)}, {"tool_choice", "required"}}, "test");
    m.backend->say(m.script({"[TOOL_CALLS]", "get_weather", "[ARGS]", R"({"city": "Paris"})"}));
    std::string shown;
    const chat::TurnResult r = conv.send("Weather?", [&](std::string_view t) { shown += t; });
    CHECK(r.text.empty());
    CHECK(shown == R"([tool call get_weather {"city":"Paris"}])");
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments == R"({"city":"Paris"})");
}

}  // namespace test_control_markers
