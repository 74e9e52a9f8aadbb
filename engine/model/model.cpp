#include "engine/model/model.h"

#include "engine/format/gguf_split.h"

namespace quill {

std::unique_ptr<Model> Model::load(const std::string& path) {
    GgufFile file = open_model_file(path);
    ModelConfig config = ModelConfig::from_gguf(file);
    Weights weights = Weights::from_gguf(file, config);
    return std::unique_ptr<Model>(new Model{std::move(file), std::move(config), std::move(weights)});
}

size_t Model::weight_bytes() const {
    size_t n = 0;
    for (const auto& t : file.tensors()) n += t.n_bytes;
    return n;
}

}  // namespace quill
