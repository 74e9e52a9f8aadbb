#include "engine/chat/answer_stream.h"

namespace quill::chat {

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
constexpr std::string_view kMistral = "[TOOL_CALLS]", kPythonTag = "<|python_tag|>";

std::string_view ltrim(std::string_view s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    return b == std::string_view::npos ? std::string_view() : s.substr(b);
}

// The length of `s` that cannot be the start of `marker` cut off by the end of the text so far.
size_t safe_length(std::string_view s, std::string_view marker) {
    for (size_t at = s.size() > marker.size() ? s.size() - marker.size() : 0; at < s.size(); ++at)
        if (marker.starts_with(s.substr(at))) return at;
    return s.size();
}

// The marker that opens a call in the content, in a syntax that has one.
std::string_view call_marker(ToolCallSyntax syntax) {
    switch (syntax) {
        case ToolCallSyntax::hermes:
        case ToolCallSyntax::qwen3_xml: return kOpen;
        case ToolCallSyntax::mistral:
        case ToolCallSyntax::mistral_list: return kMistral;
        default: return {};
    }
}

}  // namespace

ToolCallStream::ToolCallStream(ToolCallSyntax syntax, std::vector<std::string> tool_names, AnswerSinks sinks)
    : syntax_(syntax),
      tool_names_(std::move(tool_names)),
      sinks_(std::move(sinks)),
      state_(syntax == ToolCallSyntax::llama3_json ? State::start : State::text) {}

void ToolCallStream::emit_text(std::string_view text) {
    if (!text.empty() && sinks_.text) sinks_.text(text);
}

void ToolCallStream::emit_parsed(std::string_view held) {
    const ParsedAnswer parsed = parse_tool_calls(held, syntax_, tool_names_);
    if (parsed.calls.empty()) {
        emit_text(held);
        return;
    }
    for (const ToolCall& call : parsed.calls)
        if (sinks_.call) sinks_.call(call);
    emit_text(parsed.text);
}

void ToolCallStream::push(std::string_view text) {
    pending_.append(text);
    for (;;) {
        if (state_ == State::start) {
            const std::string_view rest = ltrim(pending_);
            if (rest.starts_with("{") || rest.starts_with(kPythonTag)) {
                state_ = State::held_to_end;
            } else if (rest.empty() || kPythonTag.starts_with(rest)) {
                return;  // white space, or part of the tag, so far
            } else {
                state_ = State::text;
            }
        }
        if (state_ == State::held_to_end) return;
        if (state_ == State::block) {
            const size_t close = pending_.find(kClose);
            if (close == std::string::npos) return;
            const std::string_view block = std::string_view(pending_).substr(0, close + kClose.size());
            const ParsedAnswer parsed = parse_tool_calls(block, syntax_, tool_names_);
            if (parsed.calls.size() != 1 || !parsed.text.empty()) emit_text(block);  // not one call: text as it is
            else if (sinks_.call) sinks_.call(parsed.calls[0]);
            pending_.erase(0, block.size());
            state_ = State::text;
            continue;
        }
        const std::string_view marker = call_marker(syntax_);
        const size_t at = marker.empty() ? std::string::npos : pending_.find(marker);
        if (at == std::string::npos) {
            const size_t n = marker.empty() ? pending_.size() : safe_length(pending_, marker);
            emit_text(std::string_view(pending_).substr(0, n));
            pending_.erase(0, n);
            return;
        }
        emit_text(std::string_view(pending_).substr(0, at));
        pending_.erase(0, at);
        state_ = marker == kOpen ? State::block : State::held_to_end;
    }
}

void ToolCallStream::push_call(std::string_view message) {
    const ParsedAnswer parsed = parse_tool_calls(message, ToolCallSyntax::harmony);
    if (parsed.calls.size() == 1 && ltrim(parsed.text).empty()) {
        if (sinks_.call) sinks_.call(parsed.calls[0]);
        return;
    }
    emit_text(harmony_call_text(message));
}

void ToolCallStream::finish() {
    if (state_ == State::held_to_end) emit_parsed(pending_);
    else emit_text(pending_);  // text, an unclosed block, or an answer of white space
    pending_.clear();
    state_ = syntax_ == ToolCallSyntax::llama3_json ? State::start : State::text;
}

AnswerStream::AnswerStream(ReasoningSyntax reasoning, bool opened_think, ToolCallSyntax syntax,
                           const nlohmann::ordered_json& vars, AnswerSinks sinks)
    : syntax_(request_call_syntax(syntax, vars)),
      tool_names_(syntax_ == ToolCallSyntax::none ? std::vector<std::string>() : tool_names(vars.at("tools"))),
      on_reasoning_(std::move(sinks.reasoning)),
      calls_(syntax_, tool_names_, {nullptr, std::move(sinks.text), std::move(sinks.call)}),
      split_(reasoning, opened_think, [this](AnswerPart part, std::string_view text) {
          if (part == AnswerPart::reasoning) {
              answer_.reasoning += text;
              if (on_reasoning_) on_reasoning_(text);
              return;
          }
          answer_.content += text;
          if (part == AnswerPart::call) calls_.push_call(text);
          else calls_.push(text);
      }) {}

void AnswerStream::push(std::string_view text) { split_.push(text); }

void AnswerStream::finish() {
    split_.finish();
    calls_.finish();
}

ParsedAnswer AnswerStream::calls() const {
    if (syntax_ == ToolCallSyntax::none) return ParsedAnswer{answer_.content, {}};
    return parse_tool_calls(answer_.content, syntax_, tool_names_);
}

}  // namespace quill::chat
