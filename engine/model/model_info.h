// `quill info`: a description of a GGUF file (architecture, hyperparameters, tokenizer, chat template, tensors),
// as JSON and as text rendered from that JSON.
#pragma once

#include "engine/format/gguf.h"

#include <nlohmann/json.hpp>
#include <string>

namespace quill {

// Describes the file. For a supported architecture with tensors it also validates the model (config and every
// weight's shape and type), throwing FileError on a defect. with_tensors adds the tensor table.
nlohmann::json describe_model(const GgufFile& file, bool with_tensors);
std::string render_model_info(const nlohmann::json& info);

}  // namespace quill
