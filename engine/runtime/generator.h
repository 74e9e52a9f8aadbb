// One request's generation: sampling, streaming detokenization, stop rules and finish reasons; and the driver
// that runs it on a backend as one batched prefill followed by the per-token decode loop.
#pragma once

#include "engine/runtime/backend.h"
#include "engine/runtime/sampler.h"
#include "tokenizer/tokenizer.h"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

enum class FinishReason {
    none,     // still generating
    stop,     // an end-of-generation token or a stop string
    length,   // the token limit (-n)
    context,  // the context is full; reported as "length"
    interrupted,  // cancelled by the caller (Ctrl-C, SIGTERM, a closed output)
};
std::string_view finish_reason_name(FinishReason r);  // "stop", "length", "interrupted"

// The most guessed tokens a decode step checks (GenerationParams::lookup and draft).
inline constexpr int kMaxLookup = 32;
// The guesses a draft model makes in a sequence's first step when their number adapts (GenerationParams::draft 0).
inline constexpr int kDraftStart = 4;

class Drafter;

struct GenerationParams {
    int max_tokens = -1;  // -1: until an end-of-generation token or a full context
    std::vector<std::string> stop;
    SamplingParams sampling;
    // -1: none; 0..kMaxTopLogprobs: each generated token's log-probability and that many most likely alternatives
    // (Generation::logprobs).
    int logprobs = -1;
    // Prompt lookup (engine/runtime/lookup.h): up to this many guessed tokens checked in each decode step. Greedy,
    // the text is the same as without; sampled, its distribution is (with penalties, a grammar or logprobs, the
    // tokens for a seed are too, and so are the logprobs). 0: off.
    int lookup = 0;
    // A draft model's guesses (engine/runtime/draft.h), checked as lookup's are; null: none. Shared by
    // the requests that use it (its KV slots are the target's).
    std::shared_ptr<Drafter> drafter;
    // Guesses per step with a drafter: this many, or 0: adaptive (kDraftStart first, one more after a step whose
    // guesses were all accepted, one fewer after one that accepted under half of them).
    int draft = 0;
    // The grammar the output must follow (engine/grammar); null: none. Shared by the requests that use it.
    std::shared_ptr<grammar::TokenGrammar> grammar;
    // Control tokens that print their text (control_tokens_with_text: a chat format's markers, chat::marker_tokens),
    // so that the answer's parsers see them; a grammar that may choose them is bound with the same ids.
    std::vector<int32_t> shown_tokens;

    // The sampling values, then max_tokens (-1 or more), logprobs, lookup and draft: UsageError naming the flag (-n,
    // --logprobs, --lookup, --draft), or with request_fields the field of a batch request (max_tokens, top_logprobs),
    // as SamplingParams::validate does.
    void validate(bool request_fields = false) const;
};

// Holds back text that may be the start of a stop string; cuts at the first complete one.
class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops);
    // Adds text; returns what can be printed now. Sets matched() when a stop string completed (the stop string
    // and anything after it are dropped).
    std::string push(std::string_view text);
    // Releases the held-back text (at the end of generation).
    std::string flush();
    bool matched() const { return matched_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool matched_ = false;
};

class Generation {
public:
    // The prompt must be non-empty and shorter than n_ctx (UsageError otherwise).
    Generation(const Tokenizer& tok, std::vector<int32_t> prompt, const GenerationParams& params, int64_t n_ctx);

    const std::vector<int32_t>& prompt() const { return prompt_; }
    const GenerationParams& params() const { return params_; }
    // The sampler that picks the next token from the logits of the last token fed (Backend::forward_sample).
    Sampler& sampler() { return sampler_; }
    const Sampler& sampler() const { return sampler_; }
    // Ids below this are tokens; a model's logits rows may be longer (Backend::forward_sample's n_token_ids).
    int64_t n_token_ids() const;
    // The vocabulary's end-of-generation tokens, sorted: the generation ends at the first it takes.
    std::span<const int32_t> eog_ids() const { return tok_.eog_ids(); }
    // Takes the token the sampler picked; returns the text that became printable.
    std::string advance(int32_t token);

    // Ends the generation with FinishReason::interrupted; returns the text still held back (a possible stop-string
    // start; not the first bytes of a character cut short, which are withheld, as at -n or a full context).
    std::string interrupt();

    bool finished() const { return reason_ != FinishReason::none; }
    FinishReason finish_reason() const { return reason_; }
    int32_t last_token() const { return last_; }
    int n_generated() const { return n_generated_; }
    // The generated tokens (no end-of-generation token). All but the last are in the cache after generate().
    const std::vector<int32_t>& generated() const { return generated_; }
    // With GenerationParams::logprobs: one entry per generated() token.
    const std::vector<TokenLogprobs>& logprobs() const { return logprobs_; }
    // Position at which last_token() goes into the cache.
    int32_t next_pos() const { return static_cast<int32_t>(prompt_.size()) + n_generated_ - 1; }
    uint64_t seed() const { return sampler_.params().seed; }
    // How many guessed tokens the scheduler may check in the next decode step: `wanted`, capped to the tokens still
    // allowed (-n, the context); 0 when it finished.
    int guess_budget(int wanted) const;

private:
    std::string finish(FinishReason reason);

    const Tokenizer& tok_;
    std::vector<int32_t> prompt_;
    GenerationParams params_;
    int64_t n_ctx_;
    Sampler sampler_;
    Detokenizer detok_;
    StopMatcher stop_;
    int32_t last_ = -1;
    int n_generated_ = 0;
    std::vector<int32_t> generated_;
    std::vector<TokenLogprobs> logprobs_;
    FinishReason reason_ = FinishReason::none;
};

struct GenerationStats {
    int prompt_tokens = 0;
    int prefilled_tokens = 0;  // prompt tokens run through the model (those past GenerateOptions::n_past)
    int reused_tokens = 0;     // prompt tokens already in the cache (n_past)
    int completion_tokens = 0;
    int guessed_tokens = 0;   // prompt lookup's or the draft model's guesses checked
    int accepted_tokens = 0;  // and those accepted as the model's next token
    double acceptance_rate() const;  // accepted over guessed; 0 without guesses
    double prefill_ms = 0;  // the prompt's forward passes
    double ttft_ms = 0;     // start to the first token sampled
    double decode_ms = 0;   // from the first token to the last
    double prefill_tokens_per_s() const;
    double decode_tokens_per_s() const;  // tokens after the first, over decode_ms
};

struct GenerateOptions {
    int n_batch = 512;  // prompt tokens per prefill forward pass
    // Prompt tokens already in the slot's cache (positions 0..n_past-1, e.g. an earlier chat turn): prefill starts
    // after them. At most prompt size - 1, so the last prompt token is always run for its logits.
    int32_t n_past = 0;
    // Checked between forward passes; once true the generation ends with FinishReason::interrupted.
    const std::atomic<bool>* cancel = nullptr;
};

// Runs a generation on one KV slot: a Scheduler (engine/runtime/scheduler.h) with this one request, so prefill in
// batches of at most n_batch prompt tokens (only the last asks for logits), then one forward pass per generated
// token. on_text gets each piece of text as soon as it is sampled.
GenerationStats generate(Backend& backend, Generation& gen, int32_t slot,
                         const std::function<void(std::string_view)>& on_text, const GenerateOptions& options = {});

}  // namespace quill
