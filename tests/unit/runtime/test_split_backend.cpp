// The split forward (engine/runtime/split_backend.h): CPU backends holding layer ranges, the hidden states passed
// across, give every sequence's logits bit for bit those of one CPU backend holding the whole model, at every split
// point, on the synthetic tiny model of every architecture; and everything else a Backend does (forward_sample,
// copy_kv, max_rewind) works across the split.
#include <catch2/catch.hpp>

#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/split_backend.h"

#include <cmath>
#include <cstring>

namespace test_split_backend {

using namespace quill;

namespace {

constexpr int64_t kCtx = 1024;  // more than gemma2-tiny's ring (window 8 + 512 + 64): its local layers keep rings

cpu::CpuBackendOptions options(LayerRange layers = {}) {
    cpu::CpuBackendOptions o;
    o.n_threads = 2;  // (two threads: the int8 forms quantized in the sections that write their rows)
    o.n_ctx = kCtx;
    o.n_slots = 3;
    o.layers = layers;
    return o;
}

// The whole model on one CPU backend, or split into ranges starting at `firsts` (after 0).
std::unique_ptr<Backend> make(const SyntheticModel& m, const std::vector<int64_t>& firsts) {
    if (firsts.empty()) return std::make_unique<cpu::CpuBackend>(m.config, m.weights, options());
    std::vector<std::unique_ptr<Backend>> ranges;
    int64_t begin = 0;
    for (size_t i = 0; i <= firsts.size(); ++i) {
        const int64_t end = i < firsts.size() ? firsts[i] : m.config.n_layer;
        ranges.push_back(std::make_unique<cpu::CpuBackend>(m.config, m.weights, options({begin, end})));
        begin = end;
    }
    return std::make_unique<SplitBackend>(std::move(ranges), "plan");
}

// A run over three slots: a 40-token prompt in slot 0 with a 9-token one in slot 1 (one batch), slot 0's first 30
// positions copied to slot 2 which continues from there, then decode steps of all three with a prompt chunk
// beside them; every row's logits in order, and forward_sample's greedy picks of the last step.
std::vector<float> trace(Backend& b, std::vector<int32_t>* picks) {
    const int64_t nv = b.config().n_vocab;
    std::vector<float> all;
    auto run = [&](const Batch& batch) {
        std::vector<float> logits(static_cast<size_t>(batch.n_logits() * nv));
        b.forward(batch, logits);
        all.insert(all.end(), logits.begin(), logits.end());
    };
    auto tok = [&](int i) { return static_cast<int32_t>((i * 37 + 11) % nv); };
    Batch prefill;
    for (int p = 0; p < 40; ++p) prefill.add(tok(p), p, 0, p % 7 == 0 || p == 39);
    for (int p = 0; p < 9; ++p) prefill.add(tok(p + 100), p, 1, p == 8);
    run(prefill);
    b.copy_kv(0, 2, 0, 30);
    Batch rest;
    for (int p = 30; p < 35; ++p) rest.add(tok(p + 7), p, 2, true);
    run(rest);
    for (int step = 0; step < 3; ++step) {
        Batch d;
        d.add(tok(step), 40 + step, 0, true, true);
        d.add(tok(step + 1), 9 + step, 1, true, true);
        d.add(tok(step + 2), 35 + step, 2, true, true);
        run(d);
    }
    Batch last;
    last.add(tok(5), 43, 0, true, true);
    last.add(tok(6), 12, 1, true, true);
    SamplingParams params;
    params.temperature = 0.0f;
    Sampler greedy(params);
    Sampler* samplers[] = {&greedy, &greedy};
    picks->assign(2, -1);
    b.forward_sample(last, samplers, nv, *picks);
    return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a split forward gives the unsplit logits bit for bit at every split point on every architecture",
          "[split]") {
    const char* shapes[] = {"stories15m", "gemma2-tiny", "phi3-tiny", "qwen3-tiny", "qwen3-tiny-yarn", "smollm3-tiny",
                            "mistral3-tiny"};
    for (const char* shape : shapes) {
        ModelConfig config = synthetic_config(shape);
        if (config.n_layer > 4) config.n_layer = 4;  // (stories15m: four of its six layers are enough)
        const auto model = SyntheticModel::make(config, GgmlType::Q8_0, 7);
        std::vector<int32_t> want_picks;
        const auto whole = make(*model, {});
        const std::vector<float> want = trace(*whole, &want_picks);
        for (int64_t split = 1; split < config.n_layer; ++split) {
            INFO(shape << ": layers 0-" << split - 1 << " and " << split << "-" << config.n_layer - 1);
            std::vector<int32_t> picks;
            const auto two = make(*model, {split});
            CHECK(two->max_rewind() == whole->max_rewind());
            CHECK(same_bits(trace(*two, &picks), want));
            CHECK(picks == want_picks);
        }
        if (config.n_layer >= 3) {  // three ranges, the middle one a single layer
            INFO(shape << ": three ranges");
            std::vector<int32_t> picks;
            const auto three = make(*model, {1, 2});
            CHECK(same_bits(trace(*three, &picks), want));
        }
    }
}

TEST_CASE("each range holds only its layers' KV cache and refuses forward() alone", "[split]") {
    ModelConfig config = synthetic_config("qwen3-tiny");
    const auto model = SyntheticModel::make(config, GgmlType::Q8_0, 7);
    cpu::CpuBackend part(model->config, model->weights, options({1, 3}));
    CHECK(part.kv_shape().n_layer == 2);
    CHECK(part.layer_range() == LayerRange{1, 3});
    Batch b;
    b.add(1, 0, 0, true);
    std::vector<float> logits(static_cast<size_t>(config.n_vocab));
    CHECK_THROWS(part.forward(b, logits));
    const auto split = make(*model, {1});
    CHECK(split->kv_shape().n_layer == config.n_layer);
    CHECK(split->describe().summary.starts_with("plan; cpu backend, 2 threads"));
}

TEST_CASE("the reference backend split by layers gives its unsplit logits to the float rounding of the hidden "
          "states", "[split]") {
    const auto model = SyntheticModel::make(synthetic_config("qwen3-tiny"), GgmlType::Q8_0, 7);
    auto ref = [&](LayerRange layers) {
        ReferenceBackendOptions o;
        o.n_ctx = 64;
        o.n_slots = 3;
        o.layers = layers;
        return std::make_unique<ReferenceBackend>(model->config, model->weights, o);
    };
    std::vector<int32_t> want_picks, picks;
    const auto whole = ref({});
    const std::vector<float> want = trace(*whole, &want_picks);
    std::vector<std::unique_ptr<Backend>> ranges;
    ranges.push_back(ref({0, 1}));
    ranges.push_back(ref({1, 4}));
    SplitBackend split(std::move(ranges), "plan");
    const std::vector<float> got = trace(split, &picks);
    REQUIRE(got.size() == want.size());
    double worst = 0.0;  // the residual stream rounded to float at the boundary: relative 6e-8, grown by 3 layers
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    CHECK(worst < 1e-4);
    CHECK(picks == want_picks);
}

}  // namespace test_split_backend
