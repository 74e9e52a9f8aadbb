#include "engine/batch/runner.h"

#include "engine/chat/markers.h"
#include "engine/error.h"
#include "engine/runtime/logprobs_json.h"
#include "engine/runtime/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <random>
#include <unordered_map>

namespace quill::batch {

GenerationParams request_params(const RunnerOptions& options, const RequestOverrides& o, uint64_t random_seed) {
    GenerationParams p = options.defaults;
    SamplingParams& s = p.sampling;
    if (o.max_tokens) p.max_tokens = *o.max_tokens;
    if (o.temperature) s.temperature = *o.temperature;
    if (o.top_p) s.top_p = *o.top_p;
    if (o.min_p) s.min_p = *o.min_p;
    if (o.top_k) s.top_k = *o.top_k;
    if (o.repeat_penalty) s.repeat_penalty = *o.repeat_penalty;
    if (o.repeat_last_n) s.repeat_last_n = *o.repeat_last_n;
    if (o.frequency_penalty) s.frequency_penalty = *o.frequency_penalty;
    if (o.presence_penalty) s.presence_penalty = *o.presence_penalty;
    if (o.logit_bias) s.logit_bias = *o.logit_bias;
    if (o.stop) p.stop = *o.stop;
    if (o.logprobs) p.logprobs = *o.logprobs;
    s.seed = o.seed ? *o.seed : options.seed ? *options.seed : random_seed;
    p.validate(true);  // the defaults passed already (the command line's flags): only a request's field can fail
    return p;
}

namespace {

using clock = std::chrono::steady_clock;

// One run's state: the queue of selected entries, the requests in flight, the counters.
class Run {
public:
    Run(Backend& backend, const Tokenizer& tok, int64_t n_ctx, const BatchInput& input, const PromptEncoder& encode,
        RecordWriter& out, const RecordContext& ctx, const RunnerOptions& options)
        : tok_(tok), n_ctx_(n_ctx), input_(input), encode_(encode), out_(out), ctx_(ctx),
          options_(options),
          markers_(chat::marker_tokens(tok, options.tool_syntax, options.reasoning_syntax)),
          sched_(backend, SchedulerOptions{options.n_batch},
                 [this](int64_t id, std::string_view text) { active_.at(id).text.append(text); },
                 [this](int64_t id, const GenerationStats& st) { finished(id, st); }) {}

    BatchProgress run(const std::unordered_set<std::string>& done,
                      const std::function<void(const BatchProgress&)>& on_progress);

private:
    struct Active {
        std::unique_ptr<Generation> gen;
        std::string text;
    };

    void write_error(size_t index, const std::string& message) {
        out_.write(error_record(ctx_, input_.entries[index].request, index, message));
        ++p_.done;
        ++p_.errors;
    }
    void finished(int64_t id, const GenerationStats& st);
    std::shared_ptr<grammar::TokenGrammar> grammar_for(const BatchRequest& r);
    void feed();
    int interrupts() const { return options_.interrupts ? options_.interrupts() : 0; }

