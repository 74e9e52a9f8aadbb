// The sampling chain: a grammar's mask (when constrained), penalties, then top-k, top-p, min-p, temperature and a
// draw from a seeded RNG.
// Greedy (argmax) when temperature <= 0. The same seed, parameters and logits give the same tokens everywhere:
// the RNG and its conversion to [0, 1) are quill's own, not the standard library's unspecified distributions.
#pragma once

#include "engine/rng.h"
#include "engine/grammar/token_mask.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace quill {

struct SamplingParams {
    float temperature = 0.8f;      // <= 0: greedy
    int top_k = 40;                // 0: all tokens
    float top_p = 0.95f;           // 1: off
    float min_p = 0.05f;           // 0: off
    float repeat_penalty = 1.0f;   // 1: off; > 1 discourages tokens in the last repeat_last_n
    int repeat_last_n = 64;        // window of the penalties (0: off, -1: whole history)
    float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
    float presence_penalty = 0.0f;   // subtracted once if present in the window
    // OpenAI's logit_bias: (token id, bias) added to the token's logit after a grammar's mask, before the penalties;
    // a bias of -100 or less bans the token (-inf). Ids are checked against the vocabulary by the caller.
    std::vector<std::pair<int32_t, float>> logit_bias;
    uint64_t seed = 0;

    // Throws UsageError naming the flag that is out of range, or with request_fields the field of a batch request
    // that sets it (temperature, top_k, top_p, min_p, the penalties, logit_bias).
    void validate(bool request_fields = false) const;
};

// The index of the first maximum of x: std::max_element's answer for finite values (NaN never wins; 0 when no value
// is a number). What greedy sampling picks.
size_t first_max(std::span<const float> x);

// A token and its logit, one of a row's largest (Sampler::sample_top).
struct SampleCandidate {
    int32_t id;
    float logit;
};

// A sampled token's log-probability and the row's most likely tokens, of the model's own distribution: the
// softmax of the raw logits, before penalties, temperature and truncation (what OpenAI's logprobs report), in
// double precision.
struct TokenLogprobs {
    int32_t token = -1;
    double logprob = 0;
    std::vector<std::pair<int32_t, double>> top;  // the top_n most likely, descending (ties: the lower id first)
};

// A distribution over a few tokens, ids ascending: what a sampler draws from once its chain has run
// (Sampler::distribution), or a guess's proposal in speculative decoding.
struct TokenDist {
    std::vector<int32_t> ids;   // ascending
    std::vector<double> probs;  // [ids.size()], summing to 1
    double prob(int32_t id) const;  // 0 for an id not in it
    void point(int32_t id);         // all the mass on one token
};

// What Sampler::check_guess decided: the guess, or the token drawn in its place.
struct GuessVerdict {
    bool accepted = false;
    int32_t token = -1;
};

// The most top alternatives a sampler reports per token (OpenAI's top_logprobs range).
inline constexpr int kMaxTopLogprobs = 20;

class Sampler {
public:
    explicit Sampler(const SamplingParams& params);

    // Picks the next token from logits [n_vocab] (modified in place by the penalties).
    int32_t sample(std::span<float> logits);
    // From now on each sample() also records the picked token's log-probability and the top_n (0..kMaxTopLogprobs)
    // most likely tokens (last_logprobs). It needs the whole row: plain_greedy() and top_needed() say so.
    void set_logprobs(int top_n);
    bool logprobs_on() const { return logprobs_top_ >= 0; }
    // What the last sample() recorded (with set_logprobs).
    const TokenLogprobs& last_logprobs() const { return last_logprobs_; }
    // Records a token (prompt or generated) for the penalties.
    void accept(int32_t token);

