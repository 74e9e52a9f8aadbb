// Which GGUF of a repository the user means: files grouped into models (the parts of a split GGUF together),
// named by the quantization in their file names, and one chosen by a requested quantization or, by default,
// Q4_K_M or the quantization closest to it.
#pragma once

#include "engine/hub/api.h"

#include <string>
#include <string_view>
#include <vector>

namespace quill::hub {

// The quantization in a GGUF file name, uppercase ("Q4_K_M" for "Qwen2.5-0.5B-Instruct-q4_k_m.gguf" or
// "Q4_K_M/model-Q4_K_M-00001-of-00002.gguf"); "" when the name has none.
std::string quant_of(std::string_view file_name);

// One model: a single GGUF file or the parts of a split one, in order.
struct GgufModel {
    std::string quant;               // quant_of its first file
    std::vector<std::string> files;  // repository paths
    uint64_t bytes = 0;              // of every file together
    bool complete = true;            // false when a part of a split model is missing
};

// The models among a repository's files; multimodal projector files (mmproj) are left out.
std::vector<GgufModel> gguf_models(const std::vector<RepoFile>& files);

// The model `quant` names (a quantization, or a .gguf file name or path); "" picks the only model, else Q4_K_M,
// else the quantization nearest to it in bits per weight (the larger on a tie). UsageError listing the choices when no model or
// several match, naming `repo`.
GgufModel choose_model(const std::vector<GgufModel>& models, const std::string& quant, const std::string& repo);

// "1.2 GB", "350 MB": a size for people (decimal units, as the hub shows them).
std::string human_size(uint64_t bytes);

}  // namespace quill::hub
