// A conversation kept on one KV slot across turns: the messages, the tokens whose K and V are in the slot, and
// the rules for a new turn: render the whole conversation, reuse the longest token prefix already in the cache,
// prefill only the rest, and when the conversation outgrows the context either fail or drop the oldest turns.
#pragma once

#include "engine/chat/chat_format.h"
#include "engine/chat/reasoning.h"
#include "engine/chat/tool_calls.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/generator.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quill::chat {

// The snapshots of a recurrent model's state that a conversation's slot wants (Backend::keep_state): the places
// where the last two prompts' histories end, so that a turn (or a regenerated one) after a reply its template
// renders otherwise (without its reasoning) continues from there instead of from 0.
inline constexpr int64_t kStateSnapshots = 2;

enum class ContextOverflow { error, drop_oldest };
// "error", "drop-oldest"; UsageError otherwise.
ContextOverflow parse_context_overflow(std::string_view name);

struct TurnResult {
    std::string text;                          // the reply's content, its tool calls taken out
    std::string reasoning;                     // its reasoning (ReasoningStream), as given to on_reasoning
    std::vector<ToolCall> calls;               // its tool calls (when the template variables offer tools)
    FinishReason finish = FinishReason::none;
    GenerationStats stats;
    int dropped_messages = 0;                  // removed by drop-oldest before this turn
};

class Conversation {
public:
    // backend, tokenizer and format must outlive the conversation. Uses KV slot `slot` of the backend.
    Conversation(Backend& backend, const Tokenizer& tok, const ChatFormat& format, int64_t n_ctx,
                 GenerationParams params, ContextOverflow overflow, int32_t slot = 0);

    // The system message ("" for none; the template may then add its own default). The error of the template
    // (raise_exception: Gemma's refuse a system message) when it refuses the conversation with it; then the
    // system message stays as it was.
    void set_system(std::string text);
    const std::string& system() const { return system_; }
    // Template variables rendered with every turn (a JSON object: tools, tool_choice, ...), as ChatFormat::render
    // takes them. A "tool_choice" of "required" or a function makes each reply a call in the template's syntax
    // (tool_choice_constraint), unless the parameters' own grammar says otherwise. The template's error, or
    // tool_choice_constraint's naming `what`, and the variables unchanged, when either refuses them.
    void set_template_vars(nlohmann::ordered_json vars, const std::string& what = "the template variables");
    const nlohmann::ordered_json& template_vars() const { return vars_; }

    // Adds a user message and generates the reply, its content streamed through on_text, its reasoning (a
    // reasoning model's, in the template's reasoning_syntax) through on_reasoning and its tool calls (when the
    // template variables offer tools: AnswerStream) through on_call. The reply joins the conversation as
    // assistant_message makes it (the content, and the reasoning in the field the template reads) with its calls
    // in "tool_calls" (history_tool_calls, ids from the turn's seed), also when cut short by cancel (a partial
    // reply stays). Throws UsageError when the conversation does not
    // fit the context (overflow error, or a single message too long), the template's error when it refuses the
    // conversation, quill::Interrupted when cancel is raised while the template renders, and on any failure leaves
    // the conversation as it was: the messages, and the cache bookkeeping true to what the slot holds.
    TurnResult send(std::string user_text, const std::function<void(std::string_view)>& on_text,
                    const std::atomic<bool>* cancel = nullptr);
    // Generates the last reply again (after removing it). UsageError when there is no user or tool message to
    // answer; on a failure the last reply stays.
    TurnResult regenerate(const std::function<void(std::string_view)>& on_text,
                          const std::atomic<bool>* cancel = nullptr);

    // A call of the last reply that has no result yet: the first of its "tool_calls" that no "tool" message after
    // it answers (the n-th tool message answers the n-th call).
    struct OpenCall {
        std::string id, name;
        size_t left = 0;  // calls without a result, this one included
    };
    std::optional<OpenCall> open_call() const;
    // Adds a "tool" message with `result` for open_call() ({"role": "tool", "tool_call_id", "name", "content"}, as
    // the templates read it) and, when that was the last call without a result, generates the reply as send does;
    // else nullopt. UsageError when no call waits for a result; on a failure the conversation as it was.
    std::optional<TurnResult> send_tool_result(std::string result,
                                               const std::function<void(std::string_view)>& on_text,
                                               const std::atomic<bool>* cancel = nullptr);
    // Removes the last exchange (the last user message and the reply after it); false when there is none.
    bool undo();
    // Removes every message but the system message.
    void reset();

