// A loaded model: the mapped GGUF file (or the parts of a split one), its hyperparameters and the views of its weights.
#pragma once

#include "engine/format/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

#include <memory>
#include <string>

namespace quill {

struct Model {
    GgufFile file;
    ModelConfig config;
    Weights weights;

    // Maps and validates the file (every part of a split model: open_model_file), reads the config and views every
    // weight. Throws FileError.
    static std::unique_ptr<Model> load(const std::string& path);

    // Bytes of all weight tensors.
    size_t weight_bytes() const;
};

}  // namespace quill
