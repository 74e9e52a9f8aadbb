#include "engine/chat/conversation.h"

#include "engine/chat/answer_stream.h"
#include "engine/chat/markers.h"
#include "engine/chat/template_error.h"
#include "engine/chat/tool_calls.h"
#include "engine/error.h"
#include "engine/grammar/constraint.h"
#include "engine/io/json_input.h"

#include <algorithm>

namespace quill::chat {

ContextOverflow parse_context_overflow(std::string_view name) {
    if (name == "error") return ContextOverflow::error;
    if (name == "drop-oldest") return ContextOverflow::drop_oldest;
    throw UsageError(fmt::format("--context-overflow '{}': expected error or drop-oldest", name));
}

Conversation::Conversation(Backend& backend, const Tokenizer& tok, const ChatFormat& format, int64_t n_ctx,
                           GenerationParams params, ContextOverflow overflow, int32_t slot)
    : backend_(backend),
      tok_(tok),
      format_(format),
      n_ctx_(n_ctx),
      params_(std::move(params)),
      overflow_(overflow),
      slot_(slot),
      reasoning_(reasoning_syntax(format.source())),
      tool_syntax_(tool_call_syntax(format.source())),
      markers_(marker_tokens(tok, tool_syntax_, reasoning_)) {}

void Conversation::set_system(std::string text) {
    check_renders(text, turns_, vars_);
    system_ = std::move(text);
}

void Conversation::set_template_vars(nlohmann::ordered_json vars, const std::string& what) {
    check_renders(system_, turns_, vars);
    std::shared_ptr<grammar::TokenGrammar> forced;
    if (const auto spec = tool_choice_constraint(vars, tool_syntax_, what))
        forced = grammar::token_grammar(*spec, tok_, markers_);
    vars_ = std::move(vars);
    forced_grammar_ = std::move(forced);
}

void Conversation::set_params(GenerationParams params) {
    turn_index_ = 0;
    params_ = std::move(params);
}

std::string Conversation::describe_loss(std::string_view text) const {
    return tok_.describe_loss(text, tok_.encode(text, false, false));
}

std::optional<Conversation::OpenCall> Conversation::open_call_in(const nlohmann::ordered_json& turns) {
    size_t answered = 0;
    for (size_t i = turns.size(); i-- > 0;) {
        const auto& m = turns[i];
        const std::string role = m.value("role", "");
        if (role == "tool") {
            ++answered;
            continue;
        }
        if (role != "assistant" || !m.contains("tool_calls") || !m["tool_calls"].is_array()) return std::nullopt;
        const auto& calls = m["tool_calls"];
        if (answered >= calls.size()) return std::nullopt;
        const auto& call = calls[answered];
        OpenCall open;
        open.left = calls.size() - answered;
        open.id = string_member(call, "id");
        if (call.is_object() && call.contains("function")) open.name = string_member(call["function"], "name");
        return open;
    }
    return std::nullopt;
}

void Conversation::check_renders(const std::string& system, const nlohmann::ordered_json& turns,
                                 const nlohmann::ordered_json& vars) const {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    if (!system.empty()) all.push_back({{"role", "system"}, {"content", system}});
    for (const auto& m : turns) all.push_back(m);
    // The next message: a call's result while one waits for it, else the user's.
    if (const auto open = open_call_in(turns))
        all.push_back({{"role", "tool"}, {"tool_call_id", open->id}, {"name", open->name}, {"content", "Hello"}});
    else
        all.push_back({{"role", "user"}, {"content", "Hello"}});
    format_.render(all, true, nullptr, vars);
}

nlohmann::ordered_json Conversation::messages() const {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    if (!system_.empty()) all.push_back({{"role", "system"}, {"content", system_}});
    for (const auto& m : turns_) all.push_back(m);
    return all;
}

namespace {

// A saved message's "tool_calls" as the conversation keeps them: each function's "arguments" given as a JSON
// object's text (OpenAI's shape) becomes the object; anything else stays as it is, for the template to judge.
nlohmann::ordered_json kept_tool_calls(nlohmann::ordered_json calls) {
    for (auto& call : calls) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        auto& fn = call["function"];
        if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
        try {
            auto args = parse_untrusted_ordered_json(fn["arguments"].get<std::string>(), "tool call arguments");
            if (args.is_object()) fn["arguments"] = std::move(args);
        } catch (const Error&) {
        }
    }
    return calls;
}

}  // namespace

