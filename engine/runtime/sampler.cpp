#include "engine/runtime/sampler.h"

#include "engine/error.h"

#include <algorithm>
#include <cmath>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace quill {

void SamplingParams::validate(bool request_fields) const {
    auto bad = [](const char* flag, auto v, const char* want) {
        throw UsageError(fmt::format("{} {} is out of range: expected {}", flag, v, want));
    };
    if (!std::isfinite(temperature) || temperature < 0)
        bad(request_fields ? "temperature" : "--temp", temperature, "a finite number >= 0");
    if (top_k < 0) bad(request_fields ? "top_k" : "--top-k", top_k, ">= 0 (0: off)");
    if (!(top_p > 0 && top_p <= 1)) bad(request_fields ? "top_p" : "--top-p", top_p, "in (0, 1]");
    if (!(min_p >= 0 && min_p <= 1)) bad(request_fields ? "min_p" : "--min-p", min_p, "in [0, 1]");
    if (!(repeat_penalty > 0) || !std::isfinite(repeat_penalty))
        bad(request_fields ? "repeat_penalty" : "--repeat-penalty", repeat_penalty, "a finite number > 0");
    if (repeat_last_n < -1) bad(request_fields ? "repeat_last_n" : "--repeat-last-n", repeat_last_n, ">= -1");
    if (!std::isfinite(frequency_penalty))
        bad(request_fields ? "frequency_penalty" : "--frequency-penalty", frequency_penalty, "a finite number");
    if (!std::isfinite(presence_penalty))
        bad(request_fields ? "presence_penalty" : "--presence-penalty", presence_penalty, "a finite number");
    for (const auto& [id, bias] : logit_bias) {
        if (id < 0) bad("logit_bias: token", id, "a token id >= 0");
        if (!(bias >= -100 && bias <= 100)) bad("logit_bias: bias", bias, "-100 to 100");
    }
}

// The maximum, then the first index that holds it. A batch of sequences samples tens of thousands of logits per
// sequence per step, where std::max_element compares and branches on each, and GCC left the eight-lane loop that
// replaced it scalar.
size_t first_max(std::span<const float> x) {
    const float* p = x.data();
    const size_t n = x.size();
    size_t i = 0;
    float best = -INFINITY;
#ifdef __SSE2__
    // Sixteen lanes in four chains of maxps (maxps(x, m) keeps m when x is NaN or both are zeros, as `>` does), then
    // the first index sixteen at a time.
    __m128 m[4] = {_mm_set1_ps(-INFINITY), _mm_set1_ps(-INFINITY), _mm_set1_ps(-INFINITY), _mm_set1_ps(-INFINITY)};
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; ++k) m[k] = _mm_max_ps(_mm_loadu_ps(p + i + 4 * k), m[k]);
    float lanes[16];
    for (int k = 0; k < 4; ++k) _mm_storeu_ps(lanes + 4 * k, m[k]);
    for (float v : lanes) best = v > best ? v : best;
#endif
    for (; i < n; ++i) best = p[i] > best ? p[i] : best;
    i = 0;
#ifdef __SSE2__
    const __m128 b = _mm_set1_ps(best);
    for (; i + 16 <= n; i += 16) {
        int hits = 0;
        for (int k = 0; k < 4; ++k) hits |= _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(p + i + 4 * k), b)) << (4 * k);
        if (hits != 0) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(hits)));
    }
#endif
    for (; i < n; ++i)
        if (p[i] == best) return i;
    return 0;  // (no value is a number)
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { params_.validate(); }

void Sampler::accept(int32_t token) {
    if (params_.repeat_last_n == 0) return;
    history_.push_back(token);
    ++counts_[token];
    if (params_.repeat_last_n > 0 && static_cast<int>(history_.size()) > params_.repeat_last_n) {
        int32_t old = history_.front();
        history_.pop_front();
        if (--counts_[old] == 0) counts_.erase(old);
    }
}

