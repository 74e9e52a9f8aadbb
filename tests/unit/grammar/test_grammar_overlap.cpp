// The next state's mask computed on the matcher's own thread while the caller runs the forward pass: the same masks
// and the same tokens as without, for one matcher, one sampler, and a batch of generations sharing one grammar.
#include "engine/cpu/cpu_backend.h"
#include "engine/format/gguf.h"
#include "engine/grammar/constraint.h"
#include "engine/grammar/token_mask.h"
#include "engine/model/model.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/scheduler.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <memory>
#include <random>

namespace test_grammar_overlap {

using namespace quill;
using namespace quill::grammar;

namespace {

// a record with a discriminated union, a bounded number, a short string and a recursive link
const char* const kSchema = R"({"type":"object","properties":{
  "id":{"type":"integer","minimum":1,"maximum":9999},
  "shape":{"oneOf":[
    {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number","minimum":0,"maximum":10}},
     "required":["kind","r"],"additionalProperties":false},
    {"type":"object","properties":{"kind":{"const":"box"},"w":{"type":"integer"},"h":{"type":"integer"}},
     "required":["kind","w","h"],"additionalProperties":false}]},
  "label":{"type":"string","maxLength":16},
  "next":{"anyOf":[{"type":"null"},{"$ref":"#"}]}},
  "required":["id","shape"],"additionalProperties":false})";

std::vector<ConstraintSpec> specs() {
    return {{ConstraintSpec::Kind::json_schema, kSchema, "schema"},
            {ConstraintSpec::Kind::json_object, "", "json"},
            {ConstraintSpec::Kind::regex, "[0-9]{1,3}(\\.[0-9]+)? (?:apples|pears)", "regex"}};
}

std::unique_ptr<Tokenizer> spm_tokenizer() {
    return Tokenizer::from_gguf(GgufFile::open(test::tiny_model_file(test::TinyModel::spm).string()));
}

bool has(std::span<const uint64_t> mask, int32_t t) { return (mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1; }

}  // namespace

TEST_CASE("a matcher that computes its next mask on its thread gives the masks one without does", "[grammar]") {
    const auto tok = spm_tokenizer();
    for (const ConstraintSpec& spec : specs()) {
        INFO(spec.source);
        // each its own grammar, so that the overlapped one meets cold states
        GrammarMatcher ahead(token_grammar(spec, *tok), true), plain(token_grammar(spec, *tok), false);
        std::mt19937 rng(7);
        int steps = 0;
        for (; steps < 300; ++steps) {
            const std::span<const uint64_t> a = ahead.mask();
            const std::span<const uint64_t> b = plain.mask();
            REQUIRE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
            std::vector<int32_t> text;
            for (int32_t t = 0; t < tok->n_vocab(); ++t)
                if (has(b, t) && !tok->is_eog(t)) text.push_back(t);
            if (text.empty()) break;
            const int32_t pick = text[std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng)];
            ahead.accept(pick);
            plain.accept(pick);
            REQUIRE(ahead.complete() == plain.complete());
        }
        CHECK(steps >= 3);
        CHECK(ahead.masks_ahead() > 0);
        CHECK(plain.masks_ahead() == 0);
    }
}

TEST_CASE("a constrained sampler draws the same tokens with its next mask computed ahead as without", "[grammar]") {
    const auto tok = spm_tokenizer();
    for (const ConstraintSpec& spec : specs()) {
        INFO(spec.source);
        SamplingParams p;
        p.temperature = 1.0f;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        p.repeat_penalty = 1.1f;
        for (uint64_t seed = 1; seed <= 3; ++seed) {
            p.seed = seed;
            Sampler ahead(p), plain(p);
            ahead.constrain(token_grammar(spec, *tok), true);
            plain.constrain(token_grammar(spec, *tok), false);
            std::mt19937 rng(static_cast<uint32_t>(seed));
            std::normal_distribution<float> normal(0.0f, 2.0f);
            std::vector<float> row(static_cast<size_t>(tok->n_vocab()));
            std::vector<int32_t> a_tokens, b_tokens;
            for (int step = 0; step < 120; ++step) {
                for (float& l : row) l = normal(rng);
                std::vector<float> a_row = row, b_row = row;
                const int32_t a = ahead.sample(a_row), b = plain.sample(b_row);
                a_tokens.push_back(a);
                b_tokens.push_back(b);
                if (a != b || tok->is_eog(a) || plain.grammar_finished()) break;
                for (Sampler* s : {&ahead, &plain}) {
                    s->accept_output(a);
                    s->accept(a);
                }
            }
            CHECK(a_tokens == b_tokens);
            CHECK(a_tokens.size() >= 3);
        }
    }
}

TEST_CASE("a batch of generations sharing one grammar gives the same texts with the masks computed ahead",
          "[grammar]") {
    const auto model = Model::load(test::tiny_model_file(test::TinyModel::spm).string());
    const auto tok = Tokenizer::from_gguf(model->file);
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = 256;
    o.n_slots = 4;
    cpu::CpuBackend backend(model->config, model->weights, o);
    const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "One day", "Mom said",
                                              "A bird sat", "The sun was"};
    auto run = [&](bool overlap) {
        GenerationParams p;
        p.max_tokens = 60;
        p.sampling.temperature = 1.0f;
        p.grammar = token_grammar(specs()[0], *tok);  // one grammar for every request
        std::vector<std::unique_ptr<Generation>> gens;
        std::vector<std::string> texts(prompts.size());
        Scheduler sched(
            backend, SchedulerOptions{64}, [&](int64_t id, std::string_view t) { texts[static_cast<size_t>(id)] += t; },
            [](int64_t, const GenerationStats&) {});
        for (size_t i = 0; i < prompts.size(); ++i) {
            p.sampling.seed = 10 + i;
            gens.push_back(std::make_unique<Generation>(*tok, tok->encode(prompts[i], true, false), p, 256));
            if (!overlap) gens.back()->sampler().constrain(p.grammar, false);
            sched.submit(static_cast<int64_t>(i), *gens.back());
        }
        while (sched.step()) {
        }
        return texts;
    };
    const std::vector<std::string> ahead = run(true), plain = run(false);
    CHECK(ahead == plain);
    size_t started = 0;
    for (const std::string& t : ahead) started += t.rfind("{", 0) == 0;
    CHECK(started == prompts.size());
}

}  // namespace test_grammar_overlap
