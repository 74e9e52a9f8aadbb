// The pushdown automaton of a Grammar, run over bytes. A stack holds grammar positions (the top one a byte set to
// match next, the ones below where each enclosing rule goes on); a state is the set of stacks the text so far can
// be in (a grammar may be ambiguous). Stacks and sets of stacks are interned, so a state is one integer, and each
// (state, byte) transition is computed once: the automaton becomes a DFA built lazily over the states it meets. A
// rule reference at the end of an alternative replaces its frame instead of pushing one, so right recursion (x*)
// keeps the stack as it is.
//
// Not thread-safe: the tables grow as new states are met.
#pragma once

#include "engine/grammar/grammar.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace quill::grammar {

// uint64 -> uint32 with open addressing: the automaton's lookups are most of a mask's cost, and std::unordered_map
// chases a pointer per lookup.
class IdMap {
public:
    IdMap() { rehash(1024); }
    // The value of key, or nullptr.
    const uint32_t* find(uint64_t key) const {
        for (size_t i = slot(key);; i = (i + 1) & mask_) {
            if (keys_[i] == key) return &vals_[i];
            if (keys_[i] == kEmpty) return nullptr;
        }
    }
    // Inserts key -> value unless key is there; returns the value held.
    uint32_t emplace(uint64_t key, uint32_t value);

private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_; }
    void rehash(size_t capacity);
    std::vector<uint64_t> keys_;
    std::vector<uint32_t> vals_;
    size_t size_ = 0, mask_ = 0;
    int shift_ = 0;
};

class Automaton {
public:
    using State = uint32_t;
    static constexpr State kDead = 0;       // the empty set: no text can continue
    static constexpr uint32_t kEmptyStack = 0;  // the stack of a text the grammar is done with

    explicit Automaton(std::shared_ptr<const Grammar> g);

    const Grammar& grammar() const { return *g_; }
    State start() const { return start_; }
    // The state after one more byte (kDead when no stack takes it).
    State advance(State s, uint8_t byte);
    // advance over every byte; kDead as soon as one is refused.
    State advance(State s, std::string_view bytes);
    // The text so far is complete (a stack is empty).
    bool accepting(State s) const;
    // Only the empty stack: complete and nothing can follow.
    bool finished(State s) const { return stacks(s).size() == 1 && stacks(s)[0] == kEmptyStack; }
    std::span<const uint32_t> stacks(State s) const;  // sorted stack ids

    // A stack's top position (an index into grammar().elems, a byte set); not for kEmptyStack.
    uint32_t top(uint32_t stack) const { return nodes_[stack].pos; }
    uint32_t parent(uint32_t stack) const { return nodes_[stack].parent; }
    // The stack `parent` with `pos` on top (pos a byte-set position).
    uint32_t push(uint32_t parent, uint32_t pos) { return intern(parent, pos); }
    // The state {stack}.
    State single(uint32_t stack);
    size_t n_stacks() const { return nodes_.size(); }
    size_t n_states() const { return set_begin_.size() - 1; }

private:
    struct Node {
        uint32_t parent;
        uint32_t pos;
    };
    uint32_t intern(uint32_t parent, uint32_t pos);
    // The stacks whose tops are byte sets (or the empty stack) that `stack` stands for, appended to out.
    void expand(uint32_t stack, std::vector<uint32_t>& out);
    State intern_set(std::vector<uint32_t>& stacks);  // sorts and dedups

    std::shared_ptr<const Grammar> g_;
    std::vector<Node> nodes_;                          // [n_stacks]; 0 is the empty stack
    IdMap node_ids_;                                   // (parent << 32 | pos) -> stack
    std::vector<uint32_t> set_data_;                   // the stacks of every state, one after another
    std::vector<uint32_t> set_begin_;                  // [n_states + 1] offsets into set_data_
    std::unordered_multimap<uint64_t, State> set_ids_;  // hash of a set's stacks -> state
    IdMap next_;                                       // (state << 8 | byte) -> state
    std::unordered_map<uint32_t, State> singles_;      // stack -> {stack}
    std::vector<std::vector<uint32_t>> expanded_;      // [n_stacks] expand()'s result, once computed
    std::vector<uint8_t> has_expanded_;                // [n_stacks]
    std::vector<uint32_t> work_, scratch_;
    State start_ = kDead;
};

}  // namespace quill::grammar
