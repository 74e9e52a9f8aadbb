// The float vectors of the weights (norms, biases, gpt-oss's attention sinks and router and expert biases, RoPE
// divisors) by the names of their GGUF tensors: the one list of them that the loader reads, the synthetic writer
// writes, the device plan counts and the CUDA backend plans and uploads (the matrices' is layer_matrices.h).
#pragma once

#include "engine/model/model_config.h"
#include "engine/model/weights.h"

#include <cstdint>
#include <string>
#include <vector>

namespace quill {

// A float vector an architecture's weights may have: its tensor's name (after "blk.N." for a layer's), the member of
// Owner (LayerWeights or Weights) that holds it, its shape, and whether the file must have it.
template <class Owner>
struct VectorField {
    const char* name;
    std::vector<float> Owner::*member;
    int64_t n = 0;         // floats in a row: the tensor's ne[0]
    int64_t rows = 1;      // the tensor's ne[1] (the experts' biases: a row an expert); 1: a 1-D tensor
    bool required = true;  // false: the file may lack it, and then the member stays empty
};

// Layer `layer`'s vectors in the architecture, in file order: attn_norm, the attention's biases, sinks and norms, the
// FFN's input norm, the router's and experts' biases, the FFN's output norm, gemma4's output scale.
std::vector<VectorField<LayerWeights>> layer_vector_fields(const ModelConfig& config, int64_t layer);
// The model's own: output_norm and the architecture's RoPE divisors (llama's, mistral3's, gemma4's, granite's and
// exaone4's rope_freqs, phi3's long and short factors).
std::vector<VectorField<Weights>> model_vector_fields(const ModelConfig& config);

// A vector the weights hold, with its tensor's name and shape.
struct NamedVector {
    std::string name;                  // "blk.3.attn_norm.weight"
    const std::vector<float>* values;  // [rows, n]
    int64_t n = 0, rows = 1;
};

// The vectors layer `layer` holds in L: its fields that are not empty, in file order (QUILL_CHECK: each of its
// shape).
std::vector<NamedVector> layer_vectors(const ModelConfig& config, const LayerWeights& L, int64_t layer);
// The model's own vectors that w holds.
std::vector<NamedVector> model_vectors(const ModelConfig& config, const Weights& w);

}  // namespace quill
