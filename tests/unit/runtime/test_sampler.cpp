// The sampling chain against direct computations of what each step must keep, and its determinism.
#include "engine/error.h"
#include "engine/runtime/sampler.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

namespace test_sampler {

using namespace quill;

namespace {

SamplingParams plain(float temp) {
    SamplingParams p;
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 7;
    return p;
}

// Draws n tokens from fresh copies of the logits and counts them.
std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
    std::map<int32_t, int> h;
    for (int i = 0; i < n; ++i) {
        std::vector<float> l = logits;
        ++h[s.sample(l)];
    }
    return h;
}

}  // namespace

TEST_CASE("greedy picks the first maximum", "[sampler]") {
    Sampler s(plain(0.0f));
    std::vector<float> l{0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
    CHECK(s.sample(l) == 1);
    // Longer rows (the search runs eight lanes at a time, then the tail): std::max_element's answer wherever the
    // maximum and its ties fall, with all-negative values.
    std::mt19937 rng(3);
    for (size_t n : {7u, 8u, 9u, 15u, 16u, 17u, 31u, 33u, 49152u, 49157u}) {
        std::vector<float> x(n);
        for (int trial = 0; trial < 20; ++trial) {
            const uint32_t levels = trial % 2 == 0 ? 5 : 100000;  // the maximum tied many times, or rarely
            for (float& v : x) v = -1.0f - static_cast<float>(rng() % levels) * 0.25f;
            std::vector<float> copy = x;
            INFO("n " << n << ", trial " << trial);
            CHECK(s.sample(copy) == std::max_element(x.begin(), x.end()) - x.begin());
        }
    }
    // NaN never wins, in the sixteen-lane part and in the tail, nor makes a lane forget its maximum (a smaller value
    // 32 places on: the same lane, after a NaN); -0.0 and 0.0 tie (the first of them); a row of NaN gives 0.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t n : {5u, 16u, 40u, 64u}) {
        for (size_t at : {size_t{0}, n / 2, n - 1}) {
            std::vector<float> x(n, nan);
            x[at] = -3.0f;
            if (at + 1 < n) x[at + 1] = -4.0f;
            if (at + 32 < n) x[at + 32] = -4.0f;
            INFO("n " << n << ", max at " << at);
            CHECK(s.sample(x) == static_cast<int32_t>(at));
        }
        std::vector<float> zeros(n, -1.0f);
        zeros[n - 1] = 0.0f;
        zeros[n / 3] = -0.0f;
        CHECK(s.sample(zeros) == static_cast<int32_t>(n / 3));
        std::vector<float> all_nan(n, nan);
        CHECK(s.sample(all_nan) == 0);
    }
}

TEST_CASE("the same seed gives the same tokens, another seed other tokens", "[sampler]") {
    std::vector<float> logits(1000);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.37) * 3.0);
    auto draw = [&](uint64_t seed) {
        SamplingParams p = plain(1.0f);
        p.seed = seed;
        Sampler s(p);
        std::vector<int32_t> out;
        for (int i = 0; i < 50; ++i) {
            std::vector<float> l = logits;
            out.push_back(s.sample(l));
        }
        return out;
    };
    CHECK(draw(42) == draw(42));
    CHECK(draw(42) != draw(43));
    // Fixed values: the RNG is quill's own, so these hold on every platform and build.
    Rng rng(0);
    CHECK(rng.next() == 0x99EC5F36CB75F2B4ull);
}

TEST_CASE("temperature sampling follows the softmax distribution", "[sampler]") {
    const std::vector<float> logits{1.0f, 2.0f, 0.0f, 1.5f};
    for (float temp : {0.5f, 1.0f, 2.0f}) {
        Sampler s(plain(temp));
        const int n = 40000;
        auto h = histogram(s, logits, n);
        double z = 0;
        for (float l : logits) z += std::exp(l / temp);
        for (int32_t i = 0; i < 4; ++i) {
            double want = std::exp(logits[i] / temp) / z;
            INFO("temp " << temp << " token " << i);
            CHECK(std::fabs(h[i] / double(n) - want) < 0.01);  // ~4 standard errors at n = 40000
        }
    }
}

