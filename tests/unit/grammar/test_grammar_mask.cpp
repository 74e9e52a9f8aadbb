// Token masks under a grammar: for states reached by random walks, the mask equals a brute-force check of every
// token's bytes, on a byte-level BPE vocabulary and on SPM ones with byte fallback; and the sampler draws only what
// the mask allows.
#include "engine/error.h"
#include "engine/format/gguf.h"
#include "engine/grammar/constraint.h"
#include "engine/grammar/token_mask.h"
#include "engine/runtime/sampler.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <random>

namespace test_grammar_mask {

using namespace quill;
using namespace quill::grammar;

namespace {

const char* const kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":12},
  "age":{"type":"integer","minimum":0,"maximum":130},
  "tags":{"type":"array","items":{"enum":["a","b c","\u00e9t\u00e9"]},"maxItems":3},
  "note":{"type":"string","pattern":"^[\u3041-\u309f]+!?$"},
  "child":{"anyOf":[{"type":"null"},{"$ref":"#"}]}},
  "required":["name"],"additionalProperties":false})";

const char* const kGbnf = R"(root ::= (word " ")* [ぁ-ゟ😀-🙏]{1,4} "\n"
word ::= [a-zA-Z]+ | "\"" [^"\n]* "\""
)";

std::vector<ConstraintSpec> specs() {
    return {{ConstraintSpec::Kind::json_schema, kSchema, "schema"},
            {ConstraintSpec::Kind::json_object, "", "json"},
            {ConstraintSpec::Kind::gbnf, kGbnf, "gbnf"},
            {ConstraintSpec::Kind::regex, "[0-9]{1,3}(\\.[0-9]+)? (?:apples|pears)", "regex"}};
}

// The allowed set by definition: every token whose bytes the automaton takes whole; end-of-generation tokens where
// the text is complete.
std::vector<bool> brute_force(Automaton& a, Automaton::State s, const Tokenizer& tok) {
    std::vector<bool> allowed(static_cast<size_t>(tok.n_vocab()));
    for (int32_t t = 0; t < tok.n_vocab(); ++t) {
        if (tok.is_eog(t)) {
            allowed[static_cast<size_t>(t)] = a.accepting(s);
            continue;
        }
        const std::string& b = tok.token_bytes(t);
        allowed[static_cast<size_t>(t)] = !b.empty() && a.advance(s, b) != Automaton::kDead;
    }
    return allowed;
}

// Random walks through each grammar, comparing the mask with the brute force at every step.
void check_masks(const Tokenizer& tok, int walks, int steps) {
    size_t mid_character = 0;  // walks that stopped inside a UTF-8 character
    for (const ConstraintSpec& spec : specs()) {
        auto tg = std::make_shared<TokenGrammar>(compile_constraint(spec), tok);
        // a second copy checks the brute force, so that its transitions never warm the first one's caches
        Automaton ref(compile_constraint(spec));
        std::mt19937 rng(42);
        size_t checked = 0, partial_utf8 = 0;
        for (int w = 0; w < walks; ++w) {
            Automaton::State s = tg->automaton().start();
            Automaton::State rs = ref.start();
            for (int step = 0; step < steps; ++step) {
                const std::span<const uint64_t> mask = tg->mask(s);
                const std::vector<bool> want = brute_force(ref, rs, tok);
                std::vector<int32_t> allowed;
                size_t mismatches = 0;
                for (int32_t t = 0; t < tok.n_vocab(); ++t) {
                    const bool got = (mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1;
                    if (got != want[static_cast<size_t>(t)]) {
                        if (mismatches++ < 3)
                            UNSCOPED_INFO(spec.source << " walk " << w << " step " << step << ": token " << t << " '"
                                                      << tok.token_bytes(t) << "' mask " << got);
                    }
                    if (got) allowed.push_back(t);
                }
                CHECK(mismatches == 0);
                ++checked;
                std::vector<int32_t> text_tokens;
                for (int32_t t : allowed)
                    if (!tok.is_eog(t)) text_tokens.push_back(t);
                if (text_tokens.empty()) break;
                // favour short tokens now and then, so that walks also stop inside characters and strings
                int32_t pick = text_tokens[std::uniform_int_distribution<size_t>(0, text_tokens.size() - 1)(rng)];
                if (rng() % 3 == 0)
                    for (int32_t t : text_tokens)
                        if (tok.token_bytes(t).size() == 1 && rng() % 4 == 0) pick = t;
                s = tg->accept(s, pick);
                rs = ref.advance(rs, tok.token_bytes(pick));
                const auto last = static_cast<uint8_t>(tok.token_bytes(pick).back());
                partial_utf8 += last >= 0xC0 || (last >= 0x80 && tok.token_bytes(pick).size() == 1);
                mid_character += last >= 0xC0;
            }
        }
        INFO(spec.source << ": " << checked << " states, " << partial_utf8 << " ending mid-character");
        CHECK(checked >= static_cast<size_t>(walks));
    }
    CHECK(mid_character > 0);
}

std::unique_ptr<Tokenizer> tiny_tokenizer(const test::TinyVocab& v) {
    const auto dir = test::temp_dir("grammar-vocab");
    const std::string path = (dir / "vocab.gguf").string();
    GgufWriter w;
    v.write(w);
    w.write(path);
    return Tokenizer::from_gguf(GgufFile::open(path));
}

}  // namespace

