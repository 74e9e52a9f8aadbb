// The device plan: which of a model's layers run on which device (a backend instance each), from each device's free
// memory, the bytes of each layer's tensors, the KV cache the context and slots need, and the output matrix; or
// from the user's --devices and --gpu-layers. The split forward (SplitBackend) runs the plan's ranges in order.
#pragma once

#include "engine/model/model_config.h"
#include "engine/model/weights.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

// A device a range of layers can run on: "cpu" (host memory) or "cuda:N".
struct DeviceSpec {
    enum class Kind { cpu, cuda };
    Kind kind = Kind::cpu;
    int index = 0;  // cuda:N's N
    std::string name() const;
    bool operator==(const DeviceSpec&) const = default;
};

// A layer's tensors by what they are for, in bytes: attention (blk.N.attn_*), the dense FFN and everything else of the
// layer (norms, a MoE layer's router and shared expert), and the routed experts (blk.N.ffn_*_exps).
struct LayerBytes {
    size_t attention = 0;
    size_t ffn = 0;
    size_t experts = 0;
    size_t cache = 0;  // its own KV cache or recurrent state for the context and slots asked (beside kv_per_layer)
    size_t total() const { return attention + ffn + experts; }
};

// What a model puts in memory, by layer (the inputs of plan_devices).
struct ModelBytes {
    std::vector<LayerBytes> layers;  // [n_layer]
    size_t embedding = 0;            // token_embd: rows looked up, so it stays in host memory when the first range is
    size_t output = 0;               // output norm and output matrix (token_embd again when tied): on the last range
    size_t kv_per_layer = 0;         // K and V of one layer for the context and slots asked
    bool tied = false;               // no output matrix: the output reads token_embd (counted in `output`)
    int64_t n_layer() const { return static_cast<int64_t>(layers.size()); }
    // The weights of layers [begin, end) (with their routed experts or without) and their KV cache.
    size_t range_bytes(int64_t begin, int64_t end, bool experts = true) const;
    size_t expert_bytes(int64_t begin, int64_t end) const;  // the routed experts of layers [begin, end)
};

// A tensor as the plan counts it: its GGUF name (blk.N.attn_q.weight) and its bytes.
struct TensorBytes {
    std::string name;
    size_t bytes = 0;
};
// The file's tensors the forward reads, each once under its name: the matrices (phi3's fused ones and a mixture's
// 3-D expert tensors whole), the float vectors (layer_vectors, model_vectors) as the floats they are loaded as, the
// output matrix unless tied.
std::vector<TensorBytes> tensor_bytes(const ModelConfig& config, const Weights& weights);

// The bytes of each tensor (its name says the layer and the part), with kv_per_layer. A tensor named neither
// blk.N.* nor token_embd counts as output (output, output_norm, rope factors).
ModelBytes model_bytes(std::span<const TensorBytes> tensors, int64_t n_layer, size_t kv_per_layer);

// Memory a device has for a range: free bytes, less `reserve` for the backend's scratch and context.
struct DeviceMemory {
    DeviceSpec device;
    size_t free = 0;
    size_t reserve = 0;
    size_t usable() const { return free > reserve ? free - reserve : 0; }
};

// What the user asked: --devices (with the first layer of each device after the first, or none) and --gpu-layers.
struct PlanRequest {
    std::vector<DeviceSpec> devices;   // empty: the GPU (if any is given in `memory`) then the CPU
    std::vector<int64_t> first_layer;  // [devices.size()] first layer of each device (0 for the first); empty: planned
    std::optional<int64_t> gpu_layers;  // -ngl: the last N layers on the GPU, the rest on the CPU
};

// One range of consecutive layers on one device.
struct PlanRange {
    DeviceSpec device;
    int64_t begin = 0, end = 0;  // layers [begin, end)
    size_t bytes = 0;            // weights resident on the device (experts on the host left out) + its layers' KV
    bool output = false;         // the last range: output norm and logits
};

struct DevicePlan {
    std::vector<PlanRange> ranges;  // in layer order, covering [0, n_layer) without gaps
    // Layers [0, host_experts) of the GPU ranges keep their routed experts in host memory (a MoE model whose
    // attention and dense parts fit on the GPU but not all its experts), as llama.cpp's --n-cpu-moe.
    int64_t host_experts = 0;
    size_t host_expert_bytes = 0;
    int64_t n_layer = 0;
    std::string note;  // why the GPU got no layers, when it did not ("cuda:0 has 1.2 GiB free, a layer takes ...")
    bool split() const { return ranges.size() > 1; }
    // "model: 30 of 48 layers on cuda:0 (17.1 GiB), 18 on cpu; KV cache with its layers"
    std::string line() const;
};

// "cpu", "cuda", "cuda:N" (cuda is cuda:0); UsageError naming the text otherwise.
DeviceSpec parse_device_spec(std::string_view text);
// --devices: DEVICE[@FIRST_LAYER],... e.g. "cpu,cpu@12": layers 0-11 on the first, 12 on on the second. Either every
// device after the first names its first layer or none does. UsageError naming the flag otherwise.
PlanRequest parse_devices(std::string_view text);

// The plan: explicit first layers as given (UsageError when one is past the last layer or they do not increase);
// --gpu-layers as given; several devices without first layers split the bytes evenly (cpu,cpu) or by free memory;
// otherwise (one GPU in `memory` and the CPU) the whole model on the GPU when it fits, else every layer's attention
// and dense parts there and as few layers' experts as needed in host memory, else the last layers that fit on the
// GPU and the rest on the CPU. `memory` holds each non-CPU device named or available; the CPU's memory is not
// checked (the file is mapped).
DevicePlan plan_devices(const ModelBytes& model, const PlanRequest& request, std::span<const DeviceMemory> memory);

}  // namespace quill