    // The messages the template sees: [system], user, assistant, tool, ...
    nlohmann::ordered_json messages() const;
    // Non-system messages.
    const nlohmann::ordered_json& turns() const { return turns_; }
    // Replaces the conversation by a saved one (system message taken from its first message when present; an
    // assistant message keeps its "reasoning_content" and "thinking" strings and its "tool_calls" array, arguments
    // given as a JSON object's text read as the object; a "tool" message keeps "tool_call_id" and "name"). The
    // template's error, and the conversation unchanged, when the template refuses to go on from it (roles that do
    // not alternate).
    void load(const nlohmann::ordered_json& messages);
    // Called before a reply is generated when drop-oldest removed messages to fit it (with how many).
    void on_dropped(std::function<void(int dropped)> notice) { on_dropped_ = std::move(notice); }
    // Where a reply's reasoning streams (null: nowhere; it is kept in the message all the same).
    void on_reasoning(std::function<void(std::string_view)> sink) { on_reasoning_ = std::move(sink); }
    // Where a reply's tool calls go, each once it is parsed (null: to on_text as call_display).
    void on_call(std::function<void(const ToolCall&)> sink) { on_call_ = std::move(sink); }

    // Tokens whose K and V are in the slot (a prefix the next turn may reuse).
    int64_t cached_tokens() const { return static_cast<int64_t>(cached_.size()); }
    int64_t n_ctx() const { return n_ctx_; }
    const GenerationParams& params() const { return params_; }
    // New parameters. The seed sequence starts again: the next reply samples with the seed as given, the one
    // after it with seed + 1, and so on.
    void set_params(GenerationParams params);
    const ChatFormat& format() const { return format_; }
    // What tokenizing `text` would lose ("" for nothing): Tokenizer::describe_loss.
    std::string describe_loss(std::string_view text) const;

private:
    // The first call of the last reply in `turns` without a result (open_call).
    static std::optional<OpenCall> open_call_in(const nlohmann::ordered_json& turns);
    // Throws the template's error when it refuses [system] + turns + a next message: the user's, or the result of
    // a call that waits for one.
    void check_renders(const std::string& system, const nlohmann::ordered_json& turns,
                       const nlohmann::ordered_json& vars) const;
    // Runs `step` (which may change turns_ and throw); on a failure, turns_ as it was before.
    TurnResult keep_on_failure(const std::function<TurnResult()>& step);
    TurnResult respond(const std::function<void(std::string_view)>& on_text, const std::atomic<bool>* cancel);
    // The prompt tokens for the conversation, dropping the oldest turns as the policy allows; counts drops.
    // `text` receives the rendering the tokens stand for; cancel stops the template's render.
    std::vector<int32_t> fit_prompt(int& dropped, std::string& text, const std::atomic<bool>* cancel);
    // The conversation's tokens: the tokens fed so far (replies as sampled, not re-tokenized) and the new text
    // after them, when the rendering still starts with the text they stand for and the new text starts with a
    // special token; else the whole rendering tokenized afresh. `text` receives the rendering.
    std::vector<int32_t> tokenize_conversation(std::string& text, const std::atomic<bool>* cancel) const;
    // Where the generation prompt begins in `prompt` (the tokens of `prompt_text`, the rendering of messages()
    // with it): the tokens of the rendering without it; 0 where the two renderings or the tokens do not agree.
    int64_t history_end(const std::vector<int32_t>& prompt, const std::string& prompt_text,
                        const std::atomic<bool>* cancel) const;
    // The tokens of the system message and turns_[first..] alone (the last user message and what follows it).
    int64_t message_alone_tokens(size_t first, const std::atomic<bool>* cancel) const;

    Backend& backend_;
    const Tokenizer& tok_;
    const ChatFormat& format_;
    int64_t n_ctx_;
    GenerationParams params_;
    ContextOverflow overflow_;
    int32_t slot_;
    std::string system_;
    nlohmann::ordered_json vars_ = nlohmann::ordered_json::object();
    std::shared_ptr<grammar::TokenGrammar> forced_grammar_;  // the call vars_'s tool_choice forces; null: none
    nlohmann::ordered_json turns_ = nlohmann::ordered_json::array();  // user, assistant and tool messages
    std::vector<int32_t> cached_;                       // [n] token at each filled cache position of the slot
    int64_t written_ = 0;  // one past the highest position any turn may have written in the slot (max_rewind)
    std::vector<int32_t> fed_tokens_;  // the last turn's prompt and reply tokens, as the model saw them
    std::string fed_text_;             // the text they stand for (the rendering, then the reply)
    uint64_t turn_index_ = 0;                           // varies the seed from turn to turn
    std::function<void(int)> on_dropped_;
    std::function<void(std::string_view)> on_reasoning_;
    std::function<void(const ToolCall&)> on_call_;
    ReasoningSyntax reasoning_;  // of the format's template
    ToolCallSyntax tool_syntax_;  // of the format's template
    std::vector<int32_t> markers_;  // the format's marker tokens (marker_tokens): printed as their text
};

}  // namespace quill::chat