// logit -> logit / r if positive, logit * r if not; then - count * frequency - presence.
float Sampler::penalized(float l, int count) const {
    l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    return l - (static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty);
}

bool Sampler::penalties_on() const {
    return params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f;
}

void Sampler::apply_penalties(std::span<float> logits) const {
    if (!penalties_on()) return;
    for (const auto& [id, count] : counts_) {
        if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
        logits[id] = penalized(logits[id], count);
    }
}

void Sampler::apply_bias(std::span<float> logits) const {
    for (const auto& [id, bias] : params_.logit_bias) {
        if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
        logits[id] = bias <= -100.0f ? -INFINITY : logits[id] + bias;
    }
}

void Sampler::constrain(std::shared_ptr<grammar::TokenGrammar> g, bool overlap) {
    grammar_ = std::make_unique<grammar::GrammarMatcher>(std::move(g), overlap);
}

void Sampler::accept_output(int32_t token) {
    if (grammar_) grammar_->accept(token);
}

// Logits of the tokens the grammar refuses (and of ids past its vocabulary) become -inf.
void Sampler::apply_mask(std::span<float> logits) {
    const std::span<const uint64_t> mask = grammar_->mask();
    const size_t n = logits.size();
    bool any = false;
    for (size_t w = 0; w * 64 < n; ++w) {
        const uint64_t bits = w < mask.size() ? mask[w] : 0;
        any = any || bits != 0;
        if (bits == ~uint64_t{0}) continue;
        const size_t end = std::min(n, (w + 1) * 64);
        if (bits == 0) {
            std::fill(logits.data() + w * 64, logits.data() + end, -INFINITY);
            continue;
        }
        for (size_t i = w * 64; i < end; ++i)
            if (!((bits >> (i & 63)) & 1)) logits[i] = -INFINITY;
    }
    if (!any)
        throw Error("the grammar allows no token here: no token of the vocabulary continues the text it requires");
}

int Sampler::top_needed() const {
    if (logprobs_on() || grammar_ || !params_.logit_bias.empty()) return 0;
    const SamplingParams& p = params_;
    const int base = p.temperature <= 0.0f ? 1 : p.top_k;
    if (base <= 0) return 0;
    if (!penalties_on() || counts_.empty()) return base;
    // l / r and l * r (r >= 1) and l - x (x >= 0) are never above l, also rounded.
    if (!(p.repeat_penalty >= 1.0f && p.frequency_penalty >= 0.0f && p.presence_penalty >= 0.0f)) return 0;
    return base + static_cast<int>(counts_.size());
}

int32_t Sampler::sample_top(std::span<const SampleCandidate> top) {
    QUILL_CHECK(!top.empty(), "no candidates to sample from");
    cand_.assign(top.begin(), top.end());
    if (penalties_on()) {
        for (Candidate& c : cand_) {
            if (auto it = counts_.find(c.id); it != counts_.end()) c.logit = penalized(c.logit, it->second);
        }
    }
    auto by_logit = [](const Candidate& a, const Candidate& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    if (params_.temperature <= 0.0f) return std::min_element(cand_.begin(), cand_.end(), by_logit)->id;
    const size_t k = std::min<size_t>(params_.top_k, cand_.size());
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(), by_logit);
    cand_.resize(k);
    return finish();
}

bool Sampler::plain_greedy() const {
    return params_.temperature <= 0.0f && stateless() && params_.logit_bias.empty();
}

void Sampler::set_logprobs(int top_n) {
    QUILL_CHECK(top_n >= 0 && top_n <= kMaxTopLogprobs, "top_n {} out of range", top_n);
    logprobs_top_ = top_n;
}