    // Restricts sample() to the tokens grammar `g` allows from the start of the output: the mask comes first, so
    // the penalties, top-k, top-p, min-p and temperature act on the allowed tokens only. sample() throws
    // quill::Error when the grammar allows no token of the vocabulary. With overlap, the mask of the state after
    // each accepted token is computed on a thread of this sampler's own (grammar::GrammarMatcher) while the caller
    // runs the forward pass; the tokens are the same without.
    void constrain(std::shared_ptr<grammar::TokenGrammar> g, bool overlap = true);
    bool constrained() const { return grammar_ != nullptr; }
    // The grammar's matcher (null without one): a draft model follows its masks along its guesses.
    grammar::GrammarMatcher* grammar_matcher() { return grammar_.get(); }
    // Moves the grammar past a sampled token (nothing without a grammar).
    void accept_output(int32_t token);
    // The grammar's text is complete and nothing can follow (false without a grammar).
    bool grammar_finished() const { return grammar_ && grammar_->finished(); }

    const SamplingParams& params() const { return params_; }
    // Whether sample() is the logits' first maximum: greedy with no penalty, logit bias or grammar in effect (what a
    // device can pick without the history or the RNG).
    bool plain_greedy() const;

    // No penalty, grammar or logprobs in effect: nothing in the sampler moves with each token, so speculative
    // decoding may check guesses by rejection sampling on distribution(). A sampler with state checks them by
    // sample() of each row in turn (engine/runtime/scheduler.h). Greedy or not.
    bool stateless() const;
    // The distribution sample() draws from for this row (changed in place as sample() changes it): the tokens the
    // chain keeps and their probabilities after temperature; all the mass on the first maximum when greedy. No draw.
    void distribution(std::span<float> logits, TokenDist& out);
    // A draw from d with this sampler's RNG (none for a one-token distribution).
    int32_t draw(const TokenDist& d);
    // Speculative rejection sampling: `guess` was drawn from q (a point mass for a prompt lookup guess); the model's
    // distribution is p. Accepted with probability min(1, p(guess) / q(guess)); otherwise a token drawn from
    // max(0, p - q), normalized. The token that results is distributed as p exactly.
    GuessVerdict check_guess(const TokenDist& p, const TokenDist& q, int32_t guess);

    // How many of a row's largest logits (ties: the lower id first) sample_top needs to pick what sample() picks:
    // top-k (1 for greedy) plus every token of the penalty window, whose logits the penalties can only lower here
    // (so a token outside that many cannot enter the top-k); 0 when no such bound holds (top-k off, penalties
    // that can raise a logit, a logit bias, or a grammar). What a device selects so that only those candidates, not the row, come back.
    int top_needed() const;
    // sample() of a row from its top_needed() largest logits (any order, ids ascending among equal logits): the
    // same token, and the same draw from the RNG.
    int32_t sample_top(std::span<const SampleCandidate> top);

private:
    int32_t pick(std::span<float> logits);
    void apply_penalties(std::span<float> logits) const;
    void apply_bias(std::span<float> logits) const;
    void apply_mask(std::span<float> logits);
    bool penalties_on() const;
    float penalized(float logit, int count) const;
    // Top-k of the row (after the mask and penalties) into cand_, sorted (logit descending, ids ascending among
    // equals).
    void select_top_k(std::span<const float> logits);
    // The chain after top-k: top-p, min-p and temperature leave cand_ and their probabilities in probs_.
    void truncate();
    // truncate(), then one draw.
    int32_t finish();

    using Candidate = SampleCandidate;
    SamplingParams params_;
    Rng rng_;
    std::deque<int32_t> history_;             // the penalty window, oldest first
    std::unordered_map<int32_t, int> counts_;  // occurrences in the window
    std::vector<Candidate> cand_;
    std::vector<float> probs_;
    TokenDist residual_;  // check_guess's max(0, p - q)
    int logprobs_top_ = -1;  // -1: no logprobs
    TokenLogprobs last_logprobs_;
    std::vector<int32_t> order_;  // logprobs' top-n selection
    std::vector<float> raw_;      // the row before the penalties, when they are on
    std::unique_ptr<grammar::GrammarMatcher> grammar_;  // null: unconstrained
};

}  // namespace quill
