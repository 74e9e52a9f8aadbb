// A reasoning model's thinking kept apart from its answer: Qwen3, QwQ, DeepSeek-R1 distills and SmolLM3 write it in
// a <think>...</think> block (the R1 distills' prompt opens the block, so their answer starts inside it); gpt-oss
// writes harmony messages, its thinking on the "analysis" channel and its answer on "final". What is not
// reasoning is the content, as OpenAI-compatible servers give "reasoning_content" and "content".
#pragma once

#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace quill::chat {

enum class ReasoningSyntax {
    none,     // no reasoning: the whole answer is content
    think,    // <think>reasoning</think>content
    harmony,  // <|channel|>analysis<|message|>reasoning<|end|><|start|>assistant<|channel|>final<|message|>content
};

// The syntax of a template's source: harmony where tool_call_syntax sees harmony, think where the source writes
// "</think>", else none.
ReasoningSyntax reasoning_syntax(std::string_view template_source);

// Whether a prompt leaves a think block open for the answer: its last <think> or </think> token, among its last
// 16 tokens, is <think> (a generation prompt that ends "<think>\n").
bool prompt_opens_think(const Tokenizer& tok, std::span<const int32_t> prompt);

// The field of an assistant message that a template of `syntax` reads the reasoning from: "thinking" for harmony
// (gpt-oss), else "reasoning_content" (Qwen3; the others drop it).
std::string_view reasoning_field(ReasoningSyntax syntax);

enum class AnswerPart {
    reasoning,
    content,
    call,  // a harmony message to a recipient (to=functions.NAME), kept whole with its markers for parse_tool_calls
};

// The answer as it streams: text pushed piece by piece (a marker may be split across pieces) comes out in parts, in
// order, whole markers taken out. think: a <think> at the start (after white space), or the prompt's open block,
// holds the reasoning up to </think> or the end of the answer; white space around the reasoning and at the start of
// the content after it is dropped; any later <think> is content. harmony: each message's header (up to
// <|message|>) names its channel; analysis is reasoning (messages joined by "\n"), final and commentary are
// content, a message with a recipient is a call; an answer that does not start with a harmony header, or a header
// longer than 256 bytes, is content as it is. none: all content.
class ReasoningStream {
public:
    using Sink = std::function<void(AnswerPart, std::string_view)>;
    ReasoningStream(ReasoningSyntax syntax, bool opened_think, Sink sink);
    void push(std::string_view text);
    // The held-back rest (a partial marker at the end is text). Call once at the end.
    void finish();

private:
    enum class State { start, reasoning, content, header, body };
    void run(bool final);
    void run_think(bool final);
    void run_harmony(bool final);
    void emit(AnswerPart part, std::string_view text);
    void end_reasoning();
    // Handles a finished harmony header: which part its body is.
    void open_body(std::string_view header);

    ReasoningSyntax syntax_;
    Sink sink_;
    State state_;
    std::string pending_;       // text not yet given out
    std::string space_;         // white space held back at the end of the reasoning
    std::string call_;          // the harmony call being read, markers and all
    AnswerPart body_ = AnswerPart::content;
    bool had_reasoning_ = false;     // some reasoning has been given out
    bool in_block_ = false;          // inside a reasoning block that has given out text
    bool content_started_ = false;   // some content has been given out
    bool trim_content_ = false;      // content's leading white space is dropped (it follows reasoning)
};

// A harmony call (AnswerPart::call) that is not a well-formed one, as a terminal shows it: its text less its markers.
std::string harmony_call_text(std::string_view call);

struct SplitAnswer {
    std::string reasoning;
    std::string content;  // harmony calls in it as they were written
};

// A whole answer's parts: ReasoningStream's, reasoning and content (calls included) each joined.
SplitAnswer split_reasoning(std::string_view answer, ReasoningSyntax syntax, bool opened_think);

// The assistant message a conversation keeps: {"role": "assistant", "content"} and, when there is reasoning, its
// reasoning_field, so that the template renders the next turn as it expects.
nlohmann::ordered_json assistant_message(const SplitAnswer& answer, ReasoningSyntax syntax);

}  // namespace quill::chat
