// The device plan's arithmetic (engine/runtime/device_plan.h) against made-up device sizes and model shapes: tensor
// lists shaped as real GGUF files (names and byte sizes), GPUs of a given free memory.
#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/runtime/device_plan.h"

namespace test_device_plan {

using namespace quill;

namespace {

constexpr size_t kGiB = size_t{1} << 30;

// Bytes of an n-element tensor of a block type: Q4_K 144 bytes per 256, Q6_K 210 per 256.
size_t q4k(double n) { return static_cast<size_t>(n / 256 * 144); }
size_t q6k(double n) { return static_cast<size_t>(n / 256 * 210); }

void add(std::vector<TensorBytes>& t, std::string name, size_t bytes) { t.push_back({std::move(name), bytes}); }

// A Qwen3-30B-A3B-shaped file: 48 layers, n_embd 2048, 32 query heads and 4 KV heads of 128, 128 experts of 768,
// vocabulary 151936, Q4_K with Q6_K expert down matrices in every other layer and a Q6_K output: about 18 GB.
std::vector<TensorBytes> moe_30b_a3b() {
    std::vector<TensorBytes> t;
    const double d = 2048, q = 4096, kv = 512, ff = 768, e = 128, vocab = 151936;
    add(t, "token_embd.weight", q4k(vocab * d));
    add(t, "output_norm.weight", 4 * 2048);
    add(t, "output.weight", q6k(vocab * d));
    for (int l = 0; l < 48; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        add(t, b + "attn_norm.weight", 4 * 2048);
        add(t, b + "attn_q.weight", q4k(d * q));
        add(t, b + "attn_k.weight", q4k(d * kv));
        add(t, b + "attn_v.weight", q4k(d * kv));
        add(t, b + "attn_output.weight", q4k(q * d));
        add(t, b + "attn_q_norm.weight", 4 * 128);
        add(t, b + "attn_k_norm.weight", 4 * 128);
        add(t, b + "ffn_norm.weight", 4 * 2048);
        add(t, b + "ffn_gate_inp.weight", 4 * 2048 * 128);
        add(t, b + "ffn_gate_exps.weight", q4k(e * d * ff));
        add(t, b + "ffn_up_exps.weight", q4k(e * d * ff));
        add(t, b + "ffn_down_exps.weight", l % 2 ? q6k(e * ff * d) : q4k(e * ff * d));
    }
    return t;
}

// A 32B-dense-shaped file: 64 layers, n_embd 5120, 64 query heads and 8 KV heads of 128, n_ff 25600, Q4_K, with
// the output tied to the embedding: about 18 GB.
std::vector<TensorBytes> dense_32b() {
    std::vector<TensorBytes> t;
    const double d = 5120, q = 8192, kv = 1024, ff = 25600, vocab = 152064;
    add(t, "token_embd.weight", q4k(vocab * d));
    add(t, "output_norm.weight", 4 * 5120);
    for (int l = 0; l < 64; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        add(t, b + "attn_q.weight", q4k(d * q));
        add(t, b + "attn_k.weight", q4k(d * kv));
        add(t, b + "attn_v.weight", q4k(d * kv));
        add(t, b + "attn_output.weight", q4k(q * d));
        add(t, b + "ffn_gate.weight", q4k(d * ff));
        add(t, b + "ffn_up.weight", q4k(d * ff));
        add(t, b + "ffn_down.weight", q4k(ff * d));
    }
    return t;
}

// K and V of one layer: 2 x positions x slots x n_head_kv x head_dim x 2 bytes (f16).
size_t kv_layer(int64_t n_ctx, int64_t n_head_kv) { return 2 * static_cast<size_t>(n_ctx * n_head_kv * 128) * 2; }

DeviceMemory gpu(double free_gib) {
    return {{DeviceSpec::Kind::cuda, 0}, static_cast<size_t>(free_gib * kGiB), kGiB / 2};
}

}  // namespace

TEST_CASE("model_bytes sorts a MoE file's tensors into attention and dense and expert bytes per layer", "[plan]") {
    const auto tensors = moe_30b_a3b();
    const ModelBytes m = model_bytes(tensors, 48, kv_layer(4096, 4));
    REQUIRE(m.n_layer() == 48);
    CHECK_FALSE(m.tied);
    CHECK(m.embedding == q4k(151936.0 * 2048));
    CHECK(m.output == q6k(151936.0 * 2048) + 4 * 2048);
    CHECK(m.layers[0].attention == q4k(2048.0 * 4096) * 2 + q4k(2048.0 * 512) * 2 + 4 * 2048 + 2 * 4 * 128);
    CHECK(m.layers[0].ffn == 4 * 2048 + 4 * 2048 * 128);  // the norm and the router
    CHECK(m.layers[1].experts == 2 * q4k(128.0 * 2048 * 768) + q6k(128.0 * 768 * 2048));
    size_t total = m.embedding + m.output;
    for (const LayerBytes& b : m.layers) total += b.total();
    CHECK(total > 17 * kGiB);  // the shape of an ~18 GB file
    CHECK(total < 19 * kGiB);

    const auto dense = dense_32b();
    const ModelBytes t = model_bytes(dense, 64, 0);
    CHECK(t.tied);
    CHECK(t.output == t.embedding + 4 * 5120);  // the output reads token_embd
    CHECK(t.layers[63].experts == 0);
}

TEST_CASE("a model that fits goes whole on the GPU with its KV cache and output", "[plan]") {
    const auto tensors = moe_30b_a3b();
    const ModelBytes m = model_bytes(tensors, 48, kv_layer(4096, 4));
    const DeviceMemory mem[] = {gpu(23.5)};  // a 24 GB card
    const DevicePlan p = plan_devices(m, {}, mem);
    REQUIRE(p.ranges.size() == 1);
    CHECK(p.ranges[0].device.name() == "cuda:0");
    CHECK(p.ranges[0].begin == 0);
    CHECK(p.ranges[0].end == 48);
    CHECK(p.host_experts == 0);
    CHECK(p.ranges[0].bytes == m.range_bytes(0, 48) + m.output + m.embedding);
    CHECK(p.line().starts_with("model: 48 of 48 layers on cuda:0 (17."));
    CHECK(p.line().ends_with("; KV cache on cuda:0"));
}

TEST_CASE("a MoE model too large for the GPU keeps every layer's attention there and the fewest experts in host "
          "memory", "[plan]") {
    const auto tensors = moe_30b_a3b();
    const ModelBytes m = model_bytes(tensors, 48, kv_layer(32768, 4));  // a 32k context: 3 GiB of KV cache
    const DeviceMemory mem[] = {gpu(15.5)};  // a 16 GB card
    const DevicePlan p = plan_devices(m, {}, mem);
    REQUIRE(p.ranges.size() == 1);
    CHECK(p.ranges[0].device.name() == "cuda:0");
    const int64_t j = p.host_experts;
    REQUIRE(j > 0);
    const size_t dense = m.range_bytes(0, 48, false) + m.output + m.embedding;
    // the fewest layers' experts off the GPU: j fit, j - 1 would not
    CHECK(dense + m.expert_bytes(j, 48) <= mem[0].usable());
    CHECK(dense + m.expert_bytes(j - 1, 48) > mem[0].usable());
    CHECK(j >= 10);  // 15 GiB usable, 1 of attention, output and embedding, 3 of KV: room for ~30 layers' experts
    CHECK(j <= 20);
    CHECK(p.host_expert_bytes == m.expert_bytes(0, j));
    CHECK(p.line().find(fmt::format("; experts of layers 0-{} in host memory", j - 1)) != std::string::npos);
}

TEST_CASE("a dense model too large for the GPU puts the last layers that fit there with the output", "[plan]") {
    const auto tensors = dense_32b();
    const ModelBytes m = model_bytes(tensors, 64, kv_layer(4096, 8));
    const DeviceMemory mem[] = {gpu(15.5)};
    const DevicePlan p = plan_devices(m, {}, mem);
    REQUIRE(p.ranges.size() == 2);
    const PlanRange& cpu = p.ranges[0];
    const PlanRange& gpu_range = p.ranges[1];
    CHECK(cpu.device.name() == "cpu");
    CHECK(gpu_range.device.name() == "cuda:0");
    CHECK(gpu_range.output);
    const int64_t k = 64 - gpu_range.begin;
    CHECK(cpu.end == gpu_range.begin);
    CHECK(m.range_bytes(64 - k, 64) + m.output <= mem[0].usable());
    CHECK(m.range_bytes(64 - k - 1, 64) + m.output > mem[0].usable());
    CHECK(k >= 50);  // ~274 MB a layer, 15 GiB usable
    CHECK(k <= 60);
    CHECK(p.line().starts_with(fmt::format("model: {} of 64 layers on cuda:0 (layers {}-63, ", k, 64 - k)));
    CHECK(p.line().find(fmt::format(", {} on cpu (layers 0-{}, ", 64 - k, 63 - k)) != std::string::npos);
}

TEST_CASE("a GPU too small for any layer gets nothing and the plan says why", "[plan]") {
    const auto tensors = moe_30b_a3b();
    const ModelBytes m = model_bytes(tensors, 48, kv_layer(4096, 4));
    const DeviceMemory mem[] = {gpu(1.0)};
    const DevicePlan p = plan_devices(m, {}, mem);
    REQUIRE(p.ranges.size() == 1);
    CHECK(p.ranges[0].device.name() == "cpu");
    CHECK(p.line().find("cuda:0 has 512 MiB free, less than its last layer and the output") != std::string::npos);
    // without a GPU the whole model is on the CPU
    CHECK(plan_devices(m, {}, {}).ranges[0].device.name() == "cpu");
}

TEST_CASE("the plan with --gpu-layers puts the last N layers on the GPU whatever it would choose", "[plan]") {
    const auto tensors = moe_30b_a3b();
    const ModelBytes m = model_bytes(tensors, 48, kv_layer(4096, 4));
    const DeviceMemory mem[] = {gpu(23.5)};
    PlanRequest r;
    r.gpu_layers = 30;
    const DevicePlan p = plan_devices(m, r, mem);
    REQUIRE(p.ranges.size() == 2);
    CHECK(p.ranges[0].device.name() == "cpu");
    CHECK(p.ranges[0].end == 18);
    CHECK(p.ranges[1].begin == 18);
    CHECK(p.line().starts_with("model: 30 of 48 layers on cuda:0 (layers 18-47, "));
    CHECK(p.line().find(", 18 on cpu (layers 0-17, ") != std::string::npos);
    r.gpu_layers = 99;
    CHECK(plan_devices(m, r, mem).ranges.size() == 1);
    r.gpu_layers = 0;
    CHECK(plan_devices(m, r, mem).ranges[0].device.name() == "cpu");
    r.gpu_layers = 4;
    CHECK_THROWS_WITH(plan_devices(m, r, {}), "--gpu-layers 4: there is no GPU to put layers on");
}

TEST_CASE("the plan for two CPU backends splits the bytes evenly and takes explicit first layers as given", "[plan]") {
    const auto tensors = moe_30b_a3b();
    const ModelBytes m = model_bytes(tensors, 48, kv_layer(4096, 4));
    const DevicePlan p = plan_devices(m, parse_devices("cpu,cpu"), {});
    REQUIRE(p.ranges.size() == 2);
    const size_t a = p.ranges[0].bytes, b = p.ranges[1].bytes;
    const size_t gap = a > b ? a - b : b - a;
    CHECK(gap <= 2 * m.range_bytes(0, 1) + m.output);  // within a layer of even, the output on the second
    CHECK(p.ranges[1].output);
    CHECK_FALSE(p.ranges[0].output);

    const DevicePlan q = plan_devices(m, parse_devices("cpu,cpu@12,cpu@40"), {});
    REQUIRE(q.ranges.size() == 3);
    CHECK(q.ranges[0].end == 12);
    CHECK(q.ranges[1].begin == 12);
    CHECK(q.ranges[1].end == 40);
    CHECK(q.ranges[2].end == 48);
    CHECK(q.line().starts_with("model: 12 of 48 layers on cpu (layers 0-11, "));
    CHECK(q.line().ends_with("; KV cache with each range's layers"));
}

TEST_CASE("bad --devices give one clear error", "[plan]") {
    const auto tensors = moe_30b_a3b();
    const ModelBytes m = model_bytes(tensors, 48, 0);
    CHECK_THROWS_WITH(parse_devices("gpu9"), "--devices: 'gpu9' is not a device (expected cpu, cuda or cuda:N)");
    CHECK_THROWS_WITH(parse_devices("cpu,cuda:x"), "--devices: 'cuda:x' is not a device (expected cpu, cuda or cuda:N)");
    CHECK_THROWS_WITH(parse_devices("cpu,cpu@"), "--devices: 'cpu@': expected DEVICE@FIRST_LAYER with a layer number");
    CHECK_THROWS_WITH(parse_devices("cpu@3,cpu"), "--devices: 'cpu@3': the first device starts at layer 0");
    CHECK_THROWS_WITH(parse_devices("cpu,cpu@4,cpu"), Catch::Contains("of every device after the first, or of none"));
    CHECK_THROWS_WITH(parse_devices(""), Catch::Contains("'' is not a device"));
    CHECK_THROWS_WITH(plan_devices(m, parse_devices("cpu,cpu@48"), {}),
                      "--devices: layer 48 is past the model's last layer (47; it has 48 layers)");
    CHECK_THROWS_WITH(plan_devices(m, parse_devices("cpu,cpu@20,cpu@20"), {}),
                      Catch::Contains("first layers must increase"));
    CHECK(parse_devices("cuda:1,cpu").devices[0] == DeviceSpec{DeviceSpec::Kind::cuda, 1});
}

}  // namespace test_device_plan