int32_t Sampler::sample(std::span<float> logits) {
    QUILL_CHECK(!logits.empty(), "no logits to sample from");
    if (!logprobs_on()) return pick(logits);
    // The raw row's log-sum-exp, its top_n, and the picked token's raw logit (the grammar's mask and the penalties
    // change the row).
    double max = -INFINITY;
    for (float v : logits)
        if (v > max) max = v;
    double sum = 0;
    for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
    const double lse = max + std::log(sum);
    TokenLogprobs& lp = last_logprobs_;
    lp.top.clear();
    const size_t n = std::min(static_cast<size_t>(logprobs_top_), logits.size());
    order_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) order_[i] = static_cast<int32_t>(i);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), order_.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (size_t i = 0; i < n; ++i) lp.top.emplace_back(order_[i], static_cast<double>(logits[order_[i]]) - lse);
    const bool changes_row = penalties_on() || grammar_ || !params_.logit_bias.empty();
    if (changes_row) raw_.assign(logits.begin(), logits.end());
    lp.token = pick(logits);
    const float logit = (changes_row ? std::span<const float>(raw_) : logits)[static_cast<size_t>(lp.token)];
    lp.logprob = static_cast<double>(logit) - lse;
    return lp.token;
}

int32_t Sampler::pick(std::span<float> logits) {
    if (grammar_) apply_mask(logits);
    apply_bias(logits);
    apply_penalties(logits);
    if (params_.temperature <= 0.0f)  // greedy: the first maximum
        return static_cast<int32_t>(first_max(logits));
    select_top_k(logits);
    return finish();
}

void Sampler::select_top_k(std::span<const float> logits) {
    // top-k: the k largest logits, sorted descending (ties by id, so the order is deterministic)
    auto by_logit = [](const Candidate& a, const Candidate& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    const size_t n = logits.size();
    const size_t k = params_.top_k > 0 ? std::min<size_t>(params_.top_k, n) : n;
    if (k == n) {
        cand_.resize(n);
        for (size_t i = 0; i < n; ++i) cand_[i] = {static_cast<int32_t>(i), logits[i]};
        std::sort(cand_.begin(), cand_.end(), by_logit);
        return;
    }
    // std::partial_sort's selection without a candidate per logit: a heap of the k best so far, its worst on top,
    // which a later logit replaces only when strictly larger (an equal one has a larger id: worse). Sixteen logits
    // at a time are first checked against the worst at once: after the first few blocks almost none get in.
    cand_.clear();
    for (size_t i = 0; i < k; ++i) cand_.push_back({static_cast<int32_t>(i), logits[i]});
    std::make_heap(cand_.begin(), cand_.end(), by_logit);
    auto offer = [&](size_t i) {
        if (!(logits[i] > cand_.front().logit)) return;
        std::pop_heap(cand_.begin(), cand_.end(), by_logit);
        cand_.back() = {static_cast<int32_t>(i), logits[i]};
        std::push_heap(cand_.begin(), cand_.end(), by_logit);
    };
    size_t i = k;
    constexpr size_t kBlock = 16;
    for (; i + kBlock <= n; i += kBlock) {
        float top = logits[i];
        for (size_t j = 1; j < kBlock; ++j) top = logits[i + j] > top ? logits[i + j] : top;
        if (top > cand_.front().logit)
            for (size_t j = 0; j < kBlock; ++j) offer(i + j);
    }
    for (; i < n; ++i) offer(i);
    std::sort_heap(cand_.begin(), cand_.end(), by_logit);
}

void Sampler::truncate() {
    // tokens a grammar refused (-inf) never count, even when fewer than k are allowed
    while (cand_.size() > 1 && cand_.back().logit == -INFINITY) cand_.pop_back();
    // probabilities at temperature 1 for top-p and min-p
    auto softmax = [&](float temp) {
        probs_.resize(cand_.size());
        double sum = 0;
        for (size_t i = 0; i < cand_.size(); ++i) {
            probs_[i] = std::exp((cand_[i].logit - cand_[0].logit) / temp);
            sum += probs_[i];
        }
        for (auto& p : probs_) p = static_cast<float>(p / sum);
    };
    softmax(1.0f);
    // top-p: the smallest prefix whose mass reaches p
    if (params_.top_p < 1.0f) {
        double cum = 0;
        size_t keep = cand_.size();
        for (size_t i = 0; i < cand_.size(); ++i) {
            cum += probs_[i];
            if (cum >= params_.top_p) {
                keep = i + 1;
                break;
            }
        }
        cand_.resize(keep);
    }
    // min-p: tokens at least min_p times as likely as the most likely one
    if (params_.min_p > 0.0f) {
        size_t keep = 1;
        while (keep < cand_.size() && probs_[keep] >= params_.min_p * probs_[0]) ++keep;
        cand_.resize(keep);
    }
    softmax(params_.temperature);
}

int32_t Sampler::finish() {
    truncate();
    double r = rng_.uniform(), cum = 0;
    for (size_t i = 0; i < cand_.size(); ++i) {
        cum += probs_[i];
        if (r < cum) return cand_[i].id;
    }
    return cand_.back().id;
}

// ---- speculative decoding ----

double TokenDist::prob(int32_t id) const {
    const auto it = std::lower_bound(ids.begin(), ids.end(), id);
    return it != ids.end() && *it == id ? probs[static_cast<size_t>(it - ids.begin())] : 0.0;
}

void TokenDist::point(int32_t id) {
    ids.assign(1, id);
    probs.assign(1, 1.0);
}

bool Sampler::stateless() const {
    const SamplingParams& p = params_;
    const bool no_penalty =
        p.repeat_last_n == 0 || (p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f);
    return no_penalty && !logprobs_on() && !grammar_;
}

void Sampler::distribution(std::span<float> logits, TokenDist& out) {
    QUILL_CHECK(!logits.empty(), "no logits to sample from");
    if (grammar_) apply_mask(logits);
    apply_bias(logits);
    apply_penalties(logits);
    if (params_.temperature <= 0.0f) {
        out.point(static_cast<int32_t>(first_max(logits)));
        return;
    }
    select_top_k(logits);
    truncate();
    order_.resize(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i) order_[i] = static_cast<int32_t>(i);
    std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) { return cand_[a].id < cand_[b].id; });
    out.ids.resize(cand_.size());
    out.probs.resize(cand_.size());
    for (size_t i = 0; i < order_.size(); ++i) {
        out.ids[i] = cand_[order_[i]].id;
        out.probs[i] = probs_[order_[i]];
    }
}

