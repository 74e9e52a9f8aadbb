#include "engine/chat/reasoning.h"

#include "engine/chat/tool_calls.h"

#include <algorithm>
#include <array>

namespace quill::chat {

namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>";
constexpr std::string_view kEnd = "<|end|>", kReturn = "<|return|>", kCall = "<|call|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kSpace = " \t\r\n";
constexpr size_t kMaxHeader = 256;
constexpr int kPromptLookback = 16;

// What a harmony header may begin with.
constexpr std::array<std::string_view, 5> kHeaderStarts = {kChannel, kStart, kConstrain, " to=", "to="};
// What ends a harmony message's body.
constexpr std::array<std::string_view, 4> kBodyEnds = {kEnd, kReturn, kCall, kStart};

std::string_view ltrim(std::string_view s) {
    const size_t b = s.find_first_not_of(kSpace);
    return b == std::string_view::npos ? std::string_view() : s.substr(b);
}

// The length of `s` that cannot be the start of one of `markers` cut off by the end of the text so far.
template <size_t N>
size_t safe_length(std::string_view s, const std::array<std::string_view, N>& markers) {
    for (size_t at = s.size() > 16 ? s.size() - 16 : 0; at < s.size(); ++at) {
        const std::string_view tail = s.substr(at);
        for (std::string_view m : markers)
            if (m.size() > tail.size() && m.starts_with(tail)) return at;
    }
    return s.size();
}

// The earliest of `markers` in `s`: its position and which; npos when none.
template <size_t N>
std::pair<size_t, std::string_view> find_first(std::string_view s, const std::array<std::string_view, N>& markers) {
    std::pair<size_t, std::string_view> best{std::string_view::npos, {}};
    for (std::string_view m : markers) {
        const size_t at = s.find(m);
        if (at < best.first) best = {at, m};
    }
    return best;
}

}  // namespace

ReasoningSyntax reasoning_syntax(std::string_view source) {
    if (tool_call_syntax(source) == ToolCallSyntax::harmony) return ReasoningSyntax::harmony;
    if (source.find(kThinkClose) != std::string_view::npos) return ReasoningSyntax::think;
    return ReasoningSyntax::none;
}

bool prompt_opens_think(const Tokenizer& tok, std::span<const int32_t> prompt) {
    const size_t n = std::min<size_t>(prompt.size(), kPromptLookback);
    for (size_t i = prompt.size(); i-- > prompt.size() - n;) {
        const int32_t id = prompt[i];
        if (id < 0 || id >= tok.n_vocab()) continue;
        const std::string_view piece = tok.piece(id);
        if (piece == kThinkOpen) return true;
        if (piece == kThinkClose) return false;
    }
    return false;
}

std::string_view reasoning_field(ReasoningSyntax syntax) {
    return syntax == ReasoningSyntax::harmony ? "thinking" : "reasoning_content";
}

ReasoningStream::ReasoningStream(ReasoningSyntax syntax, bool opened_think, Sink sink)
    : syntax_(syntax), sink_(std::move(sink)) {
    switch (syntax) {
        case ReasoningSyntax::none: state_ = State::content; break;
        case ReasoningSyntax::think: state_ = opened_think ? State::reasoning : State::start; break;
        case ReasoningSyntax::harmony: state_ = State::header; break;
    }
}

void ReasoningStream::push(std::string_view text) {
    pending_.append(text);
    run(false);
}

void ReasoningStream::finish() {
    run(true);
    if (state_ == State::reasoning || (state_ == State::body && body_ == AnswerPart::reasoning)) end_reasoning();
    if (state_ == State::body && body_ == AnswerPart::call && !call_.empty()) emit(AnswerPart::call, call_);
    call_.clear();
    pending_.clear();
}

void ReasoningStream::emit(AnswerPart part, std::string_view text) {
    if (part == AnswerPart::content) {
        if (trim_content_ && !content_started_) text = ltrim(text);
        if (text.empty()) return;
        content_started_ = true;
        sink_(part, text);
        return;
    }
    if (part == AnswerPart::call) {
        content_started_ = true;
        sink_(part, text);
        return;
    }
    // Reasoning: leading white space of a block dropped, trailing held back until more text shows it is inside.
    if (!in_block_) {
        text = ltrim(text);
        if (text.empty()) return;
        if (had_reasoning_) sink_(AnswerPart::reasoning, "\n");
        in_block_ = true;
    }
    const size_t last = text.find_last_not_of(kSpace);
    if (last == std::string_view::npos) {
        space_.append(text);
        return;
    }
    if (!space_.empty()) sink_(AnswerPart::reasoning, space_);
    sink_(AnswerPart::reasoning, text.substr(0, last + 1));
    space_.assign(text.substr(last + 1));
    had_reasoning_ = true;
}

void ReasoningStream::end_reasoning() {
    space_.clear();
    if (in_block_) trim_content_ = true;
    in_block_ = false;
}

void ReasoningStream::run(bool final) {
    if (syntax_ == ReasoningSyntax::think) run_think(final);
    else if (syntax_ == ReasoningSyntax::harmony) run_harmony(final);
    if (state_ == State::content && !pending_.empty()) {
        emit(AnswerPart::content, pending_);
        pending_.clear();
    }
}

