// Speculative decoding: the rejection-sampling rule (Sampler::check_guess) keeps the model's distribution, a draft
// model's guesses never change greedy text (reference and CPU backends, every ISA, one sequence and a continuous
// batch), and sampled text keeps its distribution with lookup's and a draft model's guesses (chi-squared against
// plain sampling over many seeds).
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/reference/reference_backend.h"
#include "engine/runtime/draft.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/scheduler.h"
#include "tests/support/backend_checks.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_loaded.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>

namespace test_speculative {

using namespace quill;

namespace {

using test::Loaded;
using test::load_tiny;
using test::small_spec;

std::unique_ptr<Backend> cpu_backend(const Model& m, int64_t n_slots, std::optional<cpu::Isa> isa = {}) {
    cpu::CpuBackendOptions o;
    o.n_threads = 1;
    o.n_ctx = 256;
    o.n_slots = n_slots;
    o.isa = isa;
    return std::make_unique<cpu::CpuBackend>(m.config, m.weights, o);
}

std::unique_ptr<Backend> reference_backend(const Model& m, int64_t n_slots) {
    return std::make_unique<ReferenceBackend>(m.config, m.weights, ReferenceBackendOptions{256, n_slots, KvType::f32});
}

// Each prompt's text through one scheduler over the backend's slots, with the stats of each.
struct Texts {
    std::vector<std::string> text;
    std::vector<GenerationStats> stats;
};

Texts run_prompts(Backend& b, const Tokenizer& tok, const std::vector<std::string>& prompts,
                  const GenerationParams& p) {
    Texts r;
    r.text.resize(prompts.size());
    r.stats.resize(prompts.size());
    Scheduler sched(
        b, SchedulerOptions{64}, [&](int64_t id, std::string_view t) { r.text[id] += t; },
        [&](int64_t id, const GenerationStats& st) { r.stats[id] = st; });
    std::vector<std::unique_ptr<Generation>> gens;
    for (size_t i = 0; i < prompts.size(); ++i) {
        gens.push_back(std::make_unique<Generation>(tok, tok.encode(prompts[i], true, false), p, 256));
        sched.submit(static_cast<int64_t>(i), *gens.back());
    }
    while (sched.step()) {
    }
    return r;
}

const std::vector<std::string> kPrompts = {"Once upon a time", "The little dog ran and ran and ran", "One day, Tom",
                                           "Lily wanted to play in the park with the ball"};

// Two-sample chi-squared statistic of equal-sized samples over their categories, those with fewer than 10 in both
// together pooled into one; df: its degrees of freedom.
double chi_squared(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b, int& df) {
    std::map<int32_t, std::pair<int, int>> both;
    for (const auto& [k, n] : a) both[k].first += n;
    for (const auto& [k, n] : b) both[k].second += n;
    std::vector<std::pair<int, int>> bins;
    std::pair<int, int> pooled{0, 0};
    for (const auto& [k, n] : both) {
        if (n.first + n.second >= 10) bins.push_back(n);
        else pooled.first += n.first, pooled.second += n.second;
    }
    if (pooled.first + pooled.second > 0) bins.push_back(pooled);
    double stat = 0;
    for (const auto& [x, y] : bins) stat += static_cast<double>(x - y) * (x - y) / (x + y);
    df = static_cast<int>(bins.size()) - 1;
    return stat;
}

// The chi-squared value that a statistic of df degrees of freedom passes with probability 0.001 (Wilson-Hilferty).
double chi_squared_limit(int df) {
    const double z = 3.09, k = df;
    return k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
}

}  // namespace

TEST_CASE("check_guess keeps the model's distribution for any proposal", "[speculative]") {
    // p over 5 tokens, q over 4 (one of p's tokens unproposed, one of q's outside p).
    TokenDist p{{1, 2, 3, 4, 5}, {0.1, 0.2, 0.3, 0.15, 0.25}};
    TokenDist q{{2, 3, 5, 7}, {0.4, 0.1, 0.3, 0.2}};
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.seed = 7;
    Sampler s(sp);
    constexpr int kN = 200000;
    std::map<int32_t, int> got;
    int accepted = 0;
    for (int i = 0; i < kN; ++i) {
        const int32_t guess = s.draw(q);
        const GuessVerdict v = s.check_guess(p, q, guess);
        CHECK(v.accepted == (v.token == guess));
        accepted += v.accepted;
        ++got[v.token];
    }
    // Acceptance is sum min(p, q) = 0.2 + 0.1 + 0.25.
    CHECK(std::abs(accepted / double(kN) - 0.55) < 0.01);
    double stat = 0;
    for (size_t i = 0; i < p.ids.size(); ++i) {
        const double want = p.probs[i] * kN;
        stat += (got[p.ids[i]] - want) * (got[p.ids[i]] - want) / want;
    }
    CHECK(got.count(7) == 0);
    CHECK(stat < chi_squared_limit(4));
    // A point mass (a lookup guess): accepted with probability p(guess), else drawn from p without it.
    TokenDist point;
    point.point(3);
    got.clear();
    for (int i = 0; i < kN; ++i) ++got[s.check_guess(p, point, 3).token];
    stat = 0;
    for (size_t i = 0; i < p.ids.size(); ++i) {
        const double want = p.probs[i] * kN;
        stat += (got[p.ids[i]] - want) * (got[p.ids[i]] - want) / want;
    }
    CHECK(stat < chi_squared_limit(4));
}

TEST_CASE("Sampler::distribution is what sample() draws from", "[speculative]") {
    std::vector<float> logits = {0.5f, 2.0f, 1.0f, -1.0f, 2.0f, 0.0f};
    SamplingParams sp;
    sp.temperature = 0.0f;
    TokenDist d;
    {
        auto row = logits;
        Sampler(sp).distribution(row, d);
        CHECK(d.ids == std::vector<int32_t>{1});  // greedy: the first maximum
    }
    sp.temperature = 0.7f;
    sp.top_k = 4;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    Sampler s(sp);
    auto row = logits;
    s.distribution(row, d);
    REQUIRE(d.ids == std::vector<int32_t>{0, 1, 2, 4});
    double sum = 0;
    for (double p : d.probs) sum += p;
    CHECK(std::abs(sum - 1) < 1e-6);
    CHECK(std::abs(d.prob(1) / d.prob(2) - std::exp(1.0 / 0.7)) < 1e-4);
    CHECK(d.prob(3) == 0);
    // The same frequencies as sample().
    std::map<int32_t, int> got;
    constexpr int kN = 100000;
    for (int i = 0; i < kN; ++i) {
        auto r = logits;
        ++got[s.sample(r)];
    }
    for (size_t i = 0; i < d.ids.size(); ++i) CHECK(std::abs(got[d.ids[i]] / double(kN) - d.probs[i]) < 0.01);
}

TEST_CASE("a draft model's vocabulary must be the model's", "[speculative]") {
    const Loaded spm = load_tiny(small_spec(1));
    const Loaded bpe = load_tiny([] {
        test::TinySpec s = small_spec(1);
        s.vocab = "bpe-chatml";
        return s;
    }());
    const Loaded chat = load_tiny([] {
        test::TinySpec s = small_spec(1);
        s.vocab = "spm-chatml";
        return s;
    }());
    CHECK_NOTHROW(check_same_vocabulary(*spm.tok, *load_tiny(small_spec(2)).tok, "d.gguf"));
    CHECK_THROWS_WITH(check_same_vocabulary(*spm.tok, *bpe.tok, "d.gguf"),
                      Catch::Contains("d.gguf") && Catch::Contains("tokens"));
    if (chat.tok->n_vocab() == spm.tok->n_vocab())
        CHECK_THROWS_WITH(check_same_vocabulary(*spm.tok, *chat.tok, "d.gguf"), Catch::Contains("token"));
    else
        CHECK_THROWS_WITH(check_same_vocabulary(*spm.tok, *chat.tok, "d.gguf"), Catch::Contains("same vocabulary"));
}

TEST_CASE("greedy text with a draft model is the text without, on the reference and every CPU ISA",
          "[speculative]") {
    const Loaded target = load_tiny(small_spec(1));
    // A close draft (the same weights in Q8_0: most guesses accepted) and an unrelated one (most rejected).
    const Loaded close = load_tiny(small_spec(1, GgmlType::Q8_0));
    const Loaded other = load_tiny(small_spec(5));
    GenerationParams plain;
    plain.max_tokens = 40;
    plain.sampling.temperature = 0.0f;
    auto check = [&](const std::string& label, const std::function<std::unique_ptr<Backend>(const Model&, int64_t)>& make) {
        for (int64_t n_slots : {1, 3}) {
            auto b = make(*target.model, n_slots);
            const Texts want = run_prompts(*b, *target.tok, kPrompts, plain);
            for (const Loaded* draft : {&close, &other}) {
                for (int n : {0, 1, 5}) {
                    INFO(label << ", " << n_slots << " slots, draft " << (draft == &close ? "close" : "other")
                               << ", --draft " << n);
                    auto db = make(*draft->model, n_slots);
                    GenerationParams p = plain;
                    p.drafter = std::make_shared<Drafter>(*db);
                    p.draft = n;
                    auto tb = make(*target.model, n_slots);
                    const Texts got = run_prompts(*tb, *target.tok, kPrompts, p);
                    CHECK(got.text == want.text);
                    int guessed = 0, accepted = 0;
                    for (const GenerationStats& st : got.stats) guessed += st.guessed_tokens, accepted += st.accepted_tokens;
                    CHECK(guessed > 0);
                    if (draft == &close) CHECK(accepted * 2 > guessed);
                }
            }
        }
    };
    check("reference", [](const Model& m, int64_t n) { return reference_backend(m, n); });
    for (cpu::Isa isa : test::model_test_isas())
        check(std::string(cpu::isa_name(isa)), [isa](const Model& m, int64_t n) { return cpu_backend(m, n, isa); });
}

TEST_CASE("sampled tokens keep their distribution with lookup's and a draft model's guesses", "[speculative]") {
    const Loaded target = load_tiny(small_spec(1));
    const Loaded draft = load_tiny(small_spec(1, GgmlType::Q4_0));  // near the model, not equal: some guesses rejected
    auto tb = cpu_backend(*target.model, 1);
    auto db = cpu_backend(*draft.model, 1);
    // A prompt that repeats the model's own greedy text, so that lookup's guesses are often likely tokens.
    GenerationParams greedy;
    greedy.max_tokens = 24;
    greedy.sampling.temperature = 0.0f;
    const std::vector<int32_t> head = target.tok->encode("the dog", true, false);
    Generation g(*target.tok, head, greedy, 256);
    generate(*tb, g, 0, [](std::string_view) {});
    std::vector<int32_t> prompt = head;
    prompt.insert(prompt.end(), g.generated().begin(), g.generated().end());
    prompt.insert(prompt.end(), head.begin() + 1, head.end());
    prompt.insert(prompt.end(), g.generated().begin(), g.generated().begin() + 12);
    // A flat-ish distribution over a few tokens, so that a sample of this size tells a wrong rule from the right one.
    GenerationParams p;
    p.max_tokens = 4;
    p.sampling.temperature = 1.0f;
    p.sampling.top_k = 6;
    p.sampling.top_p = 1.0f;
    p.sampling.min_p = 0.0f;
    constexpr int kSeeds = 3000;
    // counts[k]: the k-th generated token's frequencies
    auto sample = [&](const GenerationParams& gp, uint64_t seed_base, int& guessed, int& accepted) {
        std::vector<std::map<int32_t, int>> counts(4);
        guessed = accepted = 0;
        for (int i = 0; i < kSeeds; ++i) {
            GenerationParams q = gp;
            q.sampling.seed = seed_base + static_cast<uint64_t>(i);
            Generation gen(*target.tok, prompt, q, 256);
            const GenerationStats st = generate(*tb, gen, 0, [](std::string_view) {});
            REQUIRE(gen.generated().size() == 4);
            for (size_t k = 0; k < 4; ++k) ++counts[k][gen.generated()[k]];
            guessed += st.guessed_tokens;
            accepted += st.accepted_tokens;
        }
        return counts;
    };
    int guessed = 0, accepted = 0;
    const auto want = sample(p, 1000000, guessed, accepted);
    CHECK(guessed == 0);
    GenerationParams lookup = p;
    lookup.lookup = 3;
    GenerationParams drafted = p;
    drafted.drafter = std::make_shared<Drafter>(*db);
    drafted.draft = 3;
    for (const GenerationParams* gp : {&lookup, &drafted}) {
        const auto got = sample(*gp, 1, guessed, accepted);
        INFO((gp == &lookup ? "lookup" : "draft model") << ": " << accepted << " of " << guessed << " accepted");
        CHECK(guessed > kSeeds);
        CHECK(accepted * 40 > guessed);
        CHECK(accepted < guessed);
        for (size_t k = 1; k < 4; ++k) {  // the first token comes from the prompt's row, never a guess
            int df = 0;
            const double stat = chi_squared(want[k], got[k], df);
            INFO("token " << k << ": chi-squared " << stat << " with " << df << " degrees of freedom");
            CHECK(df >= 5);
            CHECK(stat < chi_squared_limit(df));
        }
    }
}

}  // namespace test_speculative
