// A draft model for speculative decoding: a small model with the target's vocabulary guesses each sequence's next few
// tokens, one token a forward pass of its own (cheap), and the scheduler checks them all in one forward pass of the
// target (about the cost of one decode step), keeping them up to the first the target would not have produced
// (engine/runtime/scheduler.h).
//
// The draft keeps its own KV cache, one slot per target slot. What each slot's cache holds is remembered across steps
// and requests and compared with the sequence's tokens each step, so only the tokens it has not run go in: the prompt
// once, then the tokens accepted since the last step; a chat's earlier turns stay cached as the target's do.
#pragma once

#include "engine/runtime/backend.h"
#include "engine/runtime/sampler.h"
#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace quill {

// UsageError naming `draft_name` unless the draft's vocabulary is the target's: as many tokens, the same text for
// each (the first that differs is named).
void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft, std::string_view draft_name);

class Drafter {
public:
    // draft must outlive the Drafter; its KV slots serve the target's slots of the same number. n_batch: tokens per
    // forward pass when a prompt is first run.
    explicit Drafter(Backend& draft, int n_batch = 512);

    struct Request {
        int32_t slot = 0;
        std::span<const int32_t> tokens;  // the sequence so far, positions 0.. (prompt and generated tokens)
        int n_guess = 0;                  // guesses wanted, >= 1
        // Its chain makes the draft's distribution q and its RNG draws from it; null: q is the draft's first maximum
        // (for a sampler whose state would have to follow the guesses: penalties, grammar, logprobs).
        Sampler* sampler = nullptr;
        // The first maximum is taken among the tokens this grammar allows after the sequence and the guesses before
        // it (null: none); guessing stops where it allows none.
        grammar::GrammarMatcher* grammar = nullptr;
        // The vocabulary's end-of-generation tokens, sorted: guessing stops after the first of them it guesses (the
        // sequence ends there if the target takes it, so no later guess could be kept).
        std::span<const int32_t> eog;
    };
    // For each request, up to n_guess tokens, each drawn from q: the sampler's distribution over the draft's logits
    // after the tokens and the guesses before it (greedy or no sampler: the draft's first maximum). Fewer where a
    // guess is an end-of-generation token, the grammar allows none, or the draft's context ends (a guess is drawn
    // from the logits of the position before it). guesses[i][j] is request i's j-th guess and dists[i][j] the q it
    // was drawn from. Only the first n_token_ids logits are tokens.
    void propose(std::span<const Request> requests, int64_t n_token_ids, std::vector<std::vector<int32_t>>& guesses,
                 std::vector<std::vector<TokenDist>>& dists);

    const Backend& backend() const { return draft_; }

private:
    // What a slot's cache holds: tokens[p] is the token whose K and V are at position p; written one past the
    // highest position ever written.
    struct SlotCache {
        std::vector<int32_t> tokens;
        int64_t written = 0;
    };
    void run(const Batch& batch, std::span<float> logits);
    static int32_t allowed_max(grammar::GrammarMatcher& m, grammar::TokenGrammar::State& state, bool first,
                               std::span<const float> row);
    static int32_t draw(const Request& r, bool first, std::span<float> row, grammar::TokenGrammar::State& state,
                        TokenDist& q);

    Backend& draft_;
    int n_batch_;
    std::vector<SlotCache> caches_;  // [slot]
    Batch batch_, chunk_;
    std::vector<float> logits_;     // [rows, n_vocab]
    std::vector<size_t> row_of_;    // [request] its logits row in this round, or SIZE_MAX for none
    std::vector<grammar::TokenGrammar::State> states_;  // [request] its grammar's state after its guesses so far
    std::vector<char> stopped_;  // [request] its grammar allowed no token, or it guessed an end of generation
    std::vector<int> n_guess_;   // [request] its n_guess, capped where the draft's context ends
};

}  // namespace quill
