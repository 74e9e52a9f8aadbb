#include "engine/grammar/token_mask.h"

#include "engine/error.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <numeric>
#include <system_error>
#include <utility>

namespace quill::grammar {

namespace {
// Frames of a stack's top that its local mask covers: enough for a JSON string's loop, its character and its
// closing quote, so that only tokens leaving the string reach below.
constexpr int kLocalFrames = 3;
// The state masks kept (bytes); past it the cache starts over.
constexpr size_t kMaskCacheBytes = size_t{16} << 20;

void set_bit(std::vector<uint64_t>& m, int32_t t) { m[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63); }
bool has_bit(const std::vector<uint64_t>& m, int32_t t) { return (m[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1; }

std::vector<std::string> vocab_bytes(const Tokenizer& tok, std::span<const int32_t> shown) {
    std::vector<std::string> out(static_cast<size_t>(tok.n_vocab()));
    for (int32_t id = 0; id < tok.n_vocab(); ++id)
        if (!tok.is_eog(id)) out[static_cast<size_t>(id)] = shown_bytes(tok, id, shown);
    return out;
}
}  // namespace

// ---- TokenTrie ----

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes) {
    std::vector<std::pair<std::string_view, int32_t>> order;  // (bytes, id), sorted
    for (size_t id = 0; id < token_bytes.size(); ++id)
        if (!token_bytes[id].empty()) order.emplace_back(token_bytes[id], static_cast<int32_t>(id));
    std::sort(order.begin(), order.end());
    std::vector<uint32_t> path;  // open nodes, one per depth
    const std::string_view* prev = nullptr;
    for (const auto& [t, id] : order) {
        size_t lcp = 0;
        if (prev) {
            const size_t n = std::min(prev->size(), t.size());
            while (lcp < n && (*prev)[lcp] == t[lcp]) ++lcp;
        }
        while (path.size() > lcp) {
            end_[path.back()] = static_cast<uint32_t>(byte_.size());
            path.pop_back();
        }
        for (size_t d = lcp; d < t.size(); ++d) {
            path.push_back(static_cast<uint32_t>(byte_.size()));
            byte_.push_back(static_cast<uint8_t>(t[d]));
            depth_.push_back(static_cast<uint32_t>(d + 1));
            end_.push_back(0);
            tok_begin_.push_back(static_cast<uint32_t>(toks_.size()));
        }
        toks_.push_back(id);
        max_depth_ = std::max(max_depth_, static_cast<uint32_t>(t.size()));
        prev = &t;
    }
    for (uint32_t node : path) end_[node] = static_cast<uint32_t>(byte_.size());
    tok_begin_.push_back(static_cast<uint32_t>(toks_.size()));
}

std::span<const int32_t> TokenTrie::tokens(size_t node) const {
    return {toks_.data() + tok_begin_[node], tok_begin_[node + 1] - tok_begin_[node]};
}

std::span<const int32_t> TokenTrie::subtree_tokens(size_t node) const {
    return {toks_.data() + tok_begin_[node], tok_begin_[end_[node]] - tok_begin_[node]};
}

// ---- TokenGrammar ----

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> g, std::vector<std::string> token_bytes,
                           std::vector<int32_t> eog)
    : grammar_(g),
      bytes_(std::move(token_bytes)),
      eog_(std::move(eog)),
      a_(std::move(g)),
      trie_(bytes_),
      n_words_((bytes_.size() + 63) / 64) {
    std::sort(eog_.begin(), eog_.end());
    for (int32_t t : eog_) {
        QUILL_CHECK(t >= 0 && static_cast<size_t>(t) < bytes_.size(), "end-of-generation token {} out of range", t);
        bytes_[static_cast<size_t>(t)].clear();
    }
    walk_.resize(trie_.max_depth() + 1);
    path_.resize(trie_.max_depth() + 1);
    below_.resize(trie_.max_depth() + 1);
}

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> g, const Tokenizer& tok, std::span<const int32_t> shown)
    : TokenGrammar(std::move(g), vocab_bytes(tok, shown), tok.eog_ids()) {}

std::shared_ptr<TokenGrammar> TokenGrammar::renewed() const {
    return std::make_shared<TokenGrammar>(grammar_, bytes_, eog_);
}

bool TokenGrammar::is_eog(int32_t token) const { return std::binary_search(eog_.begin(), eog_.end(), token); }

// The top kLocalFrames frames of a stack, rebuilt on the empty stack.
uint32_t TokenGrammar::local_key(uint32_t stack) {
    frames_.clear();
    for (uint32_t s = stack; s != Automaton::kEmptyStack && frames_.size() < kLocalFrames; s = a_.parent(s))
        frames_.push_back(a_.top(s));
    uint32_t local = Automaton::kEmptyStack;
    for (size_t i = frames_.size(); i-- > 0;) local = a_.push(local, frames_[i]);
    return local;
}

