// `quill bench`: prefill and decode throughput over repeated runs, and the decode's memory traffic.
#pragma once

#include "engine/runtime/backend.h"
#include "engine/model/weights.h"

#include <nlohmann/json.hpp>
#include <vector>

namespace quill {

struct BenchOptions {
    int n_prompt = 512;  // prompt tokens per run (0: no prefill timing)
    int n_gen = 128;     // decoded tokens per run (0: no decode timing)
    int reps = 5;
    int n_batch = 512;   // prefill batch size
};

struct BenchRun {
    double prefill_tokens_per_s = 0;
    double decode_tokens_per_s = 0;
    double decode_gb_per_s = 0;  // weights + KV cache read per decoded token, over the decode time
};

struct BenchResult {
    std::vector<BenchRun> runs;
    nlohmann::json to_json() const;  // medians at the top, plus min/max and every run
};

// Bytes a decode step reads from the weights: every layer matrix and the output matrix.
size_t decode_weight_bytes(const Weights& w);

// Runs one warm-up and then opts.reps timed runs; each run starts at position 0 of slot 0.
BenchResult run_bench(Backend& backend, const Weights& weights, const BenchOptions& opts);

}  // namespace quill
