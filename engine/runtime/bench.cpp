#include "engine/runtime/bench.h"

#include "engine/error.h"

#include <algorithm>
#include <chrono>

namespace quill {

size_t decode_weight_bytes(const Weights& w) {
    size_t n = w.output.n_bytes;
    for (const auto& L : w.layers)
        for (const TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) n += t->n_bytes;
    return n;
}

namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

// One run: a prefill of n_prompt tokens, then n_gen greedy decode steps.
BenchRun one_run(Backend& backend, size_t weight_bytes, int n_prompt, int n_gen, int n_batch) {
    const ModelConfig& c = backend.config();
    const KvCacheShape& kv = backend.kv_shape();
    std::vector<float> logits(c.n_vocab);
    BenchRun r;
    Batch batch;
    int32_t token = 1;
    auto t0 = clock::now();
    for (int begin = 0; begin < n_prompt; begin += n_batch) {
        batch.tokens.clear();
        int end = std::min(n_prompt, begin + n_batch);
        for (int i = begin; i < end; ++i) batch.add((i * 7919 + 13) % static_cast<int32_t>(c.n_vocab), i, 0, i + 1 == n_prompt);
        backend.forward(batch, logits);
    }
    if (n_prompt > 0) {
        r.prefill_tokens_per_s = n_prompt / seconds_since(t0);
        token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    double bytes = 0;
    t0 = clock::now();
    for (int i = 0; i < n_gen; ++i) {
        const int32_t pos = n_prompt + i;
        batch.tokens.clear();
        batch.add(token, pos, 0, true);
        backend.forward(batch, logits);
        token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        bytes += static_cast<double>(weight_bytes) +
                 static_cast<double>(kv.n_layer) * (pos + 1) * kv.row_elems() * kv.elem_size() * 2;
    }
    if (n_gen > 0) {
        double s = seconds_since(t0);
        r.decode_tokens_per_s = n_gen / s;
        r.decode_gb_per_s = bytes / s / 1e9;
    }
    return r;
}

struct Summary {
    double median, min, max;
};

Summary summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return {median, v.front(), v.back()};
}

}  // namespace

BenchResult run_bench(Backend& backend, const Weights& weights, const BenchOptions& o) {
    if (o.n_prompt < 0 || o.n_gen < 0 || o.reps < 1 || o.n_batch < 1)
        throw UsageError("bench: -p and -n must be >= 0, -r and --batch >= 1");
    if (o.n_prompt + o.n_gen > backend.kv_shape().n_ctx)
        throw UsageError(fmt::format("bench: -p {} + -n {} exceeds the context of {} (raise -c)", o.n_prompt, o.n_gen,
                                     backend.kv_shape().n_ctx));
    const size_t wbytes = decode_weight_bytes(weights);
    one_run(backend, wbytes, std::min(o.n_prompt, 16), std::min(o.n_gen, 4), o.n_batch);  // warm-up
    BenchResult res;
    for (int i = 0; i < o.reps; ++i) res.runs.push_back(one_run(backend, wbytes, o.n_prompt, o.n_gen, o.n_batch));
    return res;
}

nlohmann::json BenchResult::to_json() const {
    nlohmann::json j;
    auto field = [&](const char* name, double BenchRun::*m) {
        std::vector<double> v;
        for (const auto& r : runs) v.push_back(r.*m);
        Summary s = summarize(v);
        j[name] = s.median;
        j[std::string(name) + "_min"] = s.min;
        j[std::string(name) + "_max"] = s.max;
    };
    field("prefill_tokens_per_s", &BenchRun::prefill_tokens_per_s);
    field("decode_tokens_per_s", &BenchRun::decode_tokens_per_s);
    field("decode_gb_per_s", &BenchRun::decode_gb_per_s);
    j["runs"] = nlohmann::json::array();
    for (const auto& r : runs)
        j["runs"].push_back({{"prefill_tokens_per_s", r.prefill_tokens_per_s},
                             {"decode_tokens_per_s", r.decode_tokens_per_s},
                             {"decode_gb_per_s", r.decode_gb_per_s}});
    return j;
}

}  // namespace quill
