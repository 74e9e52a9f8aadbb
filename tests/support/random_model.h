// Tiny llama/qwen2/gemma3-architecture models with random weights, written with the GGUF writer, for backend tests;
// with a vocabulary (tests/support/tiny_vocab.h) and a chat template, as files the CLI tests run in place of a real
// model.
#pragma once

#include "engine/format/gguf.h"
#include "engine/model/model.h"

#include <filesystem>
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
    int64_t n_ctx_train = 256;               // context_length
    // "spm", "spm-chatml" (with chatml's markers) or "bpe-chatml": tests/support/tiny_vocab.h's vocabulary, whose size
    // replaces n_vocab; its byte, control and unknown tokens get zero output rows, so generated text is made of its
    // characters and words and never ends by itself. "": no vocabulary.
    std::string vocab;
    std::vector<std::string> control_tokens;  // appended to the vocabulary as control tokens (<tool_call>, [ARGS], ...)
    std::string chat_template;               // tokenizer.chat_template ("": none written)
    uint64_t seed = 1;
};

// The GGUF image of a random model.
std::vector<uint8_t> make_tiny_gguf(const TinySpec& spec);
// The same, loaded through the real loader (parse, config, weights).
std::unique_ptr<Model> make_tiny_model(const TinySpec& spec);

// Tiny models with a vocabulary for the tests that need "a small model" file (the CLI, generation, scheduling,
// chat): the shape of stories260K (5 layers, n_embd 64, 8 heads, 4 KV heads, n_ff 192, context 2048), random
// weights from seed 1.
enum class TinyModel {
    spm,       // F32 weights, SPM vocabulary with byte fallback, no chat template (nor chatml's tokens)
    spm_q8_0,  // the same weights in Q8_0, but ffn_down in F16 and the norms F32
    spm_chat,  // F32, the SPM vocabulary with chatml's markers, and kTinyChatTemplate
    bpe_chat,  // F32, the byte-level BPE vocabulary (chatml's markers included) and kTinyChatTemplate
};
// The spec of such a model.
TinySpec tiny_model_spec(TinyModel which);
// Its file, written on first use into a directory of this test process that is removed when the process ends.
const std::filesystem::path& tiny_model_file(TinyModel which);

}  // namespace quill::test