TEST_CASE("top-k, top-p and min-p keep exactly the tokens they should", "[sampler]") {
    // probabilities at temperature 1: exp of these over the sum
    const std::vector<float> logits{std::log(0.5f), std::log(0.25f), std::log(0.15f), std::log(0.07f), std::log(0.03f)};
    auto support = [&](SamplingParams p) {
        Sampler s(p);
        std::set<int32_t> seen;
        for (auto& [id, count] : histogram(s, logits, 4000)) seen.insert(id);
        return seen;
    };
    SamplingParams p = plain(1.0f);
    p.top_k = 2;
    CHECK(support(p) == std::set<int32_t>{0, 1});
    p = plain(1.0f);
    p.top_p = 0.8f;  // 0.5 + 0.25 = 0.75 < 0.8, + 0.15 reaches it
    CHECK(support(p) == std::set<int32_t>{0, 1, 2});
    p.top_p = 0.75f;  // reached exactly at two
    CHECK(support(p).size() <= 3);
    p = plain(1.0f);
    p.min_p = 0.2f;  // at least 0.1: tokens 0, 1, 2
    CHECK(support(p) == std::set<int32_t>{0, 1, 2});
    p.min_p = 0.6f;  // at least 0.3: token 0 only
    CHECK(support(p) == std::set<int32_t>{0});
}

TEST_CASE("penalties lower the logits of recent tokens", "[sampler]") {
    SamplingParams p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    Sampler s(p);
    s.accept(0);
    s.accept(1);
    std::vector<float> l{4.0f, -1.0f, 3.0f};
    CHECK(s.sample(l) == 2);  // 4 / 2 = 2 < 3
    CHECK(l[0] == 2.0f);
    CHECK(l[1] == -2.0f);
    s.accept(2);
    s.accept(2);  // the window holds only the last two: token 0 no longer penalized
    std::vector<float> l2{4.0f, -1.0f, 3.0f};
    CHECK(s.sample(l2) == 0);
    CHECK(l2[2] == 1.5f);  // penalized once, however often it occurs

    SamplingParams f = plain(0.0f);
    f.frequency_penalty = 0.5f;
    f.presence_penalty = 0.25f;
    Sampler sf(f);
    sf.accept(1);
    sf.accept(1);
    sf.accept(1);
    std::vector<float> l3{1.0f, 2.5f};
    CHECK(sf.sample(l3) == 0);  // 2.5 - 3 * 0.5 - 0.25 = 0.75 < 1
    CHECK(l3[1] == Approx(0.75f));
}

TEST_CASE("a logit bias is added before the penalties, -100 bans, and the row then comes whole", "[sampler]") {
    SamplingParams p = plain(0.0f);
    p.logit_bias = {{0, -100.0f}, {2, 1.5f}};
    Sampler s(p);
    CHECK(!s.plain_greedy());  // a device's first maximum is not the pick
    CHECK(s.top_needed() == 0);
    std::vector<float> l{9.0f, 1.0f, 2.0f};
    CHECK(s.sample(l) == 2);
    CHECK(l[0] == -INFINITY);
    CHECK(l[2] == 3.5f);

    // Then the penalties act on the biased logit: (4 + 2) / 3 = 2 < 2.5.
    SamplingParams q = plain(0.0f);
    q.logit_bias = {{0, 2.0f}};
    q.repeat_penalty = 3.0f;
    Sampler sq(q);
    sq.accept(0);
    std::vector<float> l2{4.0f, 2.5f};
    CHECK(sq.sample(l2) == 1);
    CHECK(l2[0] == 2.0f);

    // Sampled too: the banned token is never drawn, and the distribution sees the bias.
    SamplingParams t = plain(1.0f);
    t.logit_bias = {{1, -100.0f}};
    Sampler st(t);
    const auto h = histogram(st, {0.0f, 5.0f, 0.0f}, 200);
    CHECK(h.count(1) == 0);
    TokenDist d;
    std::vector<float> l3{0.0f, 5.0f, 0.0f};
    st.distribution(l3, d);
    CHECK(d.prob(1) == 0.0);

    SamplingParams bad = plain(0.0f);
    bad.logit_bias = {{3, 101.0f}};
    CHECK_THROWS_WITH(bad.validate(true), Catch::Contains("logit_bias: bias 101 is out of range"));
}

TEST_CASE("out-of-range sampling parameters name the flag", "[sampler]") {
    SamplingParams p;
    p.temperature = -1;
    CHECK_THROWS_WITH(Sampler(p), Catch::Contains("--temp"));
    p = SamplingParams();
    p.top_p = 0;
    CHECK_THROWS_WITH(Sampler(p), Catch::Contains("--top-p"));
    p = SamplingParams();
    p.min_p = 1.5f;
    CHECK_THROWS_WITH(Sampler(p), Catch::Contains("--min-p"));
    p = SamplingParams();
    p.repeat_penalty = 0;
    CHECK_THROWS_WITH(Sampler(p), Catch::Contains("--repeat-penalty"));
}