    const Tokenizer& tok_;
    int64_t n_ctx_;
    const BatchInput& input_;
    const PromptEncoder& encode_;
    RecordWriter& out_;
    const RecordContext& ctx_;
    const RunnerOptions& options_;
    std::vector<int32_t> markers_;  // the syntaxes' marker tokens (chat::marker_tokens): printed as their text
    Scheduler sched_;
    std::deque<size_t> pending_;  // entry indices not yet submitted
    std::unordered_map<int64_t, Active> active_;
    // Requests with the same constraint share its grammar (and the masks it caches).
    std::vector<std::pair<grammar::ConstraintSpec, std::shared_ptr<grammar::TokenGrammar>>> grammars_;
    bool warned_ = false;  // RunnerOptions::on_warning was called
    std::mt19937_64 seeds_{std::random_device{}()};
    BatchProgress p_;
};

void Run::finished(int64_t id, const GenerationStats& st) {
    auto node = active_.extract(id);
    const Generation& gen = *node.mapped().gen;
    if (gen.finish_reason() == FinishReason::interrupted) {
        ++p_.abandoned;
        return;
    }
    Completion c{std::move(node.mapped().text), gen.finish_reason(), st.prompt_tokens, st.completion_tokens,
                 st.reused_tokens, gen.seed(), nullptr, nullptr};
    const BatchRequest& request = input_.entries[static_cast<size_t>(id)].request;
    if (gen.sampler().logprobs_on()) {
        if (ctx_.format != InputFormat::openai) c.logprobs = logprobs_content(tok_, gen.logprobs(), true, markers_);
        else if (request.endpoint == Endpoint::chat_completions)
            c.logprobs = {{"content", logprobs_content(tok_, gen.logprobs(), false, markers_)}};
        else c.logprobs = completion_logprobs(tok_, gen.logprobs(), markers_);
    }
    take_reasoning(c, request, options_.reasoning_syntax, chat::prompt_opens_think(tok_, gen.prompt()));
    take_tool_calls(c, request, options_.tool_syntax);
    out_.write(result_record(ctx_, request, static_cast<size_t>(id), c));
    ++p_.done;
    p_.reused_tokens += st.reused_tokens;
    p_.guessed_tokens += st.guessed_tokens;
    p_.accepted_tokens += st.accepted_tokens;
}

std::shared_ptr<grammar::TokenGrammar> Run::grammar_for(const BatchRequest& r) {
    // A grammar's automaton grows with every text it reads; past this many stacks new requests get a fresh copy
    // (the running ones keep theirs), so that a long batch stays within a bounded memory.
    constexpr size_t kRenewStacks = size_t{1} << 20;
    // The request's own response_format or grammar, else the call its tool_choice forces, else the command line's.
    const std::optional<grammar::ConstraintSpec> forced =
        r.overrides.constraint ? std::nullopt
                               : chat::tool_choice_constraint(r.template_vars, options_.tool_syntax,
                                                              fmt::format("input line {}", r.line));
    const std::optional<grammar::ConstraintSpec>& spec =
        r.overrides.constraint ? r.overrides.constraint : forced ? forced : options_.constraint;
    if (!spec) return nullptr;
    for (auto& [s, g] : grammars_) {
        if (!(s == *spec)) continue;
        if (g->n_stacks() > kRenewStacks) g = g->renewed();
        return g;
    }
    // grammars no running request holds go first once many are kept: each holds its caches
    if (grammars_.size() >= 16)
        std::erase_if(grammars_, [](const auto& e) { return e.second.use_count() == 1; });
    auto g = grammar::token_grammar(*spec, tok_, markers_);
    if (!warned_ && !g->grammar().warnings.empty() && options_.on_warning) {
        warned_ = true;
        options_.on_warning(g->grammar().warnings.front());
    }
    grammars_.emplace_back(*spec, g);
    return g;
}

// Keeps the scheduler's queue as long as its slots, so prompts are encoded just before they can run.
void Run::feed() {
    while (sched_.admitting() && !pending_.empty() && sched_.n_waiting() < static_cast<size_t>(sched_.n_slots())) {
        const size_t index = pending_.front();
        pending_.pop_front();
        const BatchRequest& r = input_.entries[index].request;
        try {
            GenerationParams params = request_params(options_, r.overrides, seeds_());
            params.grammar = grammar_for(r);
            params.shown_tokens = markers_;
            auto gen = std::make_unique<Generation>(tok_, encode_(r), params, n_ctx_);
            for (const auto& [token, bias] : params.sampling.logit_bias)
                if (token >= gen->n_token_ids())
                    throw UsageError(fmt::format("logit_bias: token {} is not in the vocabulary (0 to {})", token,
                                                 gen->n_token_ids() - 1));
            Generation& g = *gen;
            active_.emplace(static_cast<int64_t>(index), Active{std::move(gen), {}});
            sched_.submit(static_cast<int64_t>(index), g);
        } catch (const Interrupted&) {
            // A signal cut its encoding: no record, so --resume runs it; the running requests still finish.
            pending_.push_front(index);
            return;
        } catch (const Error& e) {
            write_error(index, e.what());
        }
    }
}

BatchProgress Run::run(const std::unordered_set<std::string>& done,
                       const std::function<void(const BatchProgress&)>& on_progress) {
    const auto t0 = clock::now();
    const auto& entries = input_.entries;
    for (size_t i = 0; i < entries.size(); ++i) {
        if (!options_.shard.contains(i)) continue;
        if (done.contains(entries[i].request.id)) {
            ++p_.skipped;
            continue;
        }
        ++p_.total;
        if (entries[i].error) {
            write_error(i, *entries[i].error);
        } else {
            pending_.push_back(i);
        }
    }
    for (;;) {
        const int level = interrupts();
        if (level >= 1) sched_.stop_admission();
        if (level >= 2) sched_.abandon_running();
        feed();
        const bool ran = sched_.step();
        p_.prompt_tokens += sched_.last_step().prefill_tokens;
        p_.generated_tokens += sched_.last_step().decode_tokens;
        p_.elapsed_s = std::chrono::duration<double>(clock::now() - t0).count();
        if (on_progress) on_progress(p_);
        if (!ran && (pending_.empty() || !sched_.admitting())) break;
    }
    out_.sync();
    return p_;
}

}  // namespace

size_t runnable_requests(const BatchInput& input, const Shard& shard, const std::unordered_set<std::string>& done) {
    size_t n = 0;
    for (size_t i = 0; i < input.entries.size(); ++i) {
        const InputEntry& e = input.entries[i];
        n += shard.contains(i) && !e.error && !done.contains(e.request.id);
    }
    return n;
}

int64_t context_needed(const BatchInput& input, const Shard& shard, const std::unordered_set<std::string>& done,
                       const PromptEncoder& encode, const RunnerOptions& options) {
    std::vector<std::pair<size_t, int64_t>> bounded;  // (entry, max_tokens) of the runnable requests
    for (size_t i = 0; i < input.entries.size(); ++i) {
        const InputEntry& e = input.entries[i];
        if (!shard.contains(i) || e.error || done.contains(e.request.id)) continue;
        int64_t max_tokens = 0;
        try {
            max_tokens = request_params(options, e.request.overrides, 0).max_tokens;
        } catch (const Error&) {
            continue;  // an error record
        }
        if (max_tokens < 0) return 0;  // (before encoding anything)
        bounded.emplace_back(i, max_tokens);
    }
    int64_t most = 0;
    for (const auto& [i, max_tokens] : bounded) {
        try {
            most = std::max(most, static_cast<int64_t>(encode(input.entries[i].request).size()) + max_tokens);
        } catch (const Interrupted&) {
            throw;
        } catch (const Error&) {
        }
    }
    return most;
}

BatchProgress run_batch(Backend& backend, const Tokenizer& tok, int64_t n_ctx, const BatchInput& input,
                        const std::unordered_set<std::string>& done, const PromptEncoder& encode, RecordWriter& out,
                        const RecordContext& ctx, const RunnerOptions& options,
                        const std::function<void(const BatchProgress&)>& on_progress) {
    Run run(backend, tok, n_ctx, input, encode, out, ctx, options);
    return run.run(done, on_progress);
}

}  // namespace quill::batch
