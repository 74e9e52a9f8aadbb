// Speculative decoding with a sampler that has state (repeat penalties, a grammar, logprobs): the scheduler samples
// each guessed row in turn after the tokens before it moved the sampler's state, so the tokens, the logprobs and a
// seed's draws are those of plain decoding, with a draft model's guesses and with prompt lookup's.
#include "engine/cpu/cpu_backend.h"
#include "engine/grammar/constraint.h"
#include "engine/model/model.h"
#include "engine/runtime/draft.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/scheduler.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_loaded.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

namespace test_speculative_state {

using namespace quill;

namespace {

using test::Loaded;
using test::load_tiny;
using test::small_spec;

std::unique_ptr<Backend> cpu_backend(const Model& m, int64_t n_slots) {
    cpu::CpuBackendOptions o;
    o.n_threads = 1;
    o.n_ctx = 256;
    o.n_slots = n_slots;
    return std::make_unique<cpu::CpuBackend>(m.config, m.weights, o);
}

struct Outcome {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<TokenLogprobs>> logprobs;
    int guessed = 0, accepted = 0;
};

// Each prompt through one scheduler over n_slots slots.
Outcome run_prompts(const Loaded& target, int64_t n_slots, const std::vector<std::string>& prompts,
                    const GenerationParams& p) {
    auto b = cpu_backend(*target.model, n_slots);
    Outcome r;
    std::vector<std::unique_ptr<Generation>> gens;
    Scheduler sched(
        *b, SchedulerOptions{64}, [](int64_t, std::string_view) {},
        [&](int64_t, const GenerationStats& st) { r.guessed += st.guessed_tokens, r.accepted += st.accepted_tokens; });
    for (size_t i = 0; i < prompts.size(); ++i) {
        gens.push_back(std::make_unique<Generation>(*target.tok, target.tok->encode(prompts[i], true, false), p, 256));
        sched.submit(static_cast<int64_t>(i), *gens.back());
    }
    while (sched.step()) {
    }
    for (const auto& g : gens) {
        r.tokens.push_back(g->generated());
        r.logprobs.push_back(g->logprobs());
    }
    return r;
}

const std::vector<std::string> kPrompts = {"Once upon a time", "The little dog ran and ran and ran", "One day, Tom"};

}  // namespace

TEST_CASE("speculation with penalties or a grammar or logprobs gives the tokens and logprobs of plain decoding",
          "[speculative]") {
    const Loaded target = load_tiny(small_spec(1, GgmlType::F32));
    // the same weights: most guesses are the target's tokens
    const Loaded close = load_tiny(small_spec(1, GgmlType::Q8_0));
    struct Case {
        std::string name;
        std::function<void(GenerationParams&)> set;
    };
    const std::vector<Case> cases = {
        {"repeat penalty", [](GenerationParams& p) { p.sampling.repeat_penalty = 1.3f, p.sampling.repeat_last_n = 16; }},
        {"frequency and presence penalties",
         [](GenerationParams& p) { p.sampling.frequency_penalty = 0.5f, p.sampling.presence_penalty = 0.3f; }},
        {"logprobs", [](GenerationParams& p) { p.logprobs = 3; }},
        {"grammar",
         [&](GenerationParams& p) {
             p.grammar = grammar::token_grammar({grammar::ConstraintSpec::Kind::regex, "[a-z ,]{8,60}\\.", "regex"},
                                                *target.tok);
         }},
    };
    for (const Case& c : cases) {
        for (float temp : {0.0f, 0.8f}) {
            for (int64_t n_slots : {1, 3}) {
                GenerationParams plain;
                plain.max_tokens = 40;
                plain.sampling.temperature = temp;
                plain.sampling.seed = 7;
                c.set(plain);
                const Outcome want = run_prompts(target, n_slots, kPrompts, plain);
                for (const char* how : {"draft", "lookup"}) {
                    INFO(c.name << ", temp " << temp << ", " << n_slots << " slots, " << how);
                    GenerationParams p = plain;
                    if (c.name == "grammar") p.grammar = p.grammar->renewed();
                    auto db = cpu_backend(*close.model, n_slots);
                    if (std::string(how) == "draft") p.drafter = std::make_shared<Drafter>(*db);
                    else p.lookup = 6;
                    const Outcome got = run_prompts(target, n_slots, kPrompts, p);
                    CHECK(got.tokens == want.tokens);
                    REQUIRE(got.logprobs.size() == want.logprobs.size());
                    for (size_t i = 0; i < got.logprobs.size(); ++i) {
                        REQUIRE(got.logprobs[i].size() == want.logprobs[i].size());
                        for (size_t t = 0; t < got.logprobs[i].size(); ++t) {
                            CHECK(got.logprobs[i][t].token == want.logprobs[i][t].token);
                            CHECK(got.logprobs[i][t].logprob == want.logprobs[i][t].logprob);
                            CHECK(got.logprobs[i][t].top == want.logprobs[i][t].top);
                        }
                    }
                    CHECK(got.guessed > 0);
                    if (std::string(how) == "draft" && temp == 0.0f) CHECK(got.accepted * 2 > got.guessed);
                }
            }
        }
    }
}

}  // namespace test_speculative_state
