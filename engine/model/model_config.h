// Hyperparameters of a model, read from GGUF metadata and validated.
#pragma once

#include "engine/format/gguf.h"

#include <cstdint>
#include <string>

namespace quill {

struct ModelConfig {
    std::string arch;  // general.architecture
    std::string name;  // general.name, or the file stem when absent
    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;  // < n_head for grouped-query attention
    int64_t head_dim = 0;   // attention.key_length, else n_embd / n_head
    int64_t n_ff = 0;
    int64_t n_ctx_train = 0;  // context length the model was trained for
    int64_t n_rot = 0;        // rope.dimension_count, else head_dim
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    float rope_freq_scale = 1.0f;  // linear RoPE scaling: positions are multiplied by this
    // Which dimensions RoPE rotates together: adjacent pairs (x[2i], x[2i+1]) for llama GGUFs (the converter
    // permutes Q and K for it), the two halves (x[i], x[i + n_rot/2]) for qwen2 ("NEOX" style).
    enum class Rope { adjacent, neox };
    Rope rope = Rope::adjacent;

    // Reads and validates the hyperparameters of a supported architecture. Throws FileError naming the file and
    // the key that is missing or out of range.
    static ModelConfig from_gguf(const GgufFile& file);

    int64_t n_embd_kv() const { return n_head_kv * head_dim; }  // K (and V) width per token
    int64_t n_embd_q() const { return n_head * head_dim; }
};

// Whether quill can run this general.architecture (llama, qwen2).
bool architecture_supported(const std::string& arch);
// "llama, qwen2": for messages.
std::string supported_architectures();

}  // namespace quill
