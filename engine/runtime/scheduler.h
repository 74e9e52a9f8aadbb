// Continuous batching: a pool of KV slots, a queue of requests, and a step() that runs ONE Backend::forward over
// one decode token of every running sequence plus prefill chunks of waiting ones, samples each sequence's next
// token and streams its text. A finished sequence frees its slot, and the next step gives it to the next request.
//
// run is a scheduler with one request, chat one with a pinned slot and cached prefix (n_past), batch many.
//
// Prompt lookup (GenerationParams::lookup): a sequence's decode token goes in with the tokens that followed an
// earlier occurrence of its last tokens (engine/runtime/lookup.h), each at the next position and asking for logits.
// Row i's pick is the model's next token after the tokens up to row i; while it equals the guess that row i + 1
// holds, row i + 1 is the sequence's next step too, so one forward pass yields several tokens (greedy; sampled, see
// below). Every row's logits are
// those of a one-token decode step (a token's arithmetic never depends on its batch), so the text is the same as
// without lookup. Rejected guesses leave K and V past the sequence's position, which the next step overwrites before
// any token attends to them (a sliding-window layer's ring holds more positions than its window plus kMaxLookup).
//
// A draft model (GenerationParams::drafter) guesses instead, before the batch is built: its rounds give each
// sequence's guesses (engine/runtime/draft.h), which go into the batch as lookup's do. With a sampler that is not
// greedy, the guesses are checked by speculative rejection sampling (Sampler::check_guess) on the rows' logits in
// host memory: row i's distribution p against the draft's q for the guess row i + 1 holds (a point mass for a lookup
// guess); a rejection draws the row's token from max(0, p - q) and ends the sequence's step, and after all were
// accepted the last row gives one more token from its p. Each token is then distributed as plain sampling gives it.
// A sampler with state (penalties, a grammar, logprobs: Sampler::stateless) instead samples each row in turn on the
// host, after the tokens before it moved its state, and a guess counts while it equals the pick before it: the
// tokens, the logprobs and the RNG's draws are those of plain decoding, guess or not.
#pragma once

#include "engine/runtime/backend.h"
#include "engine/runtime/draft.h"
#include "engine/runtime/generator.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>
#include <vector>

namespace quill {

struct SchedulerOptions {
    // Tokens per forward pass. Decode tokens (one per running sequence) always go in; prefill chunks fill what is
    // left, so a long prompt never stalls the sequences that are decoding (it is split over several steps).
    int n_batch = 512;
};

// What a step did, for progress reports.
struct StepStats {
    int prefill_tokens = 0;  // prompt tokens run through the model
    int decode_tokens = 0;   // tokens sampled (including a final end-of-generation token)
};

class Scheduler {
public:
    using TextFn = std::function<void(int64_t id, std::string_view text)>;
    using FinishFn = std::function<void(int64_t id, const GenerationStats& stats)>;

    // on_text gets each request's text as soon as it is sampled; on_finish is called once per request when it
    // ends (its Generation says why), after its last on_text. Both may submit new requests.
    Scheduler(Backend& backend, const SchedulerOptions& options, TextFn on_text, FinishFn on_finish);

    // Queues a request. `gen` must stay alive until on_finish(id). slot: -1 for any free slot, else that slot
    // (chat keeps one). n_past: prompt tokens already in that slot's cache (0..prompt size - 1; only with a
    // pinned slot). UsageError for a slot out of range or a bad n_past.
    //
    // A request for any free slot goes to the free slot whose cache already holds the longest prefix of its prompt
    // (the prompt tokens of the requests that slot ran before; ties to the lowest slot), and only the rest of its
    // prompt is run: requests that share a system prompt or a template's preamble compute it once per slot. A
    // token's K and V do not depend on what shared its batch, so the text is the same either way. Where the backend
    // can copy K and V between slots (Backend::copy_kv), such a request also takes a longer prefix from any other
    // slot's cache, and when a slot still running its prompt will hold a prefix longer by kMinWait tokens than any
    // cache holds now, the request waits for it (the first requests of a batch that share a system prompt: one
    // computes it, the others copy it a step later).
    void submit(int64_t id, Generation& gen, int32_t slot = -1, int32_t n_past = 0);

