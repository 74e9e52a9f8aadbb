#include "engine/runtime/draft.h"

#include "engine/error.h"

#include <algorithm>
#include <climits>

namespace quill {

void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft, std::string_view draft_name) {
    if (draft.n_vocab() != target.n_vocab())
        throw UsageError(fmt::format("the draft model {} has {} tokens, the model {}: a draft model needs the same "
                                     "vocabulary",
                                     draft_name, draft.n_vocab(), target.n_vocab()));
    for (int32_t id = 0; id < target.n_vocab(); ++id) {
        if (draft.piece(id) != target.piece(id))
            throw UsageError(fmt::format("the draft model {} has token {} \"{}\" where the model has \"{}\": a draft "
                                         "model needs the same vocabulary",
                                         draft_name, id, draft.piece(id), target.piece(id)));
    }
}

Drafter::Drafter(Backend& draft, int n_batch)
    : draft_(draft), n_batch_(std::max(1, n_batch)), caches_(static_cast<size_t>(draft.kv_shape().n_slots)) {}

// The batch in chunks of at most n_batch tokens (a prompt's first run), their logits rows one after another.
void Drafter::run(const Batch& batch, std::span<float> logits) {
    const auto n_vocab = static_cast<size_t>(draft_.config().n_vocab);
    size_t row = 0;
    for (size_t begin = 0; begin < batch.tokens.size(); begin += static_cast<size_t>(n_batch_)) {
        const size_t end = std::min(batch.tokens.size(), begin + static_cast<size_t>(n_batch_));
        chunk_.tokens.assign(batch.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                             batch.tokens.begin() + static_cast<std::ptrdiff_t>(end));
        const auto rows = static_cast<size_t>(chunk_.n_logits());
        draft_.forward(chunk_, logits.subspan(row * n_vocab, std::max<size_t>(rows, 1) * n_vocab));
        row += rows;
    }
}

// The first maximum of row among the tokens the grammar allows in `state` (the matcher's current state when first),
// and `state` moved past it; -1 when it allows none.
int32_t Drafter::allowed_max(grammar::GrammarMatcher& m, grammar::TokenGrammar::State& state, bool first,
                             std::span<const float> row) {
    grammar::TokenGrammar::State current;
    grammar::TokenGrammar& g = m.look_ahead(current);
    if (first) state = current;
    // shared_mask: the grammar may be shared with other sequences whose matchers' threads add to its caches.
    const grammar::TokenGrammar::Mask mask = g.shared_mask(state);
    int32_t best = -1;
    for (size_t t = 0; t < row.size() && t / 64 < mask->size(); ++t) {
        if ((((*mask)[t / 64] >> (t & 63)) & 1) && (best < 0 || row[t] > row[static_cast<size_t>(best)]))
            best = static_cast<int32_t>(t);
    }
    if (best >= 0) state = g.accept(state, best);
    return best;
}

// Round 0 runs each sequence's tokens that the draft's slot does not hold yet and draws the first guess from the last
// one's logits; round j runs guess j - 1 and draws guess j. A round holds every sequence that wants that many guesses.
void Drafter::propose(std::span<const Request> requests, int64_t n_token_ids,
                      std::vector<std::vector<int32_t>>& guesses, std::vector<std::vector<TokenDist>>& dists) {
    const size_t n = requests.size();
    guesses.assign(n, {});
    dists.assign(n, {});
    const auto n_vocab = static_cast<size_t>(draft_.config().n_vocab);
    const auto n_ids = static_cast<size_t>(std::min<int64_t>(n_token_ids, draft_.config().n_vocab));
    states_.assign(n, {});
    stopped_.assign(n, 0);
    n_guess_.assign(n, 0);
    // Guess j comes from the logits of position tokens.size() - 1 + j, which must be in the draft's context.
    const int64_t n_ctx = draft_.kv_shape().n_ctx;
    int rounds = 0;
    for (size_t i = 0; i < n; ++i) {
        const Request& r = requests[i];
        QUILL_CHECK(r.slot >= 0 && static_cast<size_t>(r.slot) < caches_.size(), "draft slot {} out of range", r.slot);
        QUILL_CHECK(!r.tokens.empty() && r.n_guess >= 1, "a draft request without tokens or guesses");
        const int64_t room = n_ctx + 1 - static_cast<int64_t>(r.tokens.size());
        n_guess_[i] = static_cast<int>(std::clamp<int64_t>(room, 0, r.n_guess));
        rounds = std::max(rounds, n_guess_[i]);
    }
    for (int round = 0; round < rounds; ++round) {
        batch_.tokens.clear();
        row_of_.assign(n, SIZE_MAX);
        size_t rows = 0;
        for (size_t i = 0; i < n; ++i) {
            const Request& r = requests[i];
            if (round >= n_guess_[i] || stopped_[i]) continue;
            SlotCache& c = caches_[static_cast<size_t>(r.slot)];
            if (round == 0) {
                const size_t keep = draft_.reusable_prefix(c.tokens, c.written, r.tokens);
                c.tokens.resize(keep);
                for (size_t p = keep; p < r.tokens.size(); ++p) {
                    batch_.add(r.tokens[p], static_cast<int32_t>(p), r.slot, p + 1 == r.tokens.size());
                    c.tokens.push_back(r.tokens[p]);
                }
            } else {
                const auto pos = static_cast<int32_t>(r.tokens.size()) + round - 1;
                batch_.add(guesses[i].back(), pos, r.slot, true);
                c.tokens.push_back(guesses[i].back());
            }
            c.written = std::max<int64_t>(c.written, static_cast<int64_t>(c.tokens.size()));
            row_of_[i] = rows++;
        }
        logits_.resize(rows * n_vocab);
        run(batch_, logits_);
        for (size_t i = 0; i < n; ++i) {
            if (row_of_[i] == SIZE_MAX) continue;
            const std::span<float> row(logits_.data() + row_of_[i] * n_vocab, n_ids);
            const int32_t guess = draw(requests[i], round == 0, row, states_[i], dists[i].emplace_back());
            if (guess < 0) {
                dists[i].pop_back();
                stopped_[i] = 1;
                continue;
            }
            guesses[i].push_back(guess);
            stopped_[i] = std::binary_search(requests[i].eog.begin(), requests[i].eog.end(), guess);
        }
    }
}

// A request's next guess from its logits row, and into q the distribution it was drawn from; -1 when its grammar
// allows no token.
int32_t Drafter::draw(const Request& r, bool first, std::span<float> row, grammar::TokenGrammar::State& state,
                      TokenDist& q) {
    if (r.grammar) {
        const int32_t guess = allowed_max(*r.grammar, state, first, row);
        if (guess >= 0) q.point(guess);
        return guess;
    }
    if (!r.sampler) {
        q.point(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
        return q.ids.front();
    }
    r.sampler->distribution(row, q);
    return r.sampler->draw(q);
}

}  // namespace quill
