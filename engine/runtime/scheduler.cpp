#include "engine/runtime/scheduler.h"

#include "engine/error.h"
#include "engine/runtime/lookup.h"

#include <algorithm>
#include <cmath>

namespace quill {

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

Scheduler::Scheduler(Backend& backend, const SchedulerOptions& options, TextFn on_text, FinishFn on_finish)
    : backend_(backend),
      options_(options),
      on_text_(std::move(on_text)),
      on_finish_(std::move(on_finish)),
      slots_(static_cast<size_t>(backend.kv_shape().n_slots)),
      caches_(slots_.size()),
      histories_(slots_.size()) {
    options_.n_batch = std::max(1, options_.n_batch);
}

void Scheduler::submit(int64_t id, Generation& gen, int32_t slot, int32_t n_past) {
    if (slot < -1 || slot >= n_slots())
        throw UsageError(fmt::format("slot {} is outside 0..{}", slot, n_slots() - 1));
    const size_t n_prompt = gen.prompt().size();
    if (n_past < 0 || static_cast<size_t>(n_past) >= n_prompt)
        throw UsageError(fmt::format("{} cached prompt tokens: expected 0..{}", n_past, n_prompt - 1));
    if (n_past > 0 && slot < 0) throw UsageError("cached prompt tokens need a pinned slot");
    // Guesses that fail are taken back, and a recurrent model's state cannot go back (qwen35).
    if ((gen.params().lookup > 0 || gen.params().drafter) && backend_.max_rewind() == 0)
        throw UsageError(fmt::format("--lookup and --draft-model cannot run on {} models, whose recurrent state cannot "
                                     "take back a rejected guess: run without them", backend_.config().gguf_arch()));
    waiting_.push_back({id, &gen, slot, n_past});
}

size_t Scheduler::n_running() const {
    return static_cast<size_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; }));
}

void Scheduler::start(Slot& s, const Waiting& w, bool any_slot) {
    std::vector<int32_t>& cached = caches_[static_cast<size_t>(w.slot)].tokens;
    cached.resize(std::min(cached.size(), static_cast<size_t>(w.n_past)));  // positions past it get rewritten
    s.busy = true;
    s.id = w.id;
    s.gen = w.gen;
    s.next_prompt = static_cast<size_t>(w.n_past);
    s.settled = !any_slot || !backend_.can_copy_kv();
    const GenerationParams& gp = w.gen->params();
    s.guess_n = gp.lookup > 0 ? gp.lookup : !gp.drafter ? 0 : gp.draft > 0 ? gp.draft : kDraftStart;
    s.stats = {};
    s.stats.prompt_tokens = static_cast<int>(w.gen->prompt().size());
    s.stats.reused_tokens = w.n_past;
    s.stats.prefilled_tokens = s.stats.prompt_tokens - w.n_past;
    s.t_admit = clock::now();
}

// Fills free slots from the queue, oldest request first; a request pinned to a busy slot waits (and does not
// hold up the ones behind it). A request that is finished before it starts (max_tokens 0) ends at once.
void Scheduler::admit() {
    if (!admitting_) return;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        Waiting w = *it;
        const bool any_slot = w.slot < 0;
        if (any_slot) {  // the free slot holding the longest prefix of the prompt
            int32_t best = -1;
            for (int32_t i = 0; i < n_slots(); ++i) {
                if (slots_[i].busy) continue;
                const SlotCache& c = caches_[static_cast<size_t>(i)];
                const auto n = static_cast<int32_t>(backend_.reusable_prefix(c.tokens, c.written, w.gen->prompt()));
                if (best < 0 || n > w.n_past) best = i, w.n_past = n;
            }
            if (best < 0) break;
            w.slot = best;
        } else if (slots_[w.slot].busy) {
            ++it;
            continue;
        }
        const int32_t slot = w.slot;
        it = waiting_.erase(it);
        start(slots_[slot], w, any_slot);
        if (w.gen->finished()) {
            slots_[slot].stats.prefilled_tokens = 0;
            finish(slot);
            it = waiting_.begin();  // on_finish may have submitted more
        }
    }
}

void Scheduler::finish(int32_t slot) {
    Slot& s = slots_[slot];
    const auto now = clock::now();
    if (s.stats.ttft_ms > 0) s.stats.decode_ms = ms_between(s.t_first, now);
    s.stats.completion_tokens = s.gen->n_generated();
    const GenerationStats stats = s.stats;
    const int64_t id = s.id;
    s = Slot{};
    on_finish_(id, stats);
}