    // Admits waiting requests into free slots, runs one forward pass and samples. Returns false when there was
    // nothing to run (no running sequence, and none admissible).
    bool step();

    // No waiting request is started any more (a first Ctrl-C); running ones go on.
    void stop_admission() { admitting_ = false; }
    bool admitting() const { return admitting_; }
    // Ends every running request now with FinishReason::interrupted (each gets its held-back text, then
    // on_finish). Waiting requests stay queued.
    void abandon_running();

    size_t n_running() const;
    size_t n_waiting() const { return waiting_.size(); }
    int n_slots() const { return static_cast<int>(slots_.size()); }
    const StepStats& last_step() const { return last_step_; }

    // Shared prompt tokens that make a request wait for a slot still running its prompt (see submit).
    static constexpr size_t kMinWait = 16;

private:
    using clock = std::chrono::steady_clock;
    struct Waiting {
        int64_t id;
        Generation* gen;
        int32_t slot, n_past;
    };
    struct Slot {
        bool busy = false;
        int64_t id = 0;
        Generation* gen = nullptr;
        size_t next_prompt = 0;  // first prompt token not yet in the cache
        bool settled = true;     // false until a request for any slot has looked for its prefix in other slots
        int guess_n = 0;         // guesses wanted in the next step (lookup's or the draft's, adapted)
        int step_guessed = 0, step_accepted = 0;  // this step's
        GenerationStats stats;
        clock::time_point t_admit, t_first;
    };
    // What a slot's cache holds, kept across its requests: tokens[p] is the token whose K and V are at position p
    // (prompt tokens only, those forward() has run), written one past the highest position ever written.
    struct SlotCache {
        std::vector<int32_t> tokens;
        int64_t written = 0;
    };

    void admit();
    void start(Slot& s, const Waiting& w, bool any_slot);
    bool settle(int32_t slot);
    void finish(int32_t slot);
    void propose_drafts();
    void build_batch();
    void add_guesses(int32_t slot, std::span<const int32_t> guesses);
    void run_forward();
    void sample_all();
    int32_t pick(size_t row);
    void adapt_guesses();

    Backend& backend_;
    SchedulerOptions options_;
    TextFn on_text_;
    FinishFn on_finish_;
    std::vector<Slot> slots_;
    std::vector<SlotCache> caches_;  // [slot]
    std::deque<Waiting> waiting_;
    bool admitting_ = true;
    Batch batch_;
    std::vector<int32_t> logit_slot_;  // [batch.n_logits()] the slot whose token asked for each logits row
    std::vector<int32_t> guess_;       // [batch.n_logits()] the guessed token the row's token is, -1 for none
    std::vector<int32_t> guess_j_;     // [batch.n_logits()] which of its sequence's guesses it is (0..), -1 for none
    std::vector<int32_t> history_;     // build_batch's prompt + generated tokens of a sequence, for lookup
    std::vector<char> live_;           // [slot] sample_all: the slot's rows so far this step were its tokens
    std::vector<Sampler*> samplers_;   // [batch.n_logits()] each logit row's sampler
    std::vector<int32_t> picked_;      // [batch.n_logits()] the tokens they picked
    // The draft model's step: each slot's request index (-1: none), its guesses and the q each was drawn from.
    std::vector<std::vector<int32_t>> histories_;  // [slot] prompt + generated tokens, for the draft
    std::vector<Drafter::Request> draft_requests_;
    std::vector<int> draft_of_;                         // [slot]
    std::vector<std::vector<int32_t>> draft_guesses_;   // [request][guess]
    std::vector<std::vector<TokenDist>> draft_dists_;   // [request][guess]
    // Slots whose guesses this step are checked on the rows' logits in host memory (rejection sampling, or sample()
    // of each row in turn).
    std::vector<char> sampled_guesses_;  // [slot]
    std::vector<float> logits_;          // [batch.n_logits(), n_vocab] when some slot's are
    TokenDist p_, q_;
    StepStats last_step_;
};

}  // namespace quill