void Conversation::load(const nlohmann::ordered_json& messages) {
    std::string system;
    nlohmann::ordered_json turns = nlohmann::ordered_json::array();
    for (const auto& m : messages) {
        // (parse_messages checked the role is a string; a null content, as a message of tool calls has, is "")
        const std::string role = m.value("role", "");
        const auto content = m.find("content");
        const std::string text = content != m.end() && content->is_string() ? content->get<std::string>() : "";
        if (role == "system" && turns.empty() && system.empty()) {
            system = text;
            continue;
        }
        nlohmann::ordered_json turn{{"role", role}};
        for (const char* field : {"tool_call_id", "name"})
            if (role == "tool" && m.contains(field) && m[field].is_string()) turn[field] = m[field];
        turn["content"] = text;
        for (const char* field : {"reasoning_content", "thinking"})
            if (role == "assistant" && m.contains(field) && m[field].is_string()) turn[field] = m[field];
        if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty())
            turn["tool_calls"] = kept_tool_calls(m["tool_calls"]);
        turns.push_back(std::move(turn));
    }
    check_renders(system, turns, vars_);
    system_ = std::move(system);
    turns_ = std::move(turns);
}

void Conversation::reset() { turns_ = nlohmann::ordered_json::array(); }

bool Conversation::undo() {
    // The last user message and whatever follows it.
    for (size_t i = turns_.size(); i-- > 0;) {
        if (turns_[i].value("role", "") == "user") {
            turns_.erase(turns_.begin() + static_cast<std::ptrdiff_t>(i), turns_.end());
            return true;
        }
    }
    return false;
}

std::vector<int32_t> Conversation::tokenize_conversation(std::string& text, const std::atomic<bool>* cancel) const {
    RenderedChat r = format_.render(messages(), true, cancel, vars_);
    text = r.text;
    const size_t n = fed_text_.size();
    if (n > 0 && r.text.size() > n && r.text.compare(0, n, fed_text_) == 0) {
        // The new part must begin with a special token, so tokenizing it apart cannot change a merge across the
        // boundary (an end-of-turn token follows a reply in chatml, llama3, gemma, phi3 and most templates).
        const std::string_view rest = std::string_view(r.text).substr(n);
        std::vector<Tokenizer::TextSpan> literal;
        for (const auto& span : r.literal)
            if (span.begin >= n) literal.push_back({span.begin - n, span.size});
        std::vector<int32_t> tail = tok_.encode_with_literals(rest, false, literal, cancel);
        if (!tail.empty() && tok_.is_control(tail[0]) && rest.starts_with(tok_.piece(tail[0]))) {
            std::vector<int32_t> all = fed_tokens_;
            all.insert(all.end(), tail.begin(), tail.end());
            return all;
        }
    }
    return format_.tokenize(tok_, messages(), true, cancel, vars_);
}

int64_t Conversation::history_end(const std::vector<int32_t>& prompt, const std::string& prompt_text,
                                  const std::atomic<bool>* cancel) const {
    std::string history;
    try {
        history = format_.render(messages(), false, cancel, vars_).text;
    } catch (const TemplateRaised&) {  // (a template may refuse a conversation that ends with a user message)
        return 0;
    }
    if (history.size() >= prompt_text.size() || prompt_text.compare(0, history.size(), history) != 0) return 0;
    // (the generation prompt comes from the template alone: none of its bytes are a message's)
    const std::vector<int32_t> tail = tok_.encode_with_literals(std::string_view(prompt_text).substr(history.size()),
                                                                false, {}, cancel);
    if (tail.empty() || tail.size() >= prompt.size() || !std::equal(tail.rbegin(), tail.rend(), prompt.rbegin()))
        return 0;
    return static_cast<int64_t>(prompt.size() - tail.size());
}

int64_t Conversation::message_alone_tokens(size_t first, const std::atomic<bool>* cancel) const {
    nlohmann::ordered_json alone = nlohmann::ordered_json::array();
    if (!system_.empty()) alone.push_back({{"role", "system"}, {"content", system_}});
    for (size_t i = first; i < turns_.size(); ++i) alone.push_back(turns_[i]);
    return static_cast<int64_t>(format_.tokenize(tok_, alone, true, cancel, vars_).size());
}