TEST_CASE("grammar masks equal a brute-force check of every token (tiny SPM with byte fallback, tiny BPE)",
          "[grammar]") {
    check_masks(*tiny_tokenizer(test::tiny_spm_vocab(true)), 6, 40);
    check_masks(*tiny_tokenizer(test::tiny_bpe_vocab()), 6, 40);
}

TEST_CASE("grammar masks equal a brute-force check of every token (stories260K: SPM)", "[grammar][model]") {
    const auto path = test::require_testdata("models/stories260K.gguf");
    if (!path) return;
    check_masks(*Tokenizer::from_gguf(GgufFile::open(path->string())), 5, 40);
}

TEST_CASE("grammar masks equal a brute-force check of every token (default model: byte-level BPE)",
          "[grammar][model]") {
    const auto path = test::require_default_model();
    if (!path) return;
    check_masks(*Tokenizer::from_gguf(GgufFile::open(path->string())), 3, 25);
}

TEST_CASE("a byte-fallback token may start a character the grammar wants, and EOS waits for a complete text",
          "[grammar]") {
    const test::TinyVocab v = test::tiny_spm_vocab(true);
    const auto tok = tiny_tokenizer(v);
    auto tg = std::make_shared<TokenGrammar>(
        compile_constraint({ConstraintSpec::Kind::gbnf, "root ::= \"é\" [0-9]", "g"}), *tok);
    GrammarMatcher m(tg);
    auto allowed = [&](int32_t t) { return ((m.mask()[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) != 0; };
    const int32_t c3 = v.id("<0xC3>"), a9 = v.id("<0xA9>"), a8 = v.id("<0xA8>"), seven = v.id("7");
    CHECK(allowed(c3));
    CHECK_FALSE(allowed(a9));
    CHECK_FALSE(allowed(tok->eos()));
    m.accept(c3);
    CHECK(allowed(a9));
    CHECK_FALSE(allowed(a8));  // è
    m.accept(a9);
    CHECK(allowed(seven));
    CHECK_FALSE(m.complete());
    m.accept(seven);
    CHECK(m.complete());
    CHECK(m.finished());
    CHECK(allowed(tok->eos()));
    CHECK_FALSE(allowed(seven));
}

TEST_CASE("the sampler draws only allowed tokens, and temperature, top-k and penalties act on them", "[grammar]") {
    const auto tok = tiny_tokenizer(test::tiny_bpe_vocab());
    auto tg = std::make_shared<TokenGrammar>(
        compile_constraint({ConstraintSpec::Kind::regex, "[0-9]{2,4}", "--regex"}), *tok);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0, 3);
    for (int round = 0; round < 40; ++round) {
        SamplingParams p;
        p.temperature = round % 4 == 0 ? 0.0f : 1.0f;
        p.top_k = round % 3 == 0 ? 0 : 5;
        p.min_p = 0;
        p.top_p = 1;
        p.repeat_penalty = round % 2 ? 1.3f : 1.0f;
        p.seed = static_cast<uint64_t>(round);
        Sampler s(p);
        s.constrain(tg);
        GrammarMatcher m(tg);
        std::string text;
        for (int step = 0; step < 6 && !m.finished(); ++step) {
            std::vector<float> logits(static_cast<size_t>(tok->n_vocab()) + 7);  // a padded row
            for (float& l : logits) l = normal(rng);
            const std::vector<float> raw = logits;
            const auto mask = m.mask();
            const int32_t t = s.sample(logits);
            REQUIRE(t < tok->n_vocab());
            REQUIRE(((mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) != 0);
            if (p.temperature == 0 && p.repeat_penalty == 1.0f) {  // greedy: the best allowed raw logit
                for (int32_t u = 0; u < tok->n_vocab(); ++u)
                    if ((mask[static_cast<size_t>(u) >> 6] >> (u & 63)) & 1)
                        CHECK(raw[static_cast<size_t>(u)] <= raw[static_cast<size_t>(t)]);
            }
            s.accept(t);
            s.accept_output(t);
            m.accept(t);
            if (!tok->is_eog(t)) text += tok->token_bytes(t);
            if (tok->is_eog(t)) break;
        }
        CHECK(text.size() <= 4);
        for (char c : text) CHECK((c >= '0' && c <= '9'));
        CHECK(s.grammar_finished() == m.finished());
    }
}

TEST_CASE("a renewed token grammar starts with empty tables and gives the same masks", "[grammar]") {
    const auto tok = tiny_tokenizer(test::tiny_bpe_vocab());
    auto tg = std::make_shared<TokenGrammar>(compile_constraint(specs()[0]), *tok);
    TokenGrammar::State s = tg->automaton().start();
    for (const char* piece : {"{", "\"name\"", ": \"", "x"}) s = tg->automaton().advance(s, piece);
    REQUIRE(s != Automaton::kDead);
    const std::vector<uint64_t> deep(tg->mask(s).begin(), tg->mask(s).end());
    const std::vector<uint64_t> first(tg->mask(tg->automaton().start()).begin(),
                                      tg->mask(tg->automaton().start()).end());
    auto fresh = tg->renewed();
    CHECK(fresh->automaton().n_stacks() < tg->automaton().n_stacks());
    const auto again = fresh->mask(fresh->automaton().start());
    CHECK(std::vector<uint64_t>(again.begin(), again.end()) == first);
    const auto s2 = fresh->automaton().advance(fresh->automaton().start(), "{\"name\": \"x");
    const auto m2 = fresh->mask(s2);
    CHECK(std::vector<uint64_t>(m2.begin(), m2.end()) == deep);
}

}  // namespace test_grammar_mask
