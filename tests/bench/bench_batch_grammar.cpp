// Constrained batch micro-benchmark (not a test): a decode step of N sequences each under the same JSON schema,
// against the same sequences unconstrained, and with the schema but no overlap (each mask computed when its row is
// sampled instead of during the forward pass). Per step: the forward pass (wall clock) and what follows it,
// sampling and the scheduler's bookkeeping (the main thread's CPU time, so that a busy machine's other processes do
// not count). Rounds alternate the three modes; each constrained round binds a fresh grammar, so its cold masks
// count. Only the first decode steps in which all N sequences run are timed, so that every mode is measured at the
// same positions. Medians over all rounds.
//   bench_batch_grammar MODEL.gguf [N_SEQUENCES=16] [THREADS=2] [ROUNDS=3] [STEPS=24]
#include "engine/cpu/cpu_backend.h"
#include "engine/grammar/constraint.h"
#include "engine/model/model.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/scheduler.h"
#include "tests/bench/people_schema.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <time.h>

using namespace quill;

namespace {

const char* const kTopics[] = {"a baker", "a sailor", "a painter", "a nurse", "a farmer", "a pilot", "a chef",
                               "a poet", "a miner", "a judge", "a tailor", "a driver", "a singer", "a doctor",
                               "a clerk", "a gardener", "a potter", "a smith", "a weaver", "a hunter"};

enum class Mode { plain, schema, schema_no_overlap };
const char* name(Mode m) {
    return m == Mode::plain ? "unconstrained" : m == Mode::schema ? "schema" : "schema, no overlap";
}

double thread_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// The backend, with the wall time of its last forward pass and the thread CPU time when it ended.
class TimedBackend final : public Backend {
public:
    explicit TimedBackend(Backend& inner) : inner_(inner) {}
    std::string_view name() const override { return inner_.name(); }
    const ModelConfig& config() const override { return inner_.config(); }
    const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
    void forward(const Batch& batch, std::span<float> logits) override {
        const auto t0 = std::chrono::steady_clock::now();
        inner_.forward(batch, logits);
        forward_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        cpu_after_forward = thread_cpu_ms();
    }
    double forward_ms = 0, cpu_after_forward = 0;

private:
    Backend& inner_;
};

struct Step {
    double forward_ms;  // wall
    double after_ms;    // the main thread's CPU time from the end of the forward pass to the end of the step
};

// The first `steps` decode steps in which all n sequences run.
std::vector<Step> round_steps(TimedBackend& backend, const Tokenizer& tok, Mode mode, int n, int steps,
                              uint64_t seed) {
    GenerationParams p;
    p.max_tokens = steps + 8;
    p.sampling.temperature = 0.8f;
    if (mode != Mode::plain)
        p.grammar =
            grammar::token_grammar({grammar::ConstraintSpec::Kind::json_schema, bench::kPeopleSchema, "schema"}, tok);
    std::vector<std::unique_ptr<Generation>> gens;
    Scheduler sched(backend, SchedulerOptions{512}, [](int64_t, std::string_view) {},
                    [](int64_t, const GenerationStats&) {});
    for (int i = 0; i < n; ++i) {
        p.sampling.seed = seed + static_cast<uint64_t>(i);
        const std::string prompt = fmt::format("A JSON record about {}, with name, age and status:\n",
                                               kTopics[static_cast<size_t>(i) % std::size(kTopics)]);
        gens.push_back(std::make_unique<Generation>(tok, tok.encode(prompt, true, false), p, 1024));
        if (mode == Mode::schema_no_overlap) gens.back()->sampler().constrain(p.grammar, false);
        sched.submit(i, *gens.back());
    }
    std::vector<Step> out;
    for (;;) {
        const bool full = sched.n_running() == static_cast<size_t>(n) &&
                          std::all_of(gens.begin(), gens.end(), [](const auto& g) { return g->n_generated() > 0; });
        if (!sched.step()) break;
        const double after = thread_cpu_ms() - backend.cpu_after_forward;
        if (full && sched.last_step().prefill_tokens == 0 && static_cast<int>(out.size()) < steps)
            out.push_back({backend.forward_ms, after});
    }
    return out;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

double mean(const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        fmt::print(stderr,
                   "usage: bench_batch_grammar MODEL.gguf [N_SEQUENCES=16] [THREADS=2] [ROUNDS=3] [STEPS=24]\n");
        return 2;
    }
    const int n = argc > 2 ? std::atoi(argv[2]) : 16;
    const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
    const int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
    const int steps = argc > 5 ? std::atoi(argv[5]) : 24;
    const auto model = Model::load(argv[1]);
    const auto tok = Tokenizer::from_gguf(model->file);
    cpu::CpuBackendOptions o;
    o.n_threads = threads;
    o.n_ctx = 1024;
    o.n_slots = n;
    cpu::CpuBackend cpu(model->config, model->weights, o);
    TimedBackend backend(cpu);
    fmt::print("{} sequences, {} threads, the first {} decode steps with all running, {} rounds\n", n, threads, steps,
               rounds);
    const Mode modes[] = {Mode::plain, Mode::schema, Mode::schema_no_overlap};
    std::vector<double> forward[3], after[3];
    for (int r = 0; r < rounds; ++r) {
        for (int m = 0; m < 3; ++m) {
            const std::vector<Step> st = round_steps(backend, *tok, modes[m], n, steps, 100 * static_cast<uint64_t>(r));
            std::vector<double> f, a;
            for (const Step& x : st) {
                f.push_back(x.forward_ms);
                a.push_back(x.after_ms);
            }
            forward[m].insert(forward[m].end(), f.begin(), f.end());
            after[m].insert(after[m].end(), a.begin(), a.end());
            fmt::print("round {} {:>20}: {} steps, median forward {:.2f} ms, then {:.3f} ms CPU\n", r + 1,
                       name(modes[m]), st.size(), median(f), median(a));
        }
    }
    const double base = median(forward[0]) + median(after[0]);
    for (int m = 0; m < 3; ++m)
        fmt::print("{:>20}: median forward {:.2f} ms; sampling and bookkeeping per step {:.3f} ms CPU median, {:.3f} "
                   "mean: {:.2f}% (mean {:.2f}%) of an unconstrained step more\n",
                   name(modes[m]), median(forward[m]), median(after[m]), mean(after[m]),
                   100.0 * (median(after[m]) - median(after[0])) / base,
                   100.0 * (mean(after[m]) - mean(after[0])) / base);
    return 0;
}
