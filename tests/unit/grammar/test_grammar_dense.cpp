// The trie walks' dense table of automaton states: a walk that meets more states than it holds starts it over and
// still gives exact masks.
#include "engine/grammar/constraint.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/token_mask.h"

#include <catch2/catch.hpp>

#include <random>
#include <set>

namespace test_grammar_dense {

using namespace quill;
using namespace quill::grammar;

TEST_CASE("a trie walk meeting more states than the dense table holds gives exact masks", "[grammar]") {
    // 3000 random words of 8 letters: a grammar with a state per distinct prefix (about 12,000), and a vocabulary of
    // the words, their 4-letter halves and the single letters
    std::mt19937 rng(3);
    std::set<std::string> words;
    while (words.size() < 3000) {
        std::string w;
        for (int i = 0; i < 8; ++i) w += static_cast<char>('a' + rng() % 8);
        words.insert(w);
    }
    std::string gbnf = "root ::= word (\" \" word)*\nword ::= ";
    std::set<std::string> vocab;
    for (char c = 'a'; c <= 'h'; ++c) vocab.insert(std::string(1, c));
    vocab.insert(" ");
    bool first = true;
    for (const std::string& w : words) {
        gbnf += (first ? "\"" : " | \"") + w + "\"";
        first = false;
        vocab.insert(w);
        vocab.insert(w.substr(0, 4));
        vocab.insert(w.substr(4));
    }
    gbnf += "\n";
    std::vector<std::string> bytes(vocab.begin(), vocab.end());
    bytes.push_back("");  // the end-of-generation token
    const auto eog = static_cast<int32_t>(bytes.size() - 1);
    auto g = std::make_shared<const Grammar>(parse_gbnf(gbnf));
    TokenGrammar tg(g, bytes, {eog});
    Automaton ref(g);
    auto check = [&](std::string_view text) {
        INFO(text);
        const auto s = tg.automaton().advance(tg.automaton().start(), text);
        const auto rs = ref.advance(ref.start(), text);
        const std::span<const uint64_t> mask = tg.mask(s);
        size_t allowed = 0, wrong = 0;
        for (int32_t t = 0; t < static_cast<int32_t>(bytes.size()); ++t) {
            const bool got = (mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1;
            const bool want = t == eog ? ref.accepting(rs)
                                       : ref.advance(rs, bytes[static_cast<size_t>(t)]) != Automaton::kDead;
            wrong += got != want;
            allowed += got;
        }
        CHECK(wrong == 0);
        CHECK(allowed > 0);
    };
    const std::string w0 = *words.begin(), w1 = *words.rbegin();
    for (const std::string& text : {std::string(), w0.substr(0, 3), w0 + " ", w0 + " " + w1.substr(0, 5), w1})
        check(text);
    CHECK(tg.stats().dense_restarts > 0);
}

}  // namespace test_grammar_dense