// Whether the request in `slot` (for any slot, not yet settled) starts its prompt now: with the longest prefix any
// other slot's cache holds, copied, or none. It waits instead (false) while a slot that is running its prompt will
// hold a prefix kMinWait tokens longer: a slot past admission whose cache is short of the prompts' common prefix.
bool Scheduler::settle(int32_t slot) {
    Slot& s = slots_[slot];
    const std::vector<int32_t>& prompt = s.gen->prompt();
    size_t best = s.next_prompt, pending = 0;
    int32_t from = -1;
    for (int32_t j = 0; j < n_slots(); ++j) {
        if (j == slot) continue;
        const SlotCache& c = caches_[static_cast<size_t>(j)];
        const size_t n = backend_.reusable_prefix(c.tokens, c.written, prompt);
        if (n > best) best = n, from = j;
        const Slot& o = slots_[j];
        if (!o.busy || !o.settled) continue;
        const size_t m = shared_prefix(o.gen->prompt(), prompt);
        if (c.tokens.size() < m) pending = std::max(pending, m);
    }
    if (pending >= best + kMinWait) return false;
    s.settled = true;
    if (from < 0) return true;
    backend_.copy_kv(from, slot, static_cast<int64_t>(s.next_prompt), static_cast<int64_t>(best));
    SlotCache& mine = caches_[static_cast<size_t>(slot)];
    mine.tokens.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(best));
    mine.written = std::max(mine.written, static_cast<int64_t>(best));
    s.next_prompt = best;
    s.stats.reused_tokens = static_cast<int>(best);
    s.stats.prefilled_tokens = s.stats.prompt_tokens - s.stats.reused_tokens;
    return true;
}

// The draft model's guesses for every sequence whose prompt is in and that wants some (one Drafter::propose for all).
void Scheduler::propose_drafts() {
    draft_requests_.clear();
    draft_of_.assign(slots_.size(), -1);
    Drafter* drafter = nullptr;
    int64_t n_token_ids = backend_.config().n_vocab;
    for (size_t i = 0; i < slots_.size(); ++i) {
        Slot& s = slots_[i];
        if (!s.busy || s.next_prompt < s.gen->prompt().size() || !s.gen->params().drafter) continue;
        const int budget = s.gen->guess_budget(s.guess_n);
        if (budget == 0) continue;
        Drafter* d = s.gen->params().drafter.get();
        QUILL_CHECK(!drafter || drafter == d, "the requests of one scheduler share one draft model");
        QUILL_CHECK(d->backend().kv_shape().n_slots >= n_slots(), "the draft model has {} KV slots for {}",
                    d->backend().kv_shape().n_slots, n_slots());
        drafter = d;
        std::vector<int32_t>& h = histories_[i];
        h.assign(s.gen->prompt().begin(), s.gen->prompt().end());
        h.insert(h.end(), s.gen->generated().begin(), s.gen->generated().end());
        draft_of_[i] = static_cast<int>(draft_requests_.size());
        // A sampler with state guesses the draft's first maximum: its state cannot follow the guesses, and its RNG
        // stays as plain decoding uses it.
        Sampler* sampler = s.gen->sampler().stateless() ? &s.gen->sampler() : nullptr;
        draft_requests_.push_back(
            {static_cast<int32_t>(i), h, budget, sampler, s.gen->sampler().grammar_matcher(), s.gen->eog_ids()});
        n_token_ids = std::min(n_token_ids, s.gen->n_token_ids());
    }
    if (drafter) drafter->propose(draft_requests_, n_token_ids, draft_guesses_, draft_dists_);
}

// A decode token's guesses, each at the next position and asking for logits.
void Scheduler::add_guesses(int32_t slot, std::span<const int32_t> guesses) {
    Slot& s = slots_[slot];
    for (size_t g = 0; g < guesses.size(); ++g) {
        batch_.add(guesses[g], s.gen->next_pos() + 1 + static_cast<int32_t>(g), slot, true, true);
        logit_slot_.push_back(slot);
        guess_.push_back(guesses[g]);
        guess_j_.push_back(static_cast<int32_t>(g));
    }
    s.stats.guessed_tokens += static_cast<int>(guesses.size());
    s.step_guessed = static_cast<int>(guesses.size());
    s.step_accepted = 0;
    sampled_guesses_[slot] = !guesses.empty() && !s.gen->sampler().plain_greedy();
}

