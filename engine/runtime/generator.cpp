#include "engine/runtime/generator.h"

#include "engine/error.h"
#include "engine/runtime/scheduler.h"

#include <algorithm>
#include <cmath>

namespace quill {

void GenerationParams::validate(bool request_fields) const {
    sampling.validate(request_fields);
    if (lookup < 0 || lookup > kMaxLookup)
        throw UsageError(fmt::format("--lookup {} is out of range: expected 0 to {}", lookup, kMaxLookup));
    if (draft < 0 || draft > kMaxLookup)
        throw UsageError(fmt::format("--draft {} is out of range: expected 1 to {} (0: adaptive)", draft, kMaxLookup));
    if (lookup > 0 && drafter) throw UsageError("--lookup and --draft-model cannot be combined: choose one");
    if (max_tokens < -1)
        throw UsageError(request_fields
                             ? fmt::format("max_tokens {} is out of range: expected >= 0", max_tokens)
                             : fmt::format("-n {} is out of range: expected >= -1", max_tokens));
    if (logprobs < -1 || logprobs > kMaxTopLogprobs)
        throw UsageError(request_fields ? fmt::format("top_logprobs {} is out of range: expected 0 to {}", logprobs,
                                                      kMaxTopLogprobs)
                                        : fmt::format("--logprobs {} is out of range: expected 0 to {}", logprobs,
                                                      kMaxTopLogprobs));
}

std::string_view finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::none: return "none";
        case FinishReason::stop: return "stop";
        case FinishReason::length: case FinishReason::context: return "length";
        case FinishReason::interrupted: return "interrupted";
    }
    return "none";
}

// ---- StopMatcher ----

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
    if (matched_) return {};
    held_.append(text);
    // The earliest complete stop string ends generation; what precedes it is printed.
    size_t cut = std::string::npos;
    for (const auto& s : stops_) cut = std::min(cut, held_.find(s));
    if (cut != std::string::npos) {
        matched_ = true;
        std::string out = held_.substr(0, cut);
        held_.clear();
        return out;
    }
    // Keep the longest tail that is a prefix of some stop string.
    size_t keep = 0;
    for (const auto& s : stops_) {
        for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
            if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
                keep = n;
                break;
            }
        }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopMatcher::flush() {
    std::string out = matched_ ? std::string() : std::move(held_);
    held_.clear();
    return out;
}

// ---- Generation ----

Generation::Generation(const Tokenizer& tok, std::vector<int32_t> prompt, const GenerationParams& params,
                       int64_t n_ctx)
    : tok_(tok),
      prompt_(std::move(prompt)),
      params_(params),
      n_ctx_(n_ctx),
      sampler_(params.sampling),
      detok_(tok, false, params_.shown_tokens),
      stop_(params.stop) {
    if (prompt_.empty()) throw UsageError("the prompt is empty (it has no tokens)");
    if (static_cast<int64_t>(prompt_.size()) > n_ctx)
        throw UsageError(fmt::format("the prompt is {} tokens, longer than the context of {} (raise -c)",
                                     prompt_.size(), n_ctx));
    params.validate();
    if (params.logprobs >= 0) sampler_.set_logprobs(params.logprobs);
    for (int32_t t : prompt_) sampler_.accept(t);
    if (params.grammar) sampler_.constrain(params.grammar);
    if (params.max_tokens == 0) reason_ = FinishReason::length;
}

std::string Generation::finish(FinishReason reason) {
    reason_ = reason;
    // A reply cut by -n, the context or an interrupt may stop inside a character: its first bytes are withheld
    // rather than printed as U+FFFD. One that ended (an end-of-generation token) shows what the model wrote.
    std::string tail = stop_.push(reason == FinishReason::stop ? detok_.finish() : detok_.cut());
    if (!stop_.matched()) tail += stop_.flush();
    return tail;
}

std::string Generation::interrupt() {
    if (finished()) return {};
    return finish(FinishReason::interrupted);
}

int64_t Generation::n_token_ids() const { return tok_.n_vocab(); }

std::string Generation::advance(int32_t token) {
    QUILL_CHECK(!finished(), "advance() after the generation finished");
    QUILL_CHECK(token >= 0 && token < tok_.n_vocab(), "token {} is outside the vocabulary", token);
    last_ = token;
    sampler_.accept_output(last_);
    if (tok_.is_eog(last_)) return finish(FinishReason::stop);
    ++n_generated_;
    generated_.push_back(last_);
    if (sampler_.logprobs_on()) {
        QUILL_CHECK(sampler_.last_logprobs().token == last_, "token {} was not the sampler's pick", last_);
        logprobs_.push_back(sampler_.last_logprobs());
    }
    sampler_.accept(last_);
    std::string text = stop_.push(detok_.push(last_));
    if (stop_.matched()) {
        reason_ = FinishReason::stop;
        return text;
    }
    if (sampler_.grammar_finished()) return text + finish(FinishReason::stop);  // nothing else can follow
    if (params_.max_tokens >= 0 && n_generated_ >= params_.max_tokens) return text + finish(FinishReason::length);
    if (next_pos() >= n_ctx_) return text + finish(FinishReason::context);
    return text;
}

int Generation::guess_budget(int wanted) const {
    if (wanted <= 0 || finished()) return 0;
    // The step's decode row gives one token and each accepted guess one more; a guess at position next_pos() + k
    // must fit in the context.
    int64_t budget = std::min<int64_t>(wanted, n_ctx_ - 1 - next_pos());
    if (params_.max_tokens >= 0) budget = std::min<int64_t>(budget, params_.max_tokens - n_generated_ - 1);
    return static_cast<int>(std::max<int64_t>(0, budget));
}

// ---- driver ----

double GenerationStats::prefill_tokens_per_s() const {
    return prefill_ms > 0 ? prefilled_tokens * 1000.0 / prefill_ms : 0.0;
}

double GenerationStats::acceptance_rate() const {
    return guessed_tokens > 0 ? static_cast<double>(accepted_tokens) / guessed_tokens : 0.0;
}

double GenerationStats::decode_tokens_per_s() const {
    return decode_ms > 0 && completion_tokens > 1 ? (completion_tokens - 1) * 1000.0 / decode_ms : 0.0;
}

// The one-request case of the scheduler: the same loop as batch, with the slot pinned.
GenerationStats generate(Backend& backend, Generation& gen, int32_t slot,
                         const std::function<void(std::string_view)>& on_text, const GenerateOptions& options) {
    GenerationStats stats;
    stats.prompt_tokens = static_cast<int>(gen.prompt().size());
    if (gen.finished()) return stats;
    auto cancelled = [&] { return options.cancel && options.cancel->load(std::memory_order_relaxed); };
    Scheduler sched(
        backend, SchedulerOptions{options.n_batch}, [&](int64_t, std::string_view text) { on_text(text); },
        [&](int64_t, const GenerationStats& st) { stats = st; });
    sched.submit(0, gen, slot, options.n_past);
    for (;;) {
        if (cancelled()) {
            if (sched.n_running() > 0) {
                sched.abandon_running();
            } else {  // cancelled before it started
                const std::string tail = gen.interrupt();
                if (!tail.empty()) on_text(tail);
            }
            break;
        }
        if (!sched.step()) break;
    }
    return stats;
}

}  // namespace quill
