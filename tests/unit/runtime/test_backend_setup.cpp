// What every backend checks and reads the same way: the KV cache's size (check_kv_size, in each constructor) and the
// list of a layer's weight matrices (layer_matrices: packing, the checks, the benchmark's byte counts).
#include <catch2/catch.hpp>

#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/layer_matrices.h"
#include "engine/reference/reference_backend.h"
#include "engine/runtime/bench.h"
#include "tests/support/random_model.h"

namespace test_backend_setup {

using namespace quill;

TEST_CASE("the CPU and reference backends refuse a context or slot count under 1, naming it", "[cpu]") {
    const auto model = test::make_tiny_model({});
    struct Case {
        int64_t n_ctx, n_slots;
        const char* message;
    };
    for (const Case c : {Case{0, 1, "context size must be at least 1, got 0"},
                         Case{-3, 2, "context size must be at least 1, got -3"},
                         Case{16, 0, "slot count must be at least 1, got 0"}}) {
        INFO(c.n_ctx << " positions, " << c.n_slots << " slots");
        cpu::CpuBackendOptions cpu_options;
        cpu_options.n_ctx = c.n_ctx;
        cpu_options.n_slots = c.n_slots;
        cpu_options.n_threads = 1;
        CHECK_THROWS_WITH(cpu::CpuBackend(model->config, model->weights, cpu_options), c.message);
        CHECK_THROWS_AS(cpu::CpuBackend(model->config, model->weights, cpu_options), UsageError);
        ReferenceBackendOptions ref_options;
        ref_options.n_ctx = c.n_ctx;
        ref_options.n_slots = c.n_slots;
        CHECK_THROWS_WITH(ReferenceBackend(model->config, model->weights, ref_options), c.message);
        CHECK_THROWS_AS(ReferenceBackend(model->config, model->weights, ref_options), UsageError);
    }
}

TEST_CASE("a layer's weight matrices are its seven projections in the forward's order", "[cpu]") {
    const auto model = test::make_tiny_model({});
    const LayerWeights& L = model->weights.layers.at(1);
    const auto m = layer_matrices(L);
    const std::vector<std::string> names = {"blk.1.attn_q.weight",   "blk.1.attn_k.weight", "blk.1.attn_v.weight",
                                            "blk.1.attn_output.weight", "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight",
                                            "blk.1.ffn_down.weight"};
    REQUIRE(m.size() == names.size());
    for (size_t i = 0; i < m.size(); ++i) CHECK(m[i]->name == names[i]);
    // The benchmark's decode bytes: the output matrix and every layer's seven.
    size_t bytes = model->weights.output.n_bytes;
    for (const LayerWeights& layer : model->weights.layers)
        for (const TensorView* t : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.ffn_gate, &layer.ffn_up,
                                    &layer.ffn_down})
            bytes += t->n_bytes;
    CHECK(decode_weight_bytes(model->weights) == bytes);
}

}  // namespace test_backend_setup