// Decode tokens first (one per sequence whose prompt is in), then prefill chunks of the others in slot order
// while the token budget lasts. The prompt's last token asks for logits; so does every decode token.
void Scheduler::build_batch() {
    batch_.tokens.clear();
    logit_slot_.clear();
    guess_.clear();
    guess_j_.clear();
    sampled_guesses_.assign(slots_.size(), 0);
    for (size_t i = 0; i < slots_.size(); ++i) {
        Slot& s = slots_[i];
        if (!s.busy || s.next_prompt < s.gen->prompt().size()) continue;
        const auto slot = static_cast<int32_t>(i);
        batch_.add(s.gen->last_token(), s.gen->next_pos(), slot, true, true);
        logit_slot_.push_back(slot);
        guess_.push_back(-1);
        guess_j_.push_back(-1);
        if (draft_of_[i] >= 0) {
            add_guesses(slot, draft_guesses_[static_cast<size_t>(draft_of_[i])]);
            continue;
        }
        const int budget = s.gen->params().lookup > 0 ? s.gen->guess_budget(s.guess_n) : 0;
        if (budget == 0) continue;
        history_.assign(s.gen->prompt().begin(), s.gen->prompt().end());
        history_.insert(history_.end(), s.gen->generated().begin(), s.gen->generated().end());
        add_guesses(slot, lookup_guesses(history_, budget, 4, 1, s.gen->eog_ids()));
    }
    // At least one prefill token per step, so prompts progress even when the decode tokens fill the budget.
    size_t budget = static_cast<size_t>(std::max<int64_t>(1, options_.n_batch - static_cast<int64_t>(batch_.tokens.size())));
    for (size_t i = 0; i < slots_.size() && budget > 0; ++i) {
        Slot& s = slots_[i];
        if (!s.busy) continue;
        const std::vector<int32_t>& prompt = s.gen->prompt();
        if (s.next_prompt >= prompt.size() || (!s.settled && !settle(static_cast<int32_t>(i)))) continue;
        const size_t end = std::min(prompt.size(), s.next_prompt + budget);
        for (size_t p = s.next_prompt; p < end; ++p) {
            const bool last = p + 1 == prompt.size();
            batch_.add(prompt[p], static_cast<int32_t>(p), static_cast<int32_t>(i), last);
            if (last) {
                logit_slot_.push_back(static_cast<int32_t>(i));
                guess_.push_back(-1);
                guess_j_.push_back(-1);
            }
        }
        last_step_.prefill_tokens += static_cast<int>(end - s.next_prompt);
        budget -= end - s.next_prompt;
        s.next_prompt = end;
    }
}

// The token row r gives its sequence: the row's pick, or for a slot whose guesses are checked on the host, either
// sample() of the row now, with the sampler in the state the sequence's earlier tokens of this step left it in (a
// sampler with state: penalties, grammar, logprobs), or the verdict of rejection sampling on the guess the next row
// holds (the guess, or a token drawn in its place) and after the last guess a draw from the row's distribution.
int32_t Scheduler::pick(size_t r) {
    const int32_t slot = logit_slot_[r];
    if (!sampled_guesses_[slot]) return picked_[r];
    Sampler& sampler = slots_[slot].gen->sampler();
    const auto n_vocab = static_cast<size_t>(backend_.config().n_vocab);
    const std::span<float> row(logits_.data() + r * n_vocab, n_vocab);
    if (!sampler.stateless()) return sampler.sample(row);
    sampler.distribution(row, p_);
    const bool guess_next = r + 1 < logit_slot_.size() && logit_slot_[r + 1] == slot && guess_[r + 1] >= 0;
    if (!guess_next) return sampler.draw(p_);
    const int draft = draft_of_[slot];
    if (draft < 0) q_.point(guess_[r + 1]);
    const TokenDist& q = draft < 0 ? q_ : draft_dists_[static_cast<size_t>(draft)][static_cast<size_t>(guess_j_[r + 1])];
    return sampler.check_guess(p_, q, guess_[r + 1]).token;
}

