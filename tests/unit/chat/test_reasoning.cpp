// The reasoning splitter (engine/chat/reasoning.h): <think> blocks (at the start, opened by the prompt, cut short)
// and harmony channels, whole and streamed with markers split across pieces; the syntax told from real templates and
// an open block from a real prompt.
#include "engine/chat/chat_format.h"
#include "engine/chat/reasoning.h"
#include "engine/chat/tool_calls.h"
#include "engine/format/gguf.h"
#include "tests/support/test_util.h"
#include "tests/unit/tokenizer/vocab_vectors.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

namespace test_reasoning {

using namespace quill;
using namespace quill::chat;

namespace {

struct Case {
    const char* name;
    ReasoningSyntax syntax;
    bool opened;
    std::string answer, reasoning, content;
};

const Case kCases[] = {
    {"think block", ReasoningSyntax::think, false, "<think>\nLet me see.\n2+2=4.\n</think>\n\nIt is 4.",
     "Let me see.\n2+2=4.", "It is 4."},
    {"white space before the block", ReasoningSyntax::think, false, "\n <think>a</think>b", "a", "b"},
    {"empty block (thinking off)", ReasoningSyntax::think, false, "<think>\n\n</think>\n\nHi there", "", "Hi there"},
    {"no block: the answer as it is", ReasoningSyntax::think, false, "  Hi <think>x</think>\n", "",
     "  Hi <think>x</think>\n"},
    {"block opened by the prompt", ReasoningSyntax::think, true, "Hmm, 4.\n</think>\n\nFour.", "Hmm, 4.", "Four."},
    {"prompt's block cut short", ReasoningSyntax::think, true, "Still thinking about", "Still thinking about", ""},
    {"own block cut short", ReasoningSyntax::think, false, "<think>\nHalf a tho", "Half a tho", ""},
    {"a later <think> is content", ReasoningSyntax::think, false, "<think>r</think>c <think> d", "r",
     "c <think> d"},
    {"white space inside the reasoning kept", ReasoningSyntax::think, false, "<think>a  \n\n b \n</think>c",
     "a  \n\n b", "c"},
    {"no syntax", ReasoningSyntax::none, true, "<think>x</think>y", "", "<think>x</think>y"},
    {"harmony analysis then final", ReasoningSyntax::harmony, false,
     "<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|><|start|>assistant<|channel|>final<|message|>"
     "2 + 2 = 4.",
     "User asks 2+2. Answer 4.", "2 + 2 = 4."},
    {"harmony final alone, ended by <|return|>", ReasoningSyntax::harmony, false,
     "<|channel|>final<|message|>Hello.<|return|>", "", "Hello."},
    {"harmony: two analysis messages", ReasoningSyntax::harmony, false,
     "<|channel|>analysis<|message|>One.<|end|><|start|>assistant<|channel|>analysis<|message|>Two.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>Done",
     "One.\nTwo.", "Done"},
    {"harmony analysis cut short", ReasoningSyntax::harmony, false, "<|channel|>analysis<|message|>Thinking ab",
     "Thinking ab", ""},
    {"harmony header cut short", ReasoningSyntax::harmony, false,
     "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|chan", "R", ""},
    {"harmony markers not in the text (control tokens unprinted)", ReasoningSyntax::harmony, false,
     "analysisThinking.assistantfinalHello.", "", "analysisThinking.assistantfinalHello."},
    {"harmony commentary preamble is content", ReasoningSyntax::harmony, false,
     "<|channel|>commentary<|message|>Looking it up.<|end|>", "", "Looking it up."},
};

SplitAnswer streamed(std::string_view answer, ReasoningSyntax syntax, bool opened, const std::vector<size_t>& cuts) {
    SplitAnswer out;
    ReasoningStream stream(syntax, opened, [&](AnswerPart part, std::string_view text) {
        (part == AnswerPart::reasoning ? out.reasoning : out.content).append(text);
    });
    size_t at = 0;
    for (size_t cut : cuts) {
        stream.push(answer.substr(at, cut - at));
        at = cut;
    }
    stream.push(answer.substr(at));
    stream.finish();
    return out;
}

}  // namespace

TEST_CASE("split_reasoning takes <think> blocks and harmony's analysis channel out of the answer", "[chat]") {
    for (const Case& c : kCases) {
        INFO(c.name);
        const SplitAnswer s = split_reasoning(c.answer, c.syntax, c.opened);
        CHECK(s.reasoning == c.reasoning);
        CHECK(s.content == c.content);
    }
}

TEST_CASE("ReasoningStream gives the same parts whatever the pieces, markers split across them", "[chat]") {
    for (const Case& c : kCases) {
        INFO(c.name);
        const std::string& a = c.answer;
        // Byte by byte.
        std::vector<size_t> every;
        for (size_t i = 1; i < a.size(); ++i) every.push_back(i);
        SplitAnswer s = streamed(a, c.syntax, c.opened, every);
        CHECK(s.reasoning == c.reasoning);
        CHECK(s.content == c.content);
        // Two pieces, cut at every place (inside each marker among them).
        for (size_t cut = 1; cut < a.size(); ++cut) {
            INFO("cut at " << cut);
            s = streamed(a, c.syntax, c.opened, {cut});
            CHECK(s.reasoning == c.reasoning);
            CHECK(s.content == c.content);
        }
    }
}

TEST_CASE("ReasoningStream gives reasoning before the answer as it comes, not all at the end", "[chat]") {
    std::vector<std::pair<AnswerPart, std::string>> parts;
    ReasoningStream stream(ReasoningSyntax::think, false, [&](AnswerPart part, std::string_view text) {
        parts.emplace_back(part, std::string(text));
    });
    stream.push("<thi");
    stream.push("nk>\nStep one");
    REQUIRE(parts.size() == 1);
    CHECK(parts[0] == std::pair{AnswerPart::reasoning, std::string("Step one")});
    stream.push(".</th");
    stream.push("ink>\n\nAn");
    stream.push("swer");
    stream.finish();
    std::string reasoning, content;
    for (const auto& [part, text] : parts) (part == AnswerPart::reasoning ? reasoning : content) += text;
    CHECK(reasoning == "Step one.");
    CHECK(content == "Answer");
    CHECK(parts.back().first == AnswerPart::content);
}

TEST_CASE("a harmony call stays whole in the content for parse_tool_calls, its analysis is reasoning", "[chat]") {
    const std::string answer =
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
    for (size_t cut = 0; cut <= answer.size(); ++cut) {
        INFO("cut at " << cut);
        std::string reasoning, content;
        std::vector<std::string> calls;
        ReasoningStream stream(ReasoningSyntax::harmony, false, [&](AnswerPart part, std::string_view text) {
            if (part == AnswerPart::call) calls.emplace_back(text);
            (part == AnswerPart::reasoning ? reasoning : content) += text;
        });
        stream.push(std::string_view(answer).substr(0, cut));
        stream.push(std::string_view(answer).substr(cut));
        stream.finish();
        CHECK(reasoning == "Need the weather.");
        CHECK(calls.size() == 1);
        const ParsedAnswer parsed = parse_tool_calls(content, ToolCallSyntax::harmony);
        REQUIRE(parsed.calls.size() == 1);
        CHECK(parsed.calls[0].name == "get_weather");
        CHECK(parsed.calls[0].arguments == "{\"city\":\"Paris\"}");
        CHECK(parsed.text.empty());
    }
}

TEST_CASE("a harmony header that never ends is content, read with bounded holding", "[chat]") {
    const std::string answer = "<|channel|>" + std::string(10000, 'a') + "<|message|>x";
    const SplitAnswer s = split_reasoning(answer, ReasoningSyntax::harmony, false);
    CHECK(s.reasoning.empty());
    CHECK(s.content == answer);
}

TEST_CASE("reasoning_syntax tells the reasoning templates from the others", "[chat]") {
    const auto syntax = [](const std::string& name) {
        const auto dir = std::filesystem::path(QUILL_SOURCE_DIR) / "tests/data/templates/src";
        return reasoning_syntax(test::read_file(dir / (name + ".jinja")));
    };
    CHECK(syntax("Qwen-Qwen3-0.6B") == ReasoningSyntax::think);
    CHECK(syntax("Qwen-QwQ-32B") == ReasoningSyntax::think);
    CHECK(syntax("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B") == ReasoningSyntax::think);
    CHECK(syntax("deepseek-ai-DeepSeek-R1-Distill-Llama-8B") == ReasoningSyntax::think);
    CHECK(syntax("HuggingFaceTB-SmolLM3-3B") == ReasoningSyntax::think);
    CHECK(syntax("openai-gpt-oss-120b") == ReasoningSyntax::harmony);
    CHECK(syntax("Qwen-Qwen2.5-7B-Instruct") == ReasoningSyntax::none);
    CHECK(syntax("meta-llama-Llama-3.1-8B-Instruct") == ReasoningSyntax::none);
    CHECK(reasoning_field(ReasoningSyntax::harmony) == "thinking");
    CHECK(reasoning_field(ReasoningSyntax::think) == "reasoning_content");
}

TEST_CASE("prompt_opens_think: DeepSeek-R1's generation prompt opens the block, a closed one does not", "[chat]") {
    const auto path = test::fetched_vocab("deepseek-r1-qwen.vocab.gguf");
    if (!path) return;
    const GgufFile file = GgufFile::open(path->string());
    const auto tok = Tokenizer::from_gguf(file);
    const nlohmann::json messages = one_turn("", "What is 2+2?");
    // llama.cpp's copy of the template ends its generation prompt with "<think>\n", and closes the block at once
    // unless enable_thinking is true.
    const auto src = test::read_file(std::filesystem::path(QUILL_SOURCE_DIR) /
                                     "tests/data/templates/src/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
    const ChatFormat copy = ChatFormat::from_source(src, "r1", "<｜begin▁of▁sentence｜>", "");
    CHECK_FALSE(prompt_opens_think(*tok, copy.tokenize(*tok, messages, true)));
    CHECK(prompt_opens_think(*tok, copy.tokenize(*tok, messages, true, nullptr, {{"enable_thinking", true}})));
    CHECK_FALSE(prompt_opens_think(*tok, tok->encode("plain text", true, false)));
}

}  // namespace test_reasoning