TEST_CASE("plain greedy: temperature 0 and no penalty in effect", "[sampler]") {
    SamplingParams p = plain(0.0f);
    CHECK(Sampler(p).plain_greedy());
    p.repeat_penalty = 1.1f;
    CHECK_FALSE(Sampler(p).plain_greedy());
    p.repeat_last_n = 0;  // the penalty's window is empty: no effect
    CHECK(Sampler(p).plain_greedy());
    p = plain(0.0f);
    p.frequency_penalty = 0.5f;
    CHECK_FALSE(Sampler(p).plain_greedy());
    p = plain(0.0f);
    p.presence_penalty = 0.5f;
    CHECK_FALSE(Sampler(p).plain_greedy());
    CHECK_FALSE(Sampler(plain(0.7f)).plain_greedy());
}

TEST_CASE("sampling from a row's top_needed largest logits picks what sampling the whole row picks", "[sampler]") {
    // What a GPU hands back instead of the row: the top_needed() largest logits (ties: lower id first) of the row
    // before penalties, in any order. Rows with many ties and a masked tail (-inf past the tokenizer's ids), the
    // penalties pushing window tokens out of the top-k; the same tokens and draws, step after step.
    std::mt19937 rng(2024);
    std::uniform_int_distribution<int> level(-40, 40);
    const int n_vocab = 1000, n_ids = 950;
    auto params = [](float temp, int k, float p, float min_p, float rep, float freq, float pres, int last_n) {
        SamplingParams s;
        s.temperature = temp;
        s.top_k = k;
        s.top_p = p;
        s.min_p = min_p;
        s.repeat_penalty = rep;
        s.frequency_penalty = freq;
        s.presence_penalty = pres;
        s.repeat_last_n = last_n;
        s.seed = 77;
        return s;
    };
    const std::vector<SamplingParams> cases = {
        params(0.8f, 40, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 64),    // the defaults
        params(1.5f, 5, 1.0f, 0.0f, 1.3f, 0.2f, 0.5f, 16),       // penalties
        params(0.0f, 0, 1.0f, 0.0f, 1.2f, 0.0f, 0.0f, -1),       // greedy with a penalty over the whole history
        params(1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64),       // top-1
        params(2.0f, 999, 0.5f, 0.0f, 1.1f, 0.1f, 0.0f, 8),      // k near the vocabulary, masked logits in it
        params(0.7f, 60, 0.9f, 0.1f, 1.0f, 0.0f, 1.0f, 32),      // presence only
    };
    for (const SamplingParams& p : cases) {
        INFO("temp " << p.temperature << " top_k " << p.top_k << " penalties " << p.repeat_penalty << "/"
                     << p.frequency_penalty << "/" << p.presence_penalty);
        Sampler whole(p), top(p);
        for (int step = 0; step < 300; ++step) {
            std::vector<float> row(n_vocab, -INFINITY);
            for (int i = 0; i < n_ids; ++i) row[i] = 0.25f * static_cast<float>(level(rng));  // many ties
            // Recent tokens near the top, so that the penalties reorder it.
            if (step % 3 == 0) row[static_cast<size_t>(step * 7 % n_ids)] = 11.0f;
            const int need = top.top_needed();
            REQUIRE(need == whole.top_needed());
            REQUIRE(need > 0);
            std::vector<int32_t> order(n_vocab);
            std::iota(order.begin(), order.end(), 0);
            const auto n_top = std::min<size_t>(static_cast<size_t>(need), order.size());
            std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_top), order.end(),
                              [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
            std::vector<SampleCandidate> cands;
            for (size_t i = 0; i < n_top; ++i) cands.push_back({order[i], row[order[i]]});
            std::shuffle(cands.begin(), cands.end(), rng);
            std::vector<float> copy = row;
            const int32_t a = whole.sample(copy), b = top.sample_top(cands);
            REQUIRE(a == b);
            whole.accept(a);
            top.accept(b);
        }
    }
    // No bound: top-k off, or penalties that can raise a logit.
    for (const SamplingParams& p : {params(0.8f, 0, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, 64),
                                    params(0.8f, 40, 1.0f, 0.0f, 0.9f, 0.0f, 0.0f, 64),
                                    params(0.8f, 40, 1.0f, 0.0f, 1.0f, -0.5f, 0.0f, 64)}) {
        Sampler s(p);
        s.accept(3);
        CHECK(s.top_needed() == 0);
    }
}

}  // namespace test_sampler
