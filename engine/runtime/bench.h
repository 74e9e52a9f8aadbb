// `quill bench`: prefill and decode throughput over repeated runs, and the decode's memory traffic.
#pragma once

#include "engine/runtime/backend.h"
#include "engine/model/weights.h"

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

// The tests of llama.cpp's llama-bench, so that the two compare line by line: "pp N" times a prefill of N tokens
// into an empty cache (in forward calls of at most n_batch tokens), "tg N" N decode steps from an empty cache, one
// token per sequence per step. With n_seq > 1 every tg step decodes n_seq sequences in one forward call (batched
// decode, as `quill batch --parallel` runs), and tokens/s counts the tokens of all of them.
struct BenchOptions {
    std::vector<int> n_prompt{512};  // a pp test for each value > 0
    std::vector<int> n_gen{128};     // a tg test for each value > 0
    int reps = 5;
    int n_batch = 512;  // prefill tokens per forward call
    int n_seq = 1;      // sequences decoded together in tg tests
};

struct BenchTest {
    std::string name;  // "pp512", "tg128", "tg128x16" (16 sequences)
    int n_prompt = 0, n_gen = 0, n_seq = 1;
    std::vector<double> tokens_per_s;  // one per run
    std::vector<double> gb_per_s;      // tg: weights + KV cache read per step, over the step time
    std::vector<double> tflops;        // pp: the prefill's arithmetic (prefill_flops) over its time
};

struct BenchResult {
    std::vector<BenchTest> tests;
    // {"tests": [{"test", "n_prompt", "n_gen", "n_seq", "tokens_per_s" (median), "tokens_per_s_mean", "_stddev",
    // "_min", "_max", "gb_per_s" (median, tg), "tflops" (median, pp), "runs": [...]}]}
    nlohmann::json to_json() const;
};

// Bytes a decode step reads from the weights: every layer matrix and the output matrix.
size_t decode_weight_bytes(const Weights& w);

// Floating-point operations of a prefill of n tokens into an empty cache with logits for the last one: two per
// multiply-add of every layer matrix and token, of the output matrix once, and of causal attention (Q K^T and P V
// over each token's positions so far, or its sliding window).
double prefill_flops(const ModelConfig& c, const Weights& w, int64_t n);

// The positions a backend needs per slot, and the slots, for these options.
int64_t bench_context(const BenchOptions& opts);

// Runs one warm-up and then opts.reps timed runs of each test, each from an empty cache.
BenchResult run_bench(Backend& backend, const Weights& weights, const BenchOptions& opts);

// "1234.56 ± 12.34" (mean ± sample standard deviation, as llama-bench prints).
std::string mean_pm_stddev(const std::vector<double>& v);

// The markdown table `quill bench` prints, as llama-bench does: a row per test of the model, the backend ("cpu avx2"
// and its threads, or its name and "-") and the throughput in tokens per second (mean ± standard deviation over the
// runs), with a pp test's arithmetic rate and a tg test's memory traffic (medians), each also as a fraction of the
// device's measured GEMM rate and copy bandwidth where those are > 0. The model's description is escaped for the terminal.
std::string bench_table(const BenchResult& result, const BackendInfo& backend, std::string_view model,
                        double copy_gb_per_s, double matmul_tflops);

}  // namespace quill
