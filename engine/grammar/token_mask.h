// Token masks: which tokens of a vocabulary may come next in a grammar's state. A token is allowed iff the
// automaton takes every one of its bytes (so tokens spanning several terminals, byte-fallback tokens and partial
// UTF-8 are judged by their bytes); an end-of-generation token iff the text is complete.
//
// The cost is kept off the decode loop as XGrammar does: the vocabulary is a trie walked with the automaton, which
// drops a whole subtree at the first byte refused; a walk is made once per stack top (the top kLocalFrames frames of
// a stack, with nothing below) and gives the tokens accepted whatever lies below (a bitset) and the few that reach
// below, which are checked against the whole stack each time; and the mask of each state met is cached.
#pragma once

#include "engine/grammar/automaton.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace quill {
class Tokenizer;
}

namespace quill::grammar {

// The vocabulary's token bytes as a trie, nodes in preorder: a subtree is a range of nodes and of tokens.
class TokenTrie {
public:
    // Tokens with empty bytes are left out.
    explicit TokenTrie(const std::vector<std::string>& token_bytes);
    size_t size() const { return byte_.size(); }
    uint8_t byte(size_t node) const { return byte_[node]; }
    uint32_t depth(size_t node) const { return depth_[node]; }  // 1 for a first byte
    uint32_t max_depth() const { return max_depth_; }
    size_t subtree_end(size_t node) const { return end_[node]; }  // the node after its subtree
    // The tokens whose bytes end at node, and those of its whole subtree (token ids).
    std::span<const int32_t> tokens(size_t node) const;
    std::span<const int32_t> subtree_tokens(size_t node) const;

private:
    std::vector<uint8_t> byte_;      // [n_nodes]
    std::vector<uint32_t> depth_;    // [n_nodes]
    std::vector<uint32_t> end_;      // [n_nodes]
    std::vector<uint32_t> tok_begin_;  // [n_nodes + 1] offsets into toks_
    std::vector<int32_t> toks_;       // token ids in preorder (sorted by bytes)
    uint32_t max_depth_ = 0;
};

// A grammar bound to a vocabulary: its automaton, the trie, and the caches of masks. Shared by the requests that
// use the same grammar; not thread-safe (the caches grow): one thread samples at a time.
class TokenGrammar {
public:
    // token_bytes[id]: what each token adds to the text ("" for control tokens: never allowed); eog: the
    // end-of-generation tokens, allowed where the text is complete.
    TokenGrammar(std::shared_ptr<const Grammar> g, std::vector<std::string> token_bytes, std::vector<int32_t> eog);
    TokenGrammar(std::shared_ptr<const Grammar> g, const Tokenizer& tok);

    // The same grammar and vocabulary with empty caches and a new automaton (whose tables have not grown).
    std::shared_ptr<TokenGrammar> renewed() const;

    using State = Automaton::State;
    Automaton& automaton() { return a_; }
    int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
    bool is_eog(int32_t token) const;

    // Bit t of word t / 64 is set iff token t is allowed in state s. Valid until the next call.
    std::span<const uint64_t> mask(State s);
    // The state after token (its bytes; an end-of-generation token leaves the state as it is).
    State accept(State s, int32_t token);

    struct Stats {
        size_t local_walks = 0;   // trie walks for a stack top
        size_t walk_nodes = 0;    // trie nodes those walks visited
        size_t masks_built = 0;   // state masks computed
        size_t mask_hits = 0;     // state masks found in the cache
    };
    const Stats& stats() const { return stats_; }
    size_t trie_size() const { return trie_.size(); }

private:
    struct LocalMask {
        std::vector<uint64_t> accepted;  // [n_words] tokens accepted whatever lies below the top frames
        std::vector<int32_t> uncertain;  // tokens that reach below them, sorted by bytes
    };
    const LocalMask& local_mask(uint32_t local_stack);
    uint32_t local_key(uint32_t stack);
    void check_uncertain(uint32_t stack, const LocalMask& local, std::vector<uint64_t>& mask);
    void build_mask(State s, std::vector<uint64_t>& mask);

    std::shared_ptr<const Grammar> grammar_;
    std::vector<std::string> bytes_;  // [n_vocab]
    std::vector<int32_t> eog_;        // sorted
    Automaton a_;
    TokenTrie trie_;
    size_t n_words_;
    std::unordered_map<uint32_t, std::unique_ptr<LocalMask>> locals_;  // local stack -> its mask
    std::unordered_map<State, std::vector<uint64_t>> masks_;           // state -> mask
    std::vector<State> walk_;                                          // per trie depth
    std::vector<uint8_t> below_;                                       // per trie depth
    std::vector<uint32_t> frames_;
    IdMap dense_ids_;                    // local_mask's states -> their rows in dense_next_
    std::vector<Automaton::State> dense_states_;
    std::vector<uint32_t> dense_next_;   // [states][256] transitions, ~0 while unknown
    Stats stats_;
};

// One generation's place in a grammar: the state of its text so far.
class GrammarMatcher {
public:
    explicit GrammarMatcher(std::shared_ptr<TokenGrammar> g) : g_(std::move(g)), state_(g_->automaton().start()) {}
    std::span<const uint64_t> mask() { return g_->mask(state_); }
    void accept(int32_t token) { state_ = g_->accept(state_, token); }
    // The text is complete (an end-of-generation token is allowed).
    bool complete() const { return g_->automaton().accepting(state_); }
    // Complete, and nothing can follow.
    bool finished() const { return g_->automaton().finished(state_); }
    int32_t n_vocab() const { return g_->n_vocab(); }

private:
    std::shared_ptr<TokenGrammar> g_;
    TokenGrammar::State state_;
};

}  // namespace quill::grammar
