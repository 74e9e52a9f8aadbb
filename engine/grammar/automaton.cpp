#include "engine/grammar/automaton.h"

#include "engine/error.h"

#include <algorithm>
#include <bit>
#include <unordered_set>

namespace quill::grammar {

namespace {
constexpr size_t kMaxStacks = size_t{1} << 24;        // interned stacks
constexpr size_t kMaxSetData = size_t{1} << 26;       // stack ids held by all states together
constexpr size_t kMaxStacksPerState = size_t{1} << 16;  // stacks one state may hold (ambiguity)
}  // namespace

void IdMap::rehash(size_t capacity) {
    std::vector<uint64_t> keys(capacity, kEmpty);
    std::vector<uint32_t> vals(capacity);
    keys.swap(keys_);
    vals.swap(vals_);
    mask_ = capacity - 1;
    shift_ = 64 - std::countr_zero(capacity);
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i)
        if (keys[i] != kEmpty) emplace(keys[i], vals[i]);
}

uint32_t IdMap::emplace(uint64_t key, uint32_t value) {
    if (2 * (size_ + 1) > keys_.size()) rehash(2 * keys_.size());
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
        if (keys_[i] == key) return vals_[i];
        if (keys_[i] == kEmpty) {
            keys_[i] = key;
            vals_[i] = value;
            ++size_;
            return value;
        }
    }
}

Automaton::Automaton(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
    nodes_.push_back({0, 0});  // the empty stack
    set_begin_.push_back(0);
    std::vector<uint32_t> none;
    intern_set(none);  // kDead
    std::vector<uint32_t> first;
    for (uint32_t a : g_->alts[g_->root]) {
        if (g_->elems[a].kind == ElemKind::end)
            first.push_back(kEmptyStack);
        else
            expand(intern(kEmptyStack, a), first);
    }
    start_ = intern_set(first);
}

uint32_t Automaton::intern(uint32_t parent, uint32_t pos) {
    const uint64_t key = uint64_t{parent} << 32 | pos;
    if (const uint32_t* id = node_ids_.find(key)) return *id;
    if (nodes_.size() >= kMaxStacks)
        throw UsageError(fmt::format("the grammar's automaton grew past {} stacks (nesting too deep?)", kMaxStacks));
    const auto id = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back({parent, pos});
    node_ids_.emplace(key, id);
    return id;
}

void Automaton::expand(uint32_t stack, std::vector<uint32_t>& out) {
    if (stack < has_expanded_.size() && has_expanded_[stack]) {
        out.insert(out.end(), expanded_[stack].begin(), expanded_[stack].end());
        return;
    }
    std::vector<uint32_t> result, todo{stack};
    std::unordered_set<uint32_t> seen{stack};
    while (!todo.empty()) {
        const uint32_t s = todo.back();
        todo.pop_back();
        if (s == kEmptyStack || g_->elems[nodes_[s].pos].kind == ElemKind::bytes) {
            result.push_back(s);
            continue;
        }
        // a rule reference: its frame goes on after it (or ends there), and each alternative starts on top
        const Node n = nodes_[s];
        const uint32_t rule = g_->elems[n.pos].arg;
        const uint32_t base = g_->elems[n.pos + 1].kind == ElemKind::end ? n.parent : intern(n.parent, n.pos + 1);
        for (uint32_t a : g_->alts[rule]) {
            const uint32_t next = g_->elems[a].kind == ElemKind::end ? base : intern(base, a);
            if (seen.insert(next).second) todo.push_back(next);
        }
    }
    if (has_expanded_.size() <= stack) {
        has_expanded_.resize(nodes_.size(), 0);
        expanded_.resize(nodes_.size());
    }
    out.insert(out.end(), result.begin(), result.end());
    expanded_[stack] = std::move(result);
    has_expanded_[stack] = 1;
}

Automaton::State Automaton::intern_set(std::vector<uint32_t>& stacks) {
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    if (stacks.size() > kMaxStacksPerState)
        throw UsageError(fmt::format("the grammar is too ambiguous: more than {} ways to read the text at once",
                                     kMaxStacksPerState));
    uint64_t h = 1469598103934665603ull;
    for (uint32_t s : stacks) h = (h ^ s) * 1099511628211ull;
    auto [lo, hi] = set_ids_.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
        const std::span<const uint32_t> have = this->stacks(it->second);
        if (std::equal(have.begin(), have.end(), stacks.begin(), stacks.end())) return it->second;
    }
    if (set_data_.size() + stacks.size() > kMaxSetData)
        throw UsageError(fmt::format("the grammar's automaton grew past {} stack entries", kMaxSetData));
    const auto id = static_cast<State>(set_begin_.size() - 1);
    set_data_.insert(set_data_.end(), stacks.begin(), stacks.end());
    set_begin_.push_back(static_cast<uint32_t>(set_data_.size()));
    set_ids_.emplace(h, id);
    return id;
}

std::span<const uint32_t> Automaton::stacks(State s) const {
    return {set_data_.data() + set_begin_[s], set_begin_[s + 1] - set_begin_[s]};
}

bool Automaton::accepting(State s) const {
    const auto st = stacks(s);
    return !st.empty() && st[0] == kEmptyStack;
}

Automaton::State Automaton::advance(State s, uint8_t byte) {
    const uint64_t key = uint64_t{s} << 8 | byte;
    if (const uint32_t* next = next_.find(key)) return *next;
    work_.clear();
    for (size_t k = set_begin_[s]; k < set_begin_[s + 1]; ++k) {
        const uint32_t stack = set_data_[k];
        if (stack == kEmptyStack) continue;
        const Node n = nodes_[stack];
        if (!g_->sets[g_->elems[n.pos].arg].has(byte)) continue;
        const uint32_t next = g_->elems[n.pos + 1].kind == ElemKind::end ? n.parent : intern(n.parent, n.pos + 1);
        expand(next, work_);
    }
    const State r = intern_set(work_);
    next_.emplace(key, r);
    return r;
}

Automaton::State Automaton::advance(State s, std::string_view bytes) {
    for (char c : bytes) {
        if (s == kDead) return kDead;
        s = advance(s, static_cast<uint8_t>(c));
    }
    return s;
}

Automaton::State Automaton::single(uint32_t stack) {
    if (auto it = singles_.find(stack); it != singles_.end()) return it->second;
    scratch_.assign(1, stack);
    const State s = intern_set(scratch_);
    singles_.emplace(stack, s);
    return s;
}

}  // namespace quill::grammar