// The walks meet few states, each many times, and mostly the same ones: they run on a dense table (the automaton's
// table is large and far from the cache), indices into dense_states_ with 256 transitions each, kDeadIndex the dead
// state, kept from walk to walk. Past kDenseStates states it starts over, keeping the states of the path above
// `depth`.
void TokenGrammar::dense_restart(uint32_t depth) {
    std::vector<State> keep(depth);
    for (uint32_t k = 0; k < depth; ++k) keep[k] = dense_states_[path_[k]];
    dense_ids_ = IdMap();
    dense_states_.clear();
    dense_next_.clear();
    dense_accepting_.clear();
    dense_first_.clear();
    dense_index(Automaton::kDead);
    for (uint32_t k = 0; k < depth; ++k) path_[k] = dense_index(keep[k]);
}

uint32_t TokenGrammar::dense_index(State s) {
    if (const uint32_t* i = dense_ids_.find(s)) return *i;
    const auto i = static_cast<uint32_t>(dense_states_.size());
    dense_ids_.emplace(s, i);
    dense_states_.push_back(s);
    dense_accepting_.push_back(a_.accepting(s) ? 1 : 0);
    ByteSet first;  // the bytes some stack of s takes: any other leads to the dead state
    for (uint32_t stack : a_.stacks(s)) {
        if (stack == Automaton::kEmptyStack) continue;
        const ByteSet& top = a_.grammar().sets[a_.grammar().elems[a_.top(stack)].arg];
        for (int w = 0; w < 4; ++w) first.bits[w] |= top.bits[w];
    }
    dense_first_.push_back(first);
    dense_next_.resize(dense_next_.size() + 256, kUnknownNext);
    return i;
}

// The transition from the state at path_[depth - 1] over byte b, computed and entered in the dense table.
uint32_t TokenGrammar::dense_step(uint32_t depth, uint8_t b) {
    constexpr size_t kDenseStates = 4096;
    const uint32_t from = path_[depth - 1];
    if (!dense_first_[from].has(b)) return dense_next_[size_t{from} * 256 + b] = kDeadIndex;
    ++stats_.dense_steps;
    const State next = a_.advance(dense_states_[from], b);
    if (dense_states_.size() >= kDenseStates && !dense_ids_.find(next)) {
        ++stats_.dense_restarts;
        dense_restart(depth);
    }
    const uint32_t i = dense_index(next);
    dense_next_[size_t{path_[depth - 1]} * 256 + b] = i;
    return i;
}

// One walk of the trie from the local stack: a token is accepted if some reading keeps all its bytes inside the
// local frames or leaves them exactly at its end; uncertain if it is refused only after a reading left them (what
// follows depends on the frames below); refused otherwise.
const TokenGrammar::LocalMask& TokenGrammar::local_mask(uint32_t local_stack) {
    auto& slot = locals_[local_stack];
    if (slot) return *slot;
    ++stats_.local_walks;
    auto m = std::make_unique<LocalMask>();
    std::vector<uint64_t>& accepted = scratch_;
    accepted.assign(n_words_, 0);  // reuses its memory: no page to fault in per walk
    if (dense_states_.empty()) dense_restart(0);
    path_[0] = dense_index(a_.single(local_stack));
    below_[0] = 0;
    for (size_t i = 0; i < trie_.size();) {
        const uint32_t d = trie_.depth(i);
        const uint8_t b = trie_.byte(i);
        uint32_t next = dense_next_[size_t{path_[d - 1]} * 256 + b];
        if (next == kUnknownNext) next = dense_step(d, b);
        if (next == kDeadIndex) {
            if (below_[d - 1]) {
                const auto sub = trie_.subtree_tokens(i);
                m->uncertain.insert(m->uncertain.end(), sub.begin(), sub.end());
            }
            i = trie_.subtree_end(i);
            continue;
        }
        for (int32_t t : trie_.tokens(i)) set_bit(accepted, t);
        ++stats_.walk_nodes;
        path_[d] = next;
        below_[d] = below_[d - 1] | dense_accepting_[next];
        ++i;
    }
    for (size_t w = 0; w < n_words_; ++w) {
        if (!accepted[w]) continue;
        m->word_index.push_back(static_cast<uint32_t>(w));
        m->words.push_back(accepted[w]);
    }
    slot = std::move(m);
    return *slot;
}

// The uncertain tokens of a local mask, each read from the whole stack; they come sorted by bytes, so a shared
// prefix is read once.
void TokenGrammar::check_uncertain(uint32_t stack, const LocalMask& local, std::vector<uint64_t>& mask) {
    std::vector<Automaton::State>& path = walk_;  // path[k]: the state after k bytes of `last`
    path[0] = a_.single(stack);
    size_t have = 1;
    const std::string* last = nullptr;
    for (int32_t t : local.uncertain) {
        if (has_bit(mask, t)) continue;
        const std::string& b = bytes_[static_cast<size_t>(t)];
        size_t k = 0;
        if (last) {
            const size_t n = std::min({last->size(), b.size(), have - 1});
            while (k < n && (*last)[k] == b[k]) ++k;
        }
        Automaton::State s = path[k];
        for (; k < b.size() && s != Automaton::kDead; ++k) {
            s = a_.advance(s, static_cast<uint8_t>(b[k]));
            path[k + 1] = s;
        }
        have = k + 1;
        last = &b;
        if (s != Automaton::kDead) set_bit(mask, t);
    }
}

