// What sequences take beside the weights as the memory plan counts it (sequence_bytes: the CPU backend's KV cache
// and a recurrent model's state with its snapshots; per layer for the ranges of a split forward) against what the
// CPU backend allocates, for a dense model, Gemma 4 E2B's shape (shared-KV layers, sliding-window rings) and qwen35
// (a KV cache for its attending layers alone, a recurrent state per slot for the others).
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/synthetic.h"
#include "engine/session.h"

#include <catch2/catch.hpp>

namespace test_sequence_memory {

using namespace quill;

namespace {

cpu::CpuBackendOptions options(int64_t n_ctx, int64_t n_slots, int64_t snapshots, LayerRange layers = {}) {
    cpu::CpuBackendOptions o;
    o.n_threads = 1;
    o.reference = true;  // (no packed weights to make)
    o.n_ctx = n_ctx;
    o.n_slots = n_slots;
    o.state_snapshots = snapshots;
    o.layers = layers;
    return o;
}

// The plan's bytes of layers [begin, end): each layer's KV cache and recurrent state.
size_t planned(const ModelConfig& c, int64_t n_ctx, int64_t n_slots, int64_t snapshots, int64_t begin, int64_t end) {
    size_t bytes = 0;
    for (int64_t l = begin; l < end; ++l)
        bytes += cpu::kv_layer_bytes(c, KvType::f16, n_ctx, n_slots, l) +
                 cpu::recurrent_layer_bytes(c, n_slots, snapshots, l);
    return bytes;
}

}  // namespace

TEST_CASE("the memory plan counts the KV cache and recurrent state that the CPU backend allocates", "[model][cpu]") {
    struct Case {
        const char* shape;
        int64_t kv_layers;  // the layers with a KV cache of their own
    };
    // llama-tiny-256: all 4; gemma4-e-tiny: 3 of 6 (the others share theirs); qwen35-tiny: layer 3 of 5
    for (const Case& k : {Case{"llama-tiny-256", 4}, Case{"gemma4-e-tiny", 3}, Case{"qwen35-tiny", 1}}) {
        auto m = SyntheticModel::make(synthetic_config(k.shape), GgmlType::F32, 1);
        const ModelConfig& c = m->config;
        CHECK(c.n_layer_kv() == k.kv_layers);
        // (4100 positions: past gemma4-e-tiny's rings, and not whole key blocks)
        for (const auto& [n_ctx, n_slots, snapshots] : {std::tuple{64, 1, 0}, std::tuple{4100, 3, 2}}) {
            INFO(k.shape << ", context " << n_ctx << ", " << n_slots << " slots, " << snapshots << " snapshots");
            cpu::CpuBackend b(c, m->weights, options(n_ctx, n_slots, snapshots, {0, c.n_layer}));
            CHECK(b.kv_shape().n_layer == k.kv_layers);
            CHECK(b.kv_bytes() == cpu::kv_cache_bytes(c, KvType::f16, n_ctx, n_slots));
            CHECK(b.recurrent_bytes() == cpu::recurrent_state_bytes(c, n_slots, snapshots));
            CHECK(b.kv_bytes() + b.recurrent_bytes() == sequence_bytes(c, KvType::f16, n_ctx, n_slots, snapshots));
            CHECK(planned(c, n_ctx, n_slots, snapshots, 0, c.n_layer) == b.kv_bytes() + b.recurrent_bytes());
            CHECK((b.recurrent_bytes() > 0) == c.recurrent());
        }
    }
    // qwen35-tiny's attending layer alone pays for its context; each recurrent layer for its state per slot.
    const ModelConfig c = synthetic_config("qwen35-tiny");
    const size_t state = (256 * 3 + 4 * 32 * 32) * sizeof(float);  // conv window and delta net state of one layer
    CHECK(cpu::kv_cache_bytes(c, KvType::f16, 64, 2) == 2 * 2 * 64 * 128 * size_t{2});
    CHECK(cpu::recurrent_state_bytes(c, 2, 1) == 4 * 2 * 2 * state);
}

TEST_CASE("the ranges of a split qwen35 forward each allocate the KV cache and recurrent state of their layers",
          "[model][cpu]") {
    auto m = SyntheticModel::make(synthetic_config("qwen35-tiny"), GgmlType::F32, 1);
    const ModelConfig& c = m->config;
    for (const LayerRange r : {LayerRange{0, 2}, LayerRange{2, 4}, LayerRange{4, 5}}) {
        INFO("layers " << r.begin << "-" << r.end - 1);
        cpu::CpuBackend b(c, m->weights, options(96, 2, 1, r));
        CHECK(b.kv_shape().n_layer == (r.begin <= 3 && 3 < r.end ? 1 : 0));
        CHECK(b.kv_bytes() + b.recurrent_bytes() == planned(c, 96, 2, 1, r.begin, r.end));
    }
}

TEST_CASE("the recurrent state of many sequences of a large qwen35 counts against the memory", "[model]") {
    const ModelConfig c = synthetic_config("qwen35-0.8b");
    // Qwen3.5 0.8B: 6 of 24 layers attend (f16 KV: 12 KiB a position); 18 keep a state of 19.3 MiB a sequence.
    CHECK(c.n_layer_kv() == 6);
    CHECK(cpu::kv_cache_bytes(c, KvType::f16, 8192, 1) == size_t{6} * 2 * 8192 * 512 * 2);
    CHECK(cpu::recurrent_state_bytes(c, 1, 0) == size_t{18} * (6144 * 3 + 16 * 128 * 128) * 4);
    // A tiny context for more sequences than the memory holds states for: refused, though their KV cache fits.
    const auto n_slots = static_cast<int64_t>(2 * available_memory() / cpu::recurrent_state_bytes(c, 1, 0));
    REQUIRE(cpu::kv_cache_bytes(c, KvType::f16, 8, n_slots) < available_memory() / 4);
    CHECK_THROWS_WITH(check_context_fits(c, 8, KvType::f16, n_slots),
                      Catch::Contains("the KV cache and recurrent state for") && Catch::Contains("no context fits"));
    CHECK(sequence_bytes(c, KvType::f16, 8, 2, 2) ==
          cpu::kv_cache_bytes(c, KvType::f16, 8, 2) + 2 * 3 * cpu::recurrent_state_bytes(c, 1, 0));
}

}  // namespace test_sequence_memory