std::vector<int32_t> Conversation::fit_prompt(int& dropped, std::string& text, const std::atomic<bool>* cancel) {
    // Room kept for the reply: the token limit when there is one, else an eighth of the context.
    const int64_t reserve = params_.max_tokens > 0 ? std::min<int64_t>(params_.max_tokens, n_ctx_ / 2)
                                                   : std::max<int64_t>(1, n_ctx_ / 8);
    for (;;) {
        std::vector<int32_t> tokens = tokenize_conversation(text, cancel);
        const auto n = static_cast<int64_t>(tokens.size());
        if (n + reserve <= n_ctx_) return tokens;
        // Turns that may go: everything before the last user message.
        size_t last_user = turns_.size();
        for (size_t i = turns_.size(); i-- > 0;)
            if (turns_[i].value("role", "") == "user") {
                last_user = i;
                break;
            }
        // The message alone too long: neither /undo, /reset nor drop-oldest can make it fit.
        auto too_long = [&](int64_t n_alone) {
            return UsageError(fmt::format("the message is {} tokens in the chat template, longer than the context "
                                          "of {}: shorten it or give a larger -c",
                                          n_alone, n_ctx_));
        };
        if (overflow_ == ContextOverflow::error || last_user == 0 || last_user == turns_.size()) {
            if (n < n_ctx_ && (overflow_ == ContextOverflow::drop_oldest || last_user == 0))
                return tokens;  // nothing left to drop: go on with less room for the reply
            if (last_user == 0 || last_user == turns_.size()) throw too_long(n);
            const int64_t n_alone = message_alone_tokens(last_user, cancel);
            if (n_alone >= n_ctx_) throw too_long(n_alone);
            throw UsageError(fmt::format("the conversation is {} tokens and the context {} (with {} kept for the "
                                         "reply); /undo, /reset, a larger -c or --context-overflow drop-oldest",
                                         n, n_ctx_, reserve));
        }
        // Drop the oldest exchange: the first message and everything up to the next user message.
        size_t end = 1;
        while (end < last_user && turns_[end].value("role", "") != "user") ++end;
        dropped += static_cast<int>(end);
        turns_.erase(turns_.begin(), turns_.begin() + static_cast<std::ptrdiff_t>(end));
    }
}

