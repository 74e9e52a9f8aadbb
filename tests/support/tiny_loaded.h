// A tiny random model with its tokenizer (tests/support/random_model.h's, with the tiny SPM vocabulary): the loader
// of the tests that run the scheduler on text, as speculative decoding's do.
#pragma once

#include "engine/model/model.h"
#include "tests/support/random_model.h"
#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <memory>

namespace quill::test {

struct Loaded {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
};

inline Loaded load_tiny(const TinySpec& spec) {
    Loaded l;
    l.model = make_tiny_model(spec);
    l.tok = Tokenizer::from_gguf(l.model->file);
    return l;
}

// A model of 2 layers with the tiny SPM vocabulary; seed picks its weights, type their format (ffn_down F16 when
// type is not F32).
inline TinySpec small_spec(uint64_t seed, GgmlType type = GgmlType::F32) {
    TinySpec s;
    s.vocab = "spm";
    s.n_layer = 2;
    s.type = type;
    s.ffn_down_type = type == GgmlType::F32 ? GgmlType::F32 : GgmlType::F16;
    s.seed = seed;
    return s;
}

}  // namespace quill::test
