#include "engine/runtime/scheduler.h"

#include "engine/error.h"
#include "engine/runtime/lookup.h"

#include <algorithm>

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
      caches_(slots_.size()) {
    options_.n_batch = std::max(1, options_.n_batch);
}

void Scheduler::submit(int64_t id, Generation& gen, int32_t slot, int32_t n_past) {
    if (slot < -1 || slot >= n_slots())
        throw UsageError(fmt::format("slot {} is outside 0..{}", slot, n_slots() - 1));
    const size_t n_prompt = gen.prompt().size();
    if (n_past < 0 || static_cast<size_t>(n_past) >= n_prompt)
        throw UsageError(fmt::format("{} cached prompt tokens: expected 0..{}", n_past, n_prompt - 1));
    if (n_past > 0 && slot < 0) throw UsageError("cached prompt tokens need a pinned slot");
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

// Decode tokens first (one per sequence whose prompt is in), then prefill chunks of the others in slot order
// while the token budget lasts. The prompt's last token asks for logits; so does every decode token.
void Scheduler::build_batch() {
    batch_.tokens.clear();
    logit_slot_.clear();
    guess_.clear();
    for (size_t i = 0; i < slots_.size(); ++i) {
        Slot& s = slots_[i];
        if (!s.busy || s.next_prompt < s.gen->prompt().size()) continue;
        const auto slot = static_cast<int32_t>(i);
        batch_.add(s.gen->last_token(), s.gen->next_pos(), slot, true, true);
        logit_slot_.push_back(slot);
        guess_.push_back(-1);
        const int budget = s.gen->lookup_budget();
        if (budget == 0) continue;
        history_.assign(s.gen->prompt().begin(), s.gen->prompt().end());
        history_.insert(history_.end(), s.gen->generated().begin(), s.gen->generated().end());
        const std::vector<int32_t> guesses = lookup_guesses(history_, budget);
        for (size_t g = 0; g < guesses.size(); ++g) {
            batch_.add(guesses[g], s.gen->next_pos() + 1 + static_cast<int32_t>(g), slot, true, true);
            logit_slot_.push_back(slot);
            guess_.push_back(guesses[g]);
        }
        s.stats.guessed_tokens += static_cast<int>(guesses.size());
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
            }
        }
        last_step_.prefill_tokens += static_cast<int>(end - s.next_prompt);
        budget -= end - s.next_prompt;
        s.next_prompt = end;
    }
}

// Picked tokens come in batch order, which is the order of logit_slot_. A guess row counts only while every earlier
// row of its sequence did and picked the token the guess row holds.
void Scheduler::sample_all() {
    const auto now = clock::now();
    live_.assign(slots_.size(), 0);
    for (size_t r = 0; r < logit_slot_.size(); ++r) {
        const int32_t slot = logit_slot_[r];
        Slot& s = slots_[slot];
        if (guess_[r] < 0) {
            live_[slot] = 1;
        } else {
            if (!live_[slot] || !s.busy || picked_[r - 1] != guess_[r]) {
                live_[slot] = 0;
                continue;
            }
            ++s.stats.accepted_tokens;
        }
        const bool first = s.stats.ttft_ms == 0;  // the prompt just completed
        if (first) s.stats.prefill_ms = ms_between(s.t_admit, now);
        const std::string text = s.gen->advance(picked_[r]);
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

bool Scheduler::step() {
    last_step_ = {};
    admit();
    if (n_running() == 0) return false;
    build_batch();
    samplers_.clear();
    int64_t n_token_ids = backend_.config().n_vocab;
    for (int32_t slot : logit_slot_) {
        Generation& gen = *slots_[slot].gen;
        samplers_.push_back(&gen.sampler());
        n_token_ids = std::min(n_token_ids, gen.n_token_ids());
    }
    picked_.resize(logit_slot_.size());
    backend_.forward_sample(batch_, samplers_, n_token_ids, picked_);
    for (const BatchToken& t : batch_.tokens) {  // now in the caches
        SlotCache& c = caches_[static_cast<size_t>(t.slot)];
        if (!t.decode && static_cast<size_t>(t.pos) == c.tokens.size()) c.tokens.push_back(t.token);
        c.written = std::max(c.written, static_cast<int64_t>(t.pos) + 1);
    }
    sample_all();
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