TurnResult Conversation::respond(const std::function<void(std::string_view)>& on_text,
                                 const std::atomic<bool>* cancel) {
    TurnResult result;
    std::string prompt_text;  // the rendering the prompt stands for
    const std::vector<int32_t> prompt = fit_prompt(result.dropped_messages, prompt_text, cancel);
    if (result.dropped_messages > 0 && on_dropped_) on_dropped_(result.dropped_messages);
    // The longest prefix already in the cache (sliding-window rings permitting; a recurrent model's where its state
    // stands or a snapshot of it does).
    const size_t n_past = backend_.reusable_prefix(cached_, written_, prompt, slot_);
    // A recurrent model keeps its state where the generation prompt begins: the next turn's rendering continues the
    // history there, but maybe not after the reply (a reasoning template drops an earlier reply's reasoning).
    if (backend_.max_rewind() == 0)
        if (const int64_t at = history_end(prompt, prompt_text, cancel); at > static_cast<int64_t>(n_past))
            backend_.keep_state(slot_, at);

    GenerationParams gp = params_;
    gp.sampling.seed = params_.sampling.seed + turn_index_++;
    if (!gp.grammar) gp.grammar = forced_grammar_;
    gp.shown_tokens = markers_;
    Generation gen(tok_, prompt, gp, n_ctx_);
    GenerateOptions opts;
    opts.n_past = static_cast<int32_t>(n_past);
    opts.cancel = cancel;
    cached_.resize(n_past);  // what stays valid if the backend fails midway
    std::string raw;  // the reply as sampled, reasoning and markers included
    AnswerSinks sinks{on_reasoning_, on_text, on_call_};
    if (!sinks.call) sinks.call = [&](const ToolCall& call) { on_text(call_display(call)); };
    AnswerStream split(reasoning_, prompt_opens_think(tok_, prompt), tool_syntax_, vars_, std::move(sinks));
    auto collect = [&](std::string_view piece) {
        raw += piece;
        split.push(piece);
    };
    // What the slot may now hold: the prompt and every generated token (an upper bound, also when interrupted).
    auto note_written = [&] {
        written_ = std::max(written_, static_cast<int64_t>(prompt.size() + gen.generated().size()));
    };
    try {
        result.stats = generate(backend_, gen, slot_, collect, opts);
    } catch (...) {
        note_written();
        throw;
    }
    note_written();
    split.finish();
    ParsedAnswer answer = split.calls();
    result.text = std::move(answer.text);
    result.reasoning = split.answer().reasoning;
    result.calls = std::move(answer.calls);
    result.finish = gen.finish_reason();
    // The slot now holds the prompt and every generated token but the last one sampled (which was not fed back),
    // all of them when generation ended on an end-of-generation token (not in generated(): the last generated one
    // was fed to sample it), so that a recurrent model, which keeps a prefix only where its state stands, keeps it.
    cached_ = prompt;
    const auto& generated = gen.generated();
    const bool eog = tok_.is_eog(gen.last_token());
    if (result.finish == FinishReason::interrupted && generated.empty())
        cached_.resize(n_past);  // cut during the prefill: only the reused prefix is known to be there
    else if (!generated.empty())
        cached_.insert(cached_.end(), generated.begin(), generated.end() - (eog ? 0 : 1));
    // A recurrent state (max_rewind 0) stands exactly after the tokens fed, where the next turn may continue it.
    if (backend_.max_rewind() == 0 && result.finish != FinishReason::interrupted)
        written_ = static_cast<int64_t>(cached_.size());
    nlohmann::ordered_json reply = assistant_message({result.reasoning, result.text}, reasoning_);
    if (!result.calls.empty()) reply["tool_calls"] = history_tool_calls(result.calls, tool_syntax_, gp.sampling.seed);
    turns_.push_back(std::move(reply));
    // Remember the tokens as sampled, when they spell exactly the reply as printed (no stop string cut, no
    // incomplete character at an interrupt), so the next turn keeps them instead of re-tokenizing the text.
    Detokenizer detok(tok_, false, markers_);
    std::string spelled;
    for (int32_t t : generated) spelled += detok.push(t);
    spelled += detok.finish();
    if (spelled == raw) {
        fed_tokens_ = prompt;
        fed_tokens_.insert(fed_tokens_.end(), generated.begin(), generated.end());
        fed_text_ = prompt_text + raw;
    } else {
        fed_tokens_.clear();
        fed_text_.clear();
    }
    return result;
}

TurnResult Conversation::keep_on_failure(const std::function<TurnResult()>& step) {
    // On a failure the messages as they were; cached_ and written_ are kept true to the slot by respond.
    nlohmann::ordered_json before = turns_;
    try {
        return step();
    } catch (...) {
        turns_ = std::move(before);
        throw;
    }
}

TurnResult Conversation::send(std::string user_text, const std::function<void(std::string_view)>& on_text,
                              const std::atomic<bool>* cancel) {
    return keep_on_failure([&] {
        turns_.push_back({{"role", "user"}, {"content", std::move(user_text)}});
        return respond(on_text, cancel);
    });
}

TurnResult Conversation::regenerate(const std::function<void(std::string_view)>& on_text,
                                    const std::atomic<bool>* cancel) {
    return keep_on_failure([&] {
        if (!turns_.empty() && turns_.back().value("role", "") == "assistant") turns_.erase(turns_.end() - 1);
        const std::string role = turns_.empty() ? "" : turns_.back().value("role", "");
        if (role != "user" && role != "tool") throw UsageError("nothing to regenerate: send a message first");
        return respond(on_text, cancel);
    });
}

std::optional<Conversation::OpenCall> Conversation::open_call() const { return open_call_in(turns_); }

std::optional<TurnResult> Conversation::send_tool_result(std::string result,
                                                         const std::function<void(std::string_view)>& on_text,
                                                         const std::atomic<bool>* cancel) {
    const std::optional<OpenCall> open = open_call();
    if (!open) throw UsageError("no tool call waits for a result: the last reply made none, or all have one");
    nlohmann::ordered_json message{{"role", "tool"}, {"tool_call_id", open->id}, {"name", open->name},
                                   {"content", std::move(result)}};
    if (open->left > 1) {  // the reply waits for the other results
        turns_.push_back(std::move(message));
        return std::nullopt;
    }
    return keep_on_failure([&] {
        turns_.push_back(std::move(message));
        return respond(on_text, cancel);
    });
}

}  // namespace quill::chat
