// Models with random weights made in memory, in the shapes of well-known models, for `quill bench`; they can be
// saved as GGUF (with a small synthetic SPM vocabulary) so other programs can be timed on the same file.
#pragma once

#include "engine/format/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace quill {

// Shape presets: stories15m, llama-tiny-256, stories110m, tinyllama-1.1b, llama2-7b, llama3-8b; gemma2-tiny,
// gemma2-2b, phi3-tiny, phi-4-mini; qwen3moe-tiny, qwen3-30b-a3b (and qwen3-30b-a3b-8l, its first 8 layers);
// qwen35moe-tiny, qwen3.5-35b-a3b (-8l); qwen3next-tiny, qwen3-next-80b-a3b (-8l); qwen2moe-tiny,
// qwen1.5-moe-a2.7b; synthetic_shape_names() lists them all.
std::vector<std::string> synthetic_shape_names();
// The config of a preset; UsageError for an unknown name.
ModelConfig synthetic_config(const std::string& shape);

struct SyntheticModel {
    ModelConfig config;
    Weights weights;
    GgmlType type;
    std::vector<std::vector<uint8_t>> buffers;  // the tensor data the weights view
    // glm4moe's multi-token-prediction blocks (ModelConfig::n_layer_nextn), which a saved file holds and no forward
    // runs: each block's layer, its eh_proj matrix and its nextn norms by name
    std::vector<LayerWeights> mtp_layers;
    std::vector<TensorView> mtp_matrices;
    std::vector<std::pair<std::string, std::vector<float>>> mtp_vectors;

    // Random weights of the given type for every matrix (norms F32). The embedding has the same type.
    static std::unique_ptr<SyntheticModel> make(const ModelConfig& config, GgmlType type, uint64_t seed);
    size_t weight_bytes() const;
    // A GGUF a llama.cpp-compatible program can load.
    void save(const std::string& path) const;
};

}  // namespace quill
