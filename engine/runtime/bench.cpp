#include "engine/runtime/bench.h"

#include "engine/error.h"
#include "engine/io/escape.h"
#include "engine/model/layer_matrices.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

namespace quill {

namespace {

// sum over every layer matrix t of f(t) times the share of tokens that read t: n_expert_used / n_expert for an
// expert's matrices (layer_matrices lists them last), 1 for the others.
template <class F>
double per_token_sum(const Weights& w, F&& f) {
    double sum = 0;
    for (const auto& L : w.layers) {
        const auto m = layer_matrices(L);
        // (an expert's gate, up and down; nemotron_h_moe's up and down)
        const size_t per_expert = L.experts.empty() || L.experts[0].gate.data ? 3 : 2;
        const size_t first_expert = m.size() - per_expert * L.experts.size();
        const double share =
            L.experts.empty() ? 1.0 : static_cast<double>(w.n_expert_used) / static_cast<double>(L.experts.size());
        for (size_t i = 0; i < m.size(); ++i) sum += f(*m[i]) * (i < first_expert ? 1.0 : share);
    }
    return sum;
}

}  // namespace

size_t decode_weight_bytes(const Weights& w) {
    const double layers = per_token_sum(w, [](const TensorView& t) { return static_cast<double>(t.n_bytes); });
    // (gemma4 E2B/E4B: the projection to the per-layer inputs, and a token's row of their table)
    const size_t per_layer =
        w.per_layer_model_proj.n_bytes + (w.per_layer_tok_embd.data ? w.per_layer_tok_embd.row_bytes() : 0);
    return w.output.n_bytes + per_layer + static_cast<size_t>(std::llround(layers));
}

double prefill_flops(const ModelConfig& c, const Weights& w, int64_t n) {
    const double per_token = per_token_sum(w, [](const TensorView& t) {
        return 2.0 * static_cast<double>(t.ne[0]) * static_cast<double>(t.n_rows());
    });
    double attention = 0;
    for (int64_t l = 0; l < c.n_layer; ++l) {
        // (qwen35's delta nets: a few products a head; lfm2's short convs: a few a channel; next to nothing)
        if (!c.layer_has_attention(l)) continue;  // (nemotron_h: an FFN alone)
        double keys = 0;  // sum over tokens of the positions each attends to
        for (int64_t t = 0; t < n; ++t) keys += static_cast<double>(t + 1 - c.first_visible(l, t));
        attention += 4.0 * static_cast<double>(c.layer_n_embd_q(l)) * keys;
    }
    const double output = 2.0 * static_cast<double>(w.output.ne[0]) * static_cast<double>(w.output.n_rows());
    const double per_layer = 2.0 * static_cast<double>(w.per_layer_model_proj.ne[0]) *
                             static_cast<double>(w.per_layer_model_proj.data ? w.per_layer_model_proj.n_rows() : 0);
    return (per_token + per_layer) * static_cast<double>(n) + attention + output;
}

namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

int32_t argmax(const float* v, int64_t n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

// A prefill of n tokens into slot 0 from position 0: tokens per second.
double prefill_run(Backend& backend, int n, int n_batch) {
    const ModelConfig& c = backend.config();
    std::vector<float> logits(c.n_vocab);
    Batch batch;
    const auto t0 = clock::now();
    for (int begin = 0; begin < n; begin += n_batch) {
        batch.tokens.clear();
        const int end = std::min(n, begin + n_batch);
        for (int i = begin; i < end; ++i)
            batch.add((i * 7919 + 13) % static_cast<int32_t>(c.n_vocab), i, 0, i + 1 == n);
        backend.forward(batch, logits);
    }
    return n / seconds_since(t0);
}

// n greedy decode steps of n_seq sequences (slots 0..n_seq-1) from position 0: tokens per second and GB/s.
std::pair<double, double> decode_run(Backend& backend, size_t weight_bytes, int n, int n_seq) {
    const ModelConfig& c = backend.config();
    const KvCacheShape& kv = backend.kv_shape();
    std::vector<float> logits(static_cast<size_t>(n_seq * c.n_vocab));
    std::vector<int32_t> tokens(static_cast<size_t>(n_seq));
    for (int s = 0; s < n_seq; ++s) tokens[s] = (s * 7919 + 1) % static_cast<int32_t>(c.n_vocab);
    Batch batch;
    double bytes = 0;
    const auto t0 = clock::now();
    for (int i = 0; i < n; ++i) {
        batch.tokens.clear();
        for (int s = 0; s < n_seq; ++s) batch.add(tokens[s], i, s, true, true);
        backend.forward(batch, logits);
        for (int s = 0; s < n_seq; ++s) tokens[s] = argmax(logits.data() + s * c.n_vocab, c.n_vocab);
        bytes += static_cast<double>(weight_bytes) +
                 static_cast<double>(n_seq) * kv.n_layer * (i + 1) * kv.row_elems() * kv.elem_size() * 2;
    }
    const double s = seconds_since(t0);
    return {static_cast<double>(n) * n_seq / s, bytes / s / 1e9};
}

struct Summary {
    double median, min, max, mean, stddev;
};

Summary summarize(std::vector<double> v) {
    if (v.empty()) return {0, 0, 0, 0, 0};
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    double sum = 0;
    for (double x : v) sum += x;
    const double mean = sum / static_cast<double>(n);
    double ss = 0;
    for (double x : v) ss += (x - mean) * (x - mean);
    const double stddev = n > 1 ? std::sqrt(ss / static_cast<double>(n - 1)) : 0.0;
    return {median, v.front(), v.back(), mean, stddev};
}

}  // namespace

int64_t bench_context(const BenchOptions& o) {
    int64_t n = 1;
    for (int p : o.n_prompt) n = std::max<int64_t>(n, p);
    for (int g : o.n_gen) n = std::max<int64_t>(n, g);
    return n;
}

BenchResult run_bench(Backend& backend, const Weights& weights, const BenchOptions& o) {
    if (o.reps < 1 || o.n_batch < 1 || o.n_seq < 1) throw UsageError("bench: -r, --batch and --batch-decode must be >= 1");
    for (int v : o.n_prompt)
        if (v < 0) throw UsageError(fmt::format("bench: -p {} is negative", v));
    for (int v : o.n_gen)
        if (v < 0) throw UsageError(fmt::format("bench: -n {} is negative", v));
    const KvCacheShape& kv = backend.kv_shape();
    if (bench_context(o) > kv.n_ctx)
        throw UsageError(fmt::format("bench: a test of {} tokens exceeds the context of {} (raise -c)", bench_context(o),
                                     kv.n_ctx));
    if (o.n_seq > kv.n_slots)
        throw UsageError(fmt::format("bench: --batch-decode {} needs {} KV cache slots, the backend has {}", o.n_seq,
                                     o.n_seq, kv.n_slots));
    const size_t wbytes = decode_weight_bytes(weights);
    BenchResult res;
    for (int p : o.n_prompt) {
        if (p > 0) res.tests.push_back({fmt::format("pp{}", p), p, 0, 1, {}, {}, {}});
    }
    for (int g : o.n_gen) {
        if (g > 0)
            res.tests.push_back({o.n_seq > 1 ? fmt::format("tg{}x{}", g, o.n_seq) : fmt::format("tg{}", g), 0, g,
                                 o.n_seq, {}, {}, {}});
    }
    for (BenchTest& t : res.tests) {
        // A short warm-up of the same kind (page faults, first-touch of the cache, thread start).
        if (t.n_prompt > 0) prefill_run(backend, std::min(t.n_prompt, 16), o.n_batch);
        else decode_run(backend, wbytes, std::min(t.n_gen, 4), t.n_seq);
        for (int i = 0; i < o.reps; ++i) {
            if (t.n_prompt > 0) {
                const double tps = prefill_run(backend, t.n_prompt, o.n_batch);
                t.tokens_per_s.push_back(tps);
                t.tflops.push_back(prefill_flops(backend.config(), weights, t.n_prompt) * tps / t.n_prompt / 1e12);
            } else {
                const auto [tps, gbs] = decode_run(backend, wbytes, t.n_gen, t.n_seq);
                t.tokens_per_s.push_back(tps);
                t.gb_per_s.push_back(gbs);
            }
        }
    }
    return res;
}

std::string mean_pm_stddev(const std::vector<double>& v) {
    const Summary s = summarize(v);
    return fmt::format("{:.2f} ± {:.2f}", s.mean, s.stddev);
}

std::string bench_table(const BenchResult& result, const BackendInfo& backend, std::string_view model,
                        double copy_gb_per_s, double matmul_tflops) {
    const std::string backend_col = backend.n_threads > 0 ? fmt::format("cpu {}", backend.kernels) : backend.name;
    const std::string threads_col = backend.n_threads > 0 ? std::to_string(backend.n_threads) : "-";
    std::string table = "| model | backend | threads | test | t/s |\n| --- | --- | ---: | ---: | ---: |\n";
    auto median = [](std::vector<double> v) {  // the upper middle of an even count
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    for (const BenchTest& t : result.tests) {
        std::string ts = mean_pm_stddev(t.tokens_per_s);
        if (!t.tflops.empty()) {
            const double f = median(t.tflops);
            ts += matmul_tflops > 0.0 ? fmt::format(" ({:.2f} TFLOP/s, {:.0f}% of GEMM)", f, 100.0 * f / matmul_tflops)
                                      : fmt::format(" ({:.2f} TFLOP/s)", f);
        }
        if (!t.gb_per_s.empty()) {
            const double g = median(t.gb_per_s);
            ts += copy_gb_per_s > 0.0 ? fmt::format(" ({:.1f} GB/s, {:.0f}% of copy)", g, 100.0 * g / copy_gb_per_s)
                                      : fmt::format(" ({:.1f} GB/s)", g);
        }
        table += fmt::format("| {} | {} | {} | {} | {} |\n", escape_for_terminal(model), backend_col, threads_col,
                             t.name, ts);
    }
    return table;
}

nlohmann::json BenchResult::to_json() const {
    nlohmann::json j;
    j["tests"] = nlohmann::json::array();
    for (const BenchTest& t : tests) {
        const Summary s = summarize(t.tokens_per_s);
        nlohmann::json e{{"test", t.name},          {"n_prompt", t.n_prompt},     {"n_gen", t.n_gen},
                         {"n_seq", t.n_seq},         {"tokens_per_s", s.median},   {"tokens_per_s_mean", s.mean},
                         {"tokens_per_s_stddev", s.stddev}, {"tokens_per_s_min", s.min}, {"tokens_per_s_max", s.max},
                         {"runs", t.tokens_per_s}};
        if (!t.gb_per_s.empty()) e["gb_per_s"] = summarize(t.gb_per_s).median;
        if (!t.tflops.empty()) e["tflops"] = summarize(t.tflops).median;
        j["tests"].push_back(e);
    }
    return j;
}

}  // namespace quill
