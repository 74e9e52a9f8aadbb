// The device plan's bytes: tensor_bytes names every tensor of a model's file once, with the file's bytes, for a
// synthetic model of every architecture the synthetic writer knows, so that a layer split counts all that each range
// holds (gpt-oss's sinks and router and expert biases, phi3's fused matrices and RoPE factors, gemma2's post-norms).
#include "engine/format/gguf.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/runtime/device_plan.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <set>

namespace test_device_plan_bytes {

using namespace quill;

namespace {

// The smallest shape of each architecture the synthetic writer knows (llama's is stories15m).
const char* const kShapes[] = {"stories15m",   "qwen3-tiny",   "qwen3moe-tiny", "gpt-oss-tiny", "phi3-tiny",
                               "gemma2-tiny", "smollm3-tiny", "mistral3-tiny", "gemma4-tiny",
                               "gemma4-moe-tiny", "gemma4-e-tiny", "glm4-tiny", "granite-tiny", "olmo2-tiny",
                               "exaone4-tiny", "ernie4_5-tiny", "seed_oss-tiny", "qwen35-tiny", "qwen35moe-tiny",
                               "qwen2moe-tiny", "granitehybrid-tiny", "lfm2-tiny", "qwen2vl-tiny", "qwen3vl-tiny",
                               "qwen3vlmoe-tiny", "glm4v-tiny", "exaone-tiny", "glm4moe-tiny", "lfm2moe-tiny",
                               "qwen3next-tiny", "gemma-tiny", "deepseek2-tiny",
                               "deepseek2-fused-tiny", "cohere2-tiny", "command-r-tiny", "nemotron_h-tiny",
                               "nemotron_h_moe-tiny", "llama4-tiny", "falcon-h1-tiny", "gemma3n-tiny",
                               "hunyuan-dense-tiny", "hunyuan-moe-tiny", "arcee-tiny", "apertus-tiny",
                               "bailingmoe2-tiny", "dots1-tiny", "afmoe-tiny", "exaone-moe-tiny",
                               "cohere2moe-tiny", "granite-swa-tiny", "granite-swa-moe-tiny", "step35-tiny",
                               "laguna-tiny", "laguna-m-tiny", "mamba2-tiny", "mamba-tiny"};

// Whether a tensor of the file belongs to a block at or after n_layer: glm4moe's multi-token-prediction blocks, which
// the loader skips and no device holds.
bool mtp_tensor(const std::string& name, int64_t n_layer) {
    long long block = -1;
    return std::sscanf(name.c_str(), "blk.%lld.", &block) == 1 && block >= n_layer;
}

// What tensor_bytes says of the model against the file's tensor table: "missing NAME", "twice NAME", "extra NAME",
// "NAME: N bytes, the file's M"; empty when every tensor is counted once with its bytes.
std::vector<std::string> mismatches(const std::vector<TensorBytes>& counted, const GgufFile& file, int64_t n_layer) {
    std::map<std::string, size_t> in_file;
    for (const GgufTensorInfo& t : file.tensors())
        if (!mtp_tensor(t.name, n_layer)) in_file[t.name] = t.n_bytes;
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (const TensorBytes& t : counted) {
        if (!seen.insert(t.name).second) out.push_back("twice " + t.name);
        const auto it = in_file.find(t.name);
        if (it == in_file.end())
            out.push_back("extra " + t.name);
        else if (it->second != t.bytes)
            out.push_back(fmt::format("{}: {} bytes, the file's {}", t.name, t.bytes, it->second));
    }
    for (const auto& [name, bytes] : in_file)
        if (!seen.contains(name)) out.push_back("missing " + name);
    return out;
}

}  // namespace

TEST_CASE("tensor_bytes counts each tensor of the file once with its bytes, for every synthetic architecture",
          "[device_plan]") {
    const auto dir = test::temp_dir("device_plan_bytes");
    std::set<std::string> archs, covered;
    for (const std::string& shape : synthetic_shape_names()) archs.insert(synthetic_config(shape).arch);
    for (const std::string shape : kShapes) {
        INFO(shape);
        const std::string path = (dir / (shape + ".gguf")).string();
        SyntheticModel::make(synthetic_config(shape), GgmlType::Q8_0, 7)->save(path);
        const auto model = Model::load(path);
        covered.insert(model->config.arch);
        const GgufFile file = GgufFile::open(path);
        const std::vector<TensorBytes> counted = tensor_bytes(model->config, model->weights);
        const int64_t n_layer = model->config.n_layer;
        CHECK(mismatches(counted, file, n_layer) == std::vector<std::string>{});
        size_t file_bytes = 0, counted_bytes = 0;
        for (const GgufTensorInfo& t : file.tensors()) file_bytes += mtp_tensor(t.name, n_layer) ? 0 : t.n_bytes;
        for (const TensorBytes& t : counted) counted_bytes += t.bytes;
        CHECK(counted_bytes == file_bytes);
        // The plan's parts (layers, embedding, output) add up to the file: model_bytes puts every tensor somewhere.
        const ModelBytes m = model_bytes(counted, model->config.n_layer, 0);
        CHECK(m.range_bytes(0, m.n_layer()) + m.output + (m.tied ? 0 : m.embedding) == file_bytes);
    }
    CHECK(covered == archs);  // a new architecture of the writer needs its shape in kShapes
}

TEST_CASE("tensor_bytes counts each tensor once for the loader's other architectures and optional tensors",
          "[device_plan]") {
    // What the synthetic writer does not make: gemma3's Q/K norms and post-norms, qwen2's biases, llama's output
    // bias, Llama 3's rope_freqs, a tied output.
    std::vector<test::TinySpec> specs(4);
    specs[0].arch = "gemma3", specs[0].sliding_window = 8;
    specs[1].arch = "qwen2", specs[1].biases = true;
    specs[2].biases = true, specs[2].rope_freqs = true;
    specs[3].tied_output = true;
    for (const test::TinySpec& spec : specs) {
        INFO(spec.arch);
        const auto model = test::make_tiny_model(spec);
        CHECK(mismatches(tensor_bytes(model->config, model->weights), model->file, model->config.n_layer) ==
              std::vector<std::string>{});
    }
}

}  // namespace test_device_plan_bytes