int32_t Sampler::draw(const TokenDist& d) {
    QUILL_CHECK(!d.ids.empty(), "an empty distribution");
    if (d.ids.size() == 1) return d.ids[0];
    double r = rng_.uniform(), cum = 0;
    for (size_t i = 0; i < d.ids.size(); ++i) {
        cum += d.probs[i];
        if (r < cum) return d.ids[i];
    }
    return d.ids.back();
}

GuessVerdict Sampler::check_guess(const TokenDist& p, const TokenDist& q, int32_t guess) {
    const double px = p.prob(guess), qx = q.prob(guess);
    QUILL_CHECK(qx > 0, "guess {} was not drawn from its proposal", guess);
    if (px >= qx || (px > 0 && rng_.uniform() * qx < px)) return {true, guess};
    // max(0, p - q) over p's tokens (q's others give nothing), both ascending by id.
    residual_.ids.clear();
    residual_.probs.clear();
    double sum = 0;
    for (size_t i = 0; i < p.ids.size(); ++i) {
        const double r = p.probs[i] - q.prob(p.ids[i]);
        if (r <= 0) continue;
        residual_.ids.push_back(p.ids[i]);
        residual_.probs.push_back(r);
        sum += r;
    }
    if (sum <= 0) return {false, draw(p)};  // (p == q up to rounding: then p itself)
    for (double& r : residual_.probs) r /= sum;
    return {false, draw(residual_)};
}

}  // namespace quill