void ReasoningStream::run_think(bool final) {
    if (state_ == State::start) {
        const std::string_view rest = ltrim(pending_);
        if (rest.starts_with(kThinkOpen)) {
            pending_.erase(0, pending_.size() - rest.size() + kThinkOpen.size());
            state_ = State::reasoning;
            trim_content_ = true;  // even an empty block is taken out with the white space after it
        } else if (!final && kThinkOpen.starts_with(rest)) {
            return;  // white space, or part of "<think>", so far
        } else {
            state_ = State::content;
            return;
        }
    }
    if (state_ != State::reasoning) return;
    const size_t close = pending_.find(kThinkClose);
    if (close != std::string::npos) {
        emit(AnswerPart::reasoning, std::string_view(pending_).substr(0, close));
        end_reasoning();
        trim_content_ = true;
        pending_.erase(0, close + kThinkClose.size());
        state_ = State::content;
        return;
    }
    const size_t n = final ? pending_.size() : safe_length(pending_, std::array{kThinkClose});
    emit(AnswerPart::reasoning, std::string_view(pending_).substr(0, n));
    pending_.erase(0, n);
}

void ReasoningStream::open_body(std::string_view header) {
    if (header.find("to=") != std::string_view::npos) {
        body_ = AnswerPart::call;
        call_.assign(header);
        call_.append(kMessage);
        return;
    }
    const size_t channel = header.find(kChannel);
    std::string_view name = channel == std::string_view::npos ? std::string_view() : header.substr(channel + kChannel.size());
    name = name.substr(0, name.find_first_of(" <"));
    body_ = name == "analysis" ? AnswerPart::reasoning : AnswerPart::content;
}

void ReasoningStream::run_harmony(bool final) {
    while (!pending_.empty() && state_ != State::content) {
        const std::string_view p = pending_;
        if (state_ == State::header) {
            const bool header = std::any_of(kHeaderStarts.begin(), kHeaderStarts.end(),
                                            [&](std::string_view m) { return p.starts_with(m); });
            if (!header) {
                const bool partial = std::any_of(kHeaderStarts.begin(), kHeaderStarts.end(),
                                                 [&](std::string_view m) { return m.starts_with(p); });
                if (partial && !final) return;
                state_ = State::content;  // not harmony: the rest is the answer as it is
                return;
            }
            const size_t message = p.substr(0, kMaxHeader + kMessage.size()).find(kMessage);
            if (message == std::string_view::npos) {
                if (p.size() < kMaxHeader + kMessage.size() && !final) return;
                if (final && p.size() < kMaxHeader + kMessage.size()) {
                    pending_.clear();  // a header cut off by the end of the answer says nothing
                    return;
                }
                state_ = State::content;
                return;
            }
            open_body(p.substr(0, message));
            pending_.erase(0, message + kMessage.size());
            state_ = State::body;
            continue;
        }
        // A body: up to the marker that ends it, held back where one may be starting.
        const auto [at, marker] = find_first(p, kBodyEnds);
        const size_t n = at != std::string_view::npos ? at : final ? p.size() : safe_length(p, kBodyEnds);
        if (body_ == AnswerPart::call) call_.append(p.substr(0, n));
        else emit(body_, p.substr(0, n));
        if (at == std::string_view::npos) {
            pending_.erase(0, n);
            return;
        }
        if (body_ == AnswerPart::call) {
            if (marker != kStart) call_.append(marker);
            emit(AnswerPart::call, call_);
            call_.clear();
        }
        if (body_ == AnswerPart::reasoning) end_reasoning();
        pending_.erase(0, marker == kStart ? at : at + marker.size());
        state_ = State::header;
    }
}

std::string harmony_call_text(std::string_view call) {
    constexpr std::array<std::string_view, 7> kMarkers = {kStart, kChannel, kMessage, kEnd, kReturn, kCall, kConstrain};
    std::string text;
    for (size_t i = 0; i < call.size();) {
        const auto m = std::find_if(kMarkers.begin(), kMarkers.end(),
                                    [&](std::string_view m) { return call.substr(i).starts_with(m); });
        if (m == kMarkers.end()) {
            text += call[i++];
        } else {
            text += ' ';
            i += m->size();
        }
    }
    return text;
}

SplitAnswer split_reasoning(std::string_view answer, ReasoningSyntax syntax, bool opened_think) {
    SplitAnswer out;
    ReasoningStream stream(syntax, opened_think, [&](AnswerPart part, std::string_view text) {
        (part == AnswerPart::reasoning ? out.reasoning : out.content).append(text);
    });
    stream.push(answer);
    stream.finish();
    return out;
}

nlohmann::ordered_json assistant_message(const SplitAnswer& answer, ReasoningSyntax syntax) {
    nlohmann::ordered_json m{{"role", "assistant"}, {"content", answer.content}};
    if (!answer.reasoning.empty()) m[std::string(reasoning_field(syntax))] = answer.reasoning;
    return m;
}

}  // namespace quill::chat