void TokenGrammar::build_mask(State s, std::vector<uint64_t>& mask) {
    mask.assign(n_words_, 0);
    const auto stacks = a_.stacks(s);
    const std::vector<uint32_t> copy(stacks.begin(), stacks.end());  // the walks below add states: spans move
    for (uint32_t stack : copy) {
        if (stack == Automaton::kEmptyStack) {
            for (int32_t t : eog_) set_bit(mask, t);
            continue;
        }
        const LocalMask& local = local_mask(local_key(stack));
        for (size_t k = 0; k < local.words.size(); ++k) mask[local.word_index[k]] |= local.words[k];
        if (!local.uncertain.empty()) check_uncertain(stack, local, mask);
    }
}

TokenGrammar::Mask TokenGrammar::find_or_build(State s) {
    if (auto it = masks_.find(s); it != masks_.end()) {
        ++stats_.mask_hits;
        return it->second;
    }
    ++stats_.masks_built;
    if ((masks_.size() + 1) * n_words_ * sizeof(uint64_t) > kMaskCacheBytes) masks_.clear();
    auto m = std::make_shared<std::vector<uint64_t>>();
    build_mask(s, *m);
    masks_.emplace(s, m);
    return m;
}

std::span<const uint64_t> TokenGrammar::mask(State s) {
    std::lock_guard lock(mu_);
    return *find_or_build(s);
}

TokenGrammar::Mask TokenGrammar::shared_mask(State s) {
    std::lock_guard lock(mu_);
    return find_or_build(s);
}

TokenGrammar::Mask TokenGrammar::cached_mask(State s) {
    std::lock_guard lock(mu_);
    auto it = masks_.find(s);
    if (it == masks_.end()) return nullptr;
    ++stats_.mask_hits;
    return it->second;
}

TokenGrammar::State TokenGrammar::accept(State s, int32_t token) {
    QUILL_CHECK(token >= 0 && token < n_vocab(), "token {} is outside the vocabulary", token);
    if (is_eog(token)) return s;
    std::lock_guard lock(mu_);
    return a_.advance(s, bytes_[static_cast<size_t>(token)]);
}

bool TokenGrammar::accepting(State s) const {
    std::lock_guard lock(mu_);
    return a_.accepting(s);
}

bool TokenGrammar::finished(State s) const {
    std::lock_guard lock(mu_);
    return a_.finished(s);
}

size_t TokenGrammar::n_stacks() const {
    std::lock_guard lock(mu_);
    return a_.n_stacks();
}

TokenGrammar::Stats TokenGrammar::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

// ---- GrammarMatcher ----

GrammarMatcher::GrammarMatcher(std::shared_ptr<TokenGrammar> g, bool overlap)
    : g_(std::move(g)), state_(g_->start()), overlap_(overlap) {
    prepare();  // the first mask is computed while the prompt runs
}

GrammarMatcher::~GrammarMatcher() {
    if (!worker_.joinable()) return;
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
}

void GrammarMatcher::prepare() {
    if (!overlap_) return;
    TokenGrammar::Mask cached = g_->cached_mask(state_);
    std::lock_guard lock(mu_);
    mask_ = std::move(cached);
    if (mask_) return;
    pending_ = true;
    if (worker_.joinable()) {
        cv_.notify_all();
        return;
    }
    try {
        worker_ = std::thread([this] { work(); });
    } catch (const std::system_error&) {  // no thread to be had: mask() computes it
        pending_ = false;
        overlap_ = false;
    }
}

void GrammarMatcher::wait() {
    if (!worker_.joinable()) return;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !pending_; });
}

void GrammarMatcher::work() {
    std::unique_lock lock(mu_);
    for (;;) {
        cv_.wait(lock, [&] { return pending_ || stop_; });
        if (stop_) return;
        const TokenGrammar::State s = state_;  // accept() waits for this thread before it changes state_
        lock.unlock();
        TokenGrammar::Mask m;
        std::exception_ptr error;
        try {
            m = g_->shared_mask(s);
        } catch (...) {
            error = std::current_exception();
        }
        lock.lock();
        mask_ = std::move(m);
        error_ = error;
        pending_ = false;
        ++masks_ahead_;
        cv_.notify_all();
    }
}

std::span<const uint64_t> GrammarMatcher::mask() {
    wait();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    if (!mask_) mask_ = g_->shared_mask(state_);
    return *mask_;
}

TokenGrammar& GrammarMatcher::look_ahead(TokenGrammar::State& state) {
    wait();
    state = state_;
    return *g_;
}

void GrammarMatcher::accept(int32_t token) {
    wait();
    error_ = nullptr;
    state_ = g_->accept(state_, token);
    mask_ = nullptr;
    prepare();
}

}  // namespace quill::grammar
