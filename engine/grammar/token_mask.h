// Token masks: which tokens of a vocabulary may come next in a grammar's state. A token is allowed iff the
// automaton takes every one of its bytes (so tokens spanning several terminals, byte-fallback tokens and partial
// UTF-8 are judged by their bytes); an end-of-generation token iff the text is complete.
//
// The cost is kept off the decode loop as XGrammar does: the vocabulary is a trie walked with the automaton, which
// drops a whole subtree at the first byte refused; a walk is made once per stack top (the top kLocalFrames frames of
// a stack, with nothing below) and gives the tokens accepted whatever lies below (a bitset) and the few that reach
// below, which are checked against the whole stack each time; and the mask of each state met is cached. A walk
// runs on a dense table of the states it meets, where a byte outside every stack's byte set is refused without
// asking the automaton. A generation's next mask, when not cached, is computed on a thread of its own while the
// forward pass runs (GrammarMatcher).
#pragma once

#include "engine/grammar/automaton.h"

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
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
// use the same grammar, possibly on several threads (GrammarMatcher's overlap): the members below take the
// grammar's lock, but automaton() and the span mask() returns are for one thread only.
class TokenGrammar {
public:
    // token_bytes[id]: what each token adds to the text ("" for control tokens: never allowed); eog: the
    // end-of-generation tokens, allowed where the text is complete.
    TokenGrammar(std::shared_ptr<const Grammar> g, std::vector<std::string> token_bytes, std::vector<int32_t> eog);
    // The vocabulary's token_bytes, but the control tokens in `shown` (sorted) have their text (shown_bytes).
    TokenGrammar(std::shared_ptr<const Grammar> g, const Tokenizer& tok, std::span<const int32_t> shown = {});

    // The same grammar and vocabulary with empty caches and a new automaton (whose tables have not grown).
    std::shared_ptr<TokenGrammar> renewed() const;

    using State = Automaton::State;
    using Mask = std::shared_ptr<const std::vector<uint64_t>>;  // [n_words]
    const Grammar& grammar() const { return *grammar_; }
    Automaton& automaton() { return a_; }  // one thread only
    int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
    bool is_eog(int32_t token) const;
    State start() const { return a_.start(); }

    // Bit t of word t / 64 is set iff token t is allowed in state s. Valid until the next call (one thread only).
    std::span<const uint64_t> mask(State s);
    // The same mask, kept alive for the caller; cached_mask: only when cached (else null, and nothing computed).
    Mask shared_mask(State s);
    Mask cached_mask(State s);
    // The state after token (its bytes; an end-of-generation token leaves the state as it is).
    State accept(State s, int32_t token);
    // The text is complete (an end-of-generation token is allowed); finished: complete and nothing can follow.
    bool accepting(State s) const;
    bool finished(State s) const;
    size_t n_stacks() const;

    struct Stats {
        size_t local_walks = 0;   // trie walks for a stack top
        size_t walk_nodes = 0;    // trie nodes those walks visited
        size_t masks_built = 0;   // state masks computed
        size_t mask_hits = 0;     // state masks found in the cache
        size_t dense_steps = 0;     // transitions the walks asked the automaton for
        size_t dense_restarts = 0;  // times the walks' dense table was full and started over
    };
    Stats stats() const;
    size_t trie_size() const { return trie_.size(); }

private:
    struct LocalMask {
        // tokens accepted whatever lies below the top frames: the mask's words that are not zero, and where
        // (most walks accept few tokens, and a 262k vocabulary's mask is 32 KiB)
        std::vector<uint32_t> word_index;
        std::vector<uint64_t> words;
        std::vector<int32_t> uncertain;  // tokens that reach below them, sorted by bytes
    };
    Mask find_or_build(State s);  // with the lock held
    const LocalMask& local_mask(uint32_t local_stack);
    uint32_t local_key(uint32_t stack);
    void check_uncertain(uint32_t stack, const LocalMask& local, std::vector<uint64_t>& mask);
    void build_mask(State s, std::vector<uint64_t>& mask);

    std::shared_ptr<const Grammar> grammar_;
    std::vector<std::string> bytes_;  // [n_vocab]
    std::vector<int32_t> eog_;        // sorted
    mutable std::mutex mu_;           // guards everything below
    Automaton a_;
    TokenTrie trie_;
    size_t n_words_;
    std::unordered_map<uint32_t, std::unique_ptr<LocalMask>> locals_;  // local stack -> its mask
    std::unordered_map<State, Mask> masks_;                            // state -> mask
    std::vector<State> walk_;                                          // per trie depth
    std::vector<uint8_t> below_;                                       // per trie depth
    std::vector<uint32_t> frames_;
    std::vector<uint64_t> scratch_;  // [n_words] a walk's accepted tokens
    // local_mask's dense table of the states a walk meets (token_mask.cpp, dense_restart)
    static constexpr uint32_t kDeadIndex = 0, kUnknownNext = ~uint32_t{0};
    void dense_restart(uint32_t depth);
    uint32_t dense_index(State s);
    uint32_t dense_step(uint32_t depth, uint8_t b);
    IdMap dense_ids_;                      // state -> its index
    std::vector<State> dense_states_;      // [n_dense] index -> state
    std::vector<uint8_t> dense_accepting_;  // [n_dense]
    std::vector<ByteSet> dense_first_;     // [n_dense] the bytes that do not lead to the dead state
    std::vector<uint32_t> dense_next_;     // [n_dense][256] transitions (indices), kUnknownNext while unknown
    std::vector<uint32_t> path_;           // per trie depth: the walk's dense indices
    Stats stats_;
};

// One generation's place in a grammar: the state of its text so far, and that state's mask.
//
// With overlap, accept() hands the next state's mask, when the grammar has not cached it, to the matcher's own
// thread, so that it is computed while the caller runs the next forward pass; mask() waits for it. The masks are the
// same either way (a state's mask depends on the state alone).
class GrammarMatcher {
public:
    explicit GrammarMatcher(std::shared_ptr<TokenGrammar> g, bool overlap = false);
    ~GrammarMatcher();
    GrammarMatcher(const GrammarMatcher&) = delete;
    GrammarMatcher& operator=(const GrammarMatcher&) = delete;

    // The current state's mask; valid until the next accept(). Rethrows what computing it threw.
    std::span<const uint64_t> mask();
    void accept(int32_t token);
    // The text is complete (an end-of-generation token is allowed).
    bool complete() const { return g_->accepting(state_); }
    // Complete, and nothing can follow.
    bool finished() const { return g_->finished(state_); }
    int32_t n_vocab() const { return g_->n_vocab(); }
    // Masks computed on the matcher's thread so far.
    size_t masks_ahead() const { return masks_ahead_; }
    // The grammar, once the matcher's thread is idle, and the current state in `state`: for walking ahead of the
    // accepted tokens (a draft model's guesses) with the grammar's shared_mask() and accept(), which take its lock.
    TokenGrammar& look_ahead(TokenGrammar::State& state);

private:
    void prepare();  // the current state's mask: from the cache, or handed to the thread
    void wait();     // until the thread is idle
    void work();     // the thread

    std::shared_ptr<TokenGrammar> g_;
    TokenGrammar::State state_;
    TokenGrammar::Mask mask_;  // the current state's, once known
    bool overlap_;
    std::mutex mu_;  // guards mask_, pending_, stop_ and error_ while the thread runs
    std::condition_variable cv_;
    bool pending_ = false, stop_ = false;
    std::exception_ptr error_;
    size_t masks_ahead_ = 0;
    std::thread worker_;  // started at the first mask not cached
};

}  // namespace quill::grammar
