// Tiny llama-architecture models with random weights, written with the GGUF writer, for backend tests.
#pragma once

#include "engine/format/gguf.h"
#include "engine/model/model.h"

#include <memory>
#include <string>
#include <vector>

namespace quill::test {

struct TinySpec {
    int64_t n_embd = 64, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 96, n_vocab = 300;
    GgmlType type = GgmlType::F32;           // every matrix
    GgmlType ffn_down_type = GgmlType::F32;  // ffn_down's rows have n_ff elements, which may not fit the block size
    bool tied_output = false;                // no output.weight: the embedding is reused
    bool rope_freqs = false;                 // a Llama-3 style rope_freqs.weight tensor
    float rope_freqs_value = 0.0f;           // its every entry (0: random in [1, 8])
    float rope_linear_factor = 0.0f;         // llama.rope.scaling.type "linear" with this factor (0: none)
    std::string arch = "llama";              // "qwen2": NEOX RoPE (and Q/K/V biases when `biases`)
    bool biases = false;                     // attention biases: Q, K, V, and (llama) the output's
    uint64_t seed = 1;
};

// The GGUF image of a random model.
std::vector<uint8_t> make_tiny_gguf(const TinySpec& spec);
// The same, loaded through the real loader (parse, config, weights).
std::unique_ptr<Model> make_tiny_model(const TinySpec& spec);

}  // namespace quill::test
