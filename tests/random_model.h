// Tiny llama/qwen2/gemma3-architecture models with random weights, written with the GGUF writer, for backend tests.
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
    float rope_base = 10000.0f;              // rope.freq_base (gemma3: of the global layers only)
    // "qwen2": NEOX RoPE (and Q/K/V biases when `biases`); "gemma3": its norms, GELU, scaled embeddings, local
    // layers with their own RoPE base (needs sliding_window > 0)
    std::string arch = "llama";
    bool biases = false;                     // attention biases: Q, K, V, and (llama) the output's
    int64_t head_dim = 0;                    // attention.key_length (0: n_embd / n_head, and no key written)
    int64_t sliding_window = 0;              // attention.sliding_window (0: none written)
    float final_logit_softcap = 0.0f;        // final_logit_softcapping (0: none written)
    uint64_t seed = 1;
};

// The GGUF image of a random model.
std::vector<uint8_t> make_tiny_gguf(const TinySpec& spec);
// The same, loaded through the real loader (parse, config, weights).
std::unique_ptr<Model> make_tiny_model(const TinySpec& spec);

}  // namespace quill::test