// Rows come in batch order, which is the order of logit_slot_. A guess row counts only while every earlier row of its
// sequence did and gave the token the guess row holds.
void Scheduler::sample_all() {
    const auto now = clock::now();
    live_.assign(slots_.size(), 0);
    for (size_t r = 0; r < logit_slot_.size(); ++r) {
        const int32_t slot = logit_slot_[r];
        Slot& s = slots_[slot];
        if (guess_[r] >= 0) {
            if (!live_[slot] || !s.busy) continue;
            ++s.stats.accepted_tokens;
            ++s.step_accepted;
        }
        const int32_t token = pick(r);
        live_[slot] = r + 1 < logit_slot_.size() && guess_[r + 1] == token && logit_slot_[r + 1] == slot;
        const bool first = s.stats.ttft_ms == 0;  // the prompt just completed
        if (first) s.stats.prefill_ms = ms_between(s.t_admit, now);
        const std::string text = s.gen->advance(token);
        if (first) {
            s.t_first = clock::now();
            s.stats.ttft_ms = std::max(1e-6, ms_between(s.t_admit, s.t_first));
        }
        ++last_step_.decode_tokens;
        if (!text.empty()) on_text_(s.id, text);
        if (s.gen->finished()) {
            finish(slot);
            live_[slot] = 0;
        }
    }
}

// A draft whose number of guesses adapts: one more after a step that accepted them all, one fewer after one that
// accepted under half.
void Scheduler::adapt_guesses() {
    for (Slot& s : slots_) {
        if (!s.busy || s.step_guessed == 0) continue;
        const GenerationParams& gp = s.gen->params();
        if (gp.drafter && gp.draft == 0) {
            if (s.step_accepted == s.step_guessed) s.guess_n = std::min(s.guess_n + 1, kMaxLookup);
            else if (2 * s.step_accepted < s.step_guessed) s.guess_n = std::max(s.guess_n - 1, 1);
        }
        s.step_guessed = 0;
    }
}

// One forward pass over the batch. Rows go to the samplers on the backend (forward_sample: a GPU picks plain greedy
// rows on the device) unless some slot's guesses are checked by rejection sampling, which needs the rows' logits:
// then every row's logits come to host memory and the other rows are sampled there.
void Scheduler::run_forward() {
    samplers_.clear();
    int64_t n_token_ids = backend_.config().n_vocab;
    for (int32_t slot : logit_slot_) {
        Generation& gen = *slots_[slot].gen;
        samplers_.push_back(&gen.sampler());
        n_token_ids = std::min(n_token_ids, gen.n_token_ids());
    }
    picked_.resize(logit_slot_.size());
    if (std::none_of(sampled_guesses_.begin(), sampled_guesses_.end(), [](char c) { return c != 0; })) {
        backend_.forward_sample(batch_, samplers_, n_token_ids, picked_);
        return;
    }
    const auto n_vocab = static_cast<size_t>(backend_.config().n_vocab);
    logits_.resize(logit_slot_.size() * n_vocab);
    backend_.forward(batch_, logits_);
    for (size_t r = 0; r < logit_slot_.size(); ++r) {
        const std::span<float> row(logits_.data() + r * n_vocab, n_vocab);
        std::fill(row.begin() + n_token_ids, row.end(), -INFINITY);
        if (!sampled_guesses_[logit_slot_[r]]) picked_[r] = samplers_[r]->sample(row);
    }
}

bool Scheduler::step() {
    last_step_ = {};
    admit();
    if (n_running() == 0) return false;
    propose_drafts();
    build_batch();
    run_forward();
    for (const BatchToken& t : batch_.tokens) {  // now in the caches
        SlotCache& c = caches_[static_cast<size_t>(t.slot)];
        if (!t.decode && static_cast<size_t>(t.pos) == c.tokens.size()) c.tokens.push_back(t.token);
        c.written = std::max(c.written, static_cast<int64_t>(t.pos) + 1);
    }
    sample_all();
    adapt_guesses();
    return true;
}

void Scheduler::abandon_running() {
    for (size_t i = 0; i < slots_.size(); ++i) {
        Slot& s = slots_[i];
        if (!s.busy) continue;
        const std::string tail = s.gen->interrupt();
        if (!tail.empty()) on_text_(s.id, tail);
        if (s.stats.ttft_ms == 0) s.stats.prefill_ms = ms_between(s.t_admit, clock::now());
        finish(static_cast<int32_t>(i));
    }
}

}  // namespace quill
