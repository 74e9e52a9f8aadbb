// The loader refuses what llama.cpp's loader refuses, for each architecture quill supports: a file without
// <arch>.attention.layer_norm_rms_epsilon (every one of them requires it), and a RoPE divisor tensor (rope_freqs,
// rope_factors_long, rope_factors_short) of an architecture whose llama.cpp loader does not load it (llama.cpp then
// stops at a tensor count that does not match). Files are quill's tiny ones (engine/model/synthetic.h, and
// tests/support/random_model.h for llama, qwen2 and gemma3) with the key dropped or the tensor added.
#include "engine/error.h"
#include "engine/format/gguf.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace test_loader_strictness {

using namespace quill;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kArchitectures = {"llama",  "qwen2",   "qwen3",    "qwen3moe", "gemma2",
                                                 "gemma3", "phi3",    "smollm3",  "mistral3", "gpt-oss"};

std::vector<uint8_t> read_bytes(const fs::path& path) {
    const std::string s = test::read_file(path);
    return {s.begin(), s.end()};
}

// The GGUF image of a tiny F32 model of the architecture.
std::vector<uint8_t> tiny_image(const std::string& arch, const fs::path& dir) {
    if (arch == "llama" || arch == "qwen2" || arch == "gemma3") {
        test::TinySpec s;
        s.arch = arch;
        if (arch == "gemma3") s.sliding_window = 8;
        return test::make_tiny_gguf(s);
    }
    const fs::path file = dir / (arch + "-tiny.gguf");
    SyntheticModel::make(synthetic_config(arch + "-tiny"), GgmlType::F32, 42)->save(file.string());
    return read_bytes(file);
}

// A copy of the image without the metadata key `drop` ("" keeps them all) and with an F32 tensor `add` of n ones
// ("" adds none).
std::vector<uint8_t> edited(const std::vector<uint8_t>& image, const std::string& drop, const std::string& add = "",
                            int64_t n = 0) {
    const GgufFile f = GgufFile::parse("tiny.gguf", image);
    GgufWriter w(f.version());
    for (const auto& [key, value] : f.metadata())
        if (key != drop) w.set(key, value);
    for (const GgufTensorInfo& t : f.tensors())
        w.add_tensor(t.name, t.type, t.ne, {f.tensor_data(t), f.tensor_data(t) + t.n_bytes});
    if (!add.empty()) {
        std::vector<uint8_t> ones(static_cast<size_t>(n) * sizeof(float));
        const float one = 1.0f;
        for (size_t i = 0; i < ones.size(); i += sizeof(float)) std::memcpy(ones.data() + i, &one, sizeof(float));
        w.add_tensor(add, GgmlType::F32, {n}, std::move(ones));
    }
    return w.to_bytes();
}

// The config and weights quill loads from the image; FileError when it refuses it.
Weights load(const std::vector<uint8_t>& image) {
    const GgufFile f = GgufFile::parse("tiny.gguf", image);
    return Weights::from_gguf(f, ModelConfig::from_gguf(f));
}

int64_t n_rot(const std::vector<uint8_t>& image) {
    return ModelConfig::from_gguf(GgufFile::parse("tiny.gguf", image)).n_rot;
}

void write(const fs::path& path, const std::vector<uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("a file without attention.layer_norm_rms_epsilon is refused, as llama.cpp refuses it",
          "[model][loader]") {
    const fs::path dir = test::temp_dir("strict_rms_eps");
    for (const std::string& arch : kArchitectures) {
        INFO(arch);
        const std::string key = arch + ".attention.layer_norm_rms_epsilon";
        const std::vector<uint8_t> image = tiny_image(arch, dir);
        // (the writers of quill's tiny files write the key)
        CHECK_NOTHROW(load(image));
        CHECK_THROWS_WITH(load(edited(image, key)), "tiny.gguf: missing metadata '" + key + "'");
    }
    // quill run says so in one line.
    const fs::path file = dir / "gemma2-no-eps.gguf";
    write(file, edited(tiny_image("gemma2", dir), "gemma2.attention.layer_norm_rms_epsilon"));
    const test::CommandResult r = test::run_quill({"run", "-m", file.string(), "-p", "hi", "-n", "2"});
    CHECK(r.status == 1);
    CHECK(r.err == "quill: error: " + file.string() + ": missing metadata 'gemma2.attention.layer_norm_rms_epsilon'\n");
    fs::remove_all(dir);
}

TEST_CASE("RoPE divisor tensors load only in the architectures whose llama.cpp loader loads them",
          "[model][loader]") {
    const fs::path dir = test::temp_dir("strict_rope_tensors");
    const std::vector<std::string> tensors = {"rope_freqs.weight", "rope_factors_long.weight",
                                              "rope_factors_short.weight"};
    for (const std::string& arch : kArchitectures) {
        const std::vector<uint8_t> image = tiny_image(arch, dir);
        const int64_t n = n_rot(image) / 2;
        for (const std::string& tensor : tensors) {
            INFO(arch << ", " << tensor);
            // llama.cpp: llama and mistral3 load rope_freqs (the long and short factors only with longrope scaling,
            // which quill refuses), phi3 the long and short factors (its tiny file has them), the others none.
            const bool loads = ((arch == "llama" || arch == "mistral3") && tensor == "rope_freqs.weight") ||
                               (arch == "phi3" && tensor != "rope_freqs.weight");
            if (arch == "phi3" && loads) {
                CHECK(load(image).rope_factors_long.size() == static_cast<size_t>(n));
                continue;
            }
            const std::vector<uint8_t> with = edited(image, "", tensor, n);
            if (loads) {
                CHECK(load(with).rope_freqs == std::vector<float>(static_cast<size_t>(n), 1.0f));
            } else {
                CHECK_THROWS_WITH(load(with), "tiny.gguf: tensor '" + tensor + "' is not used by quill's " + arch +
                                                  " architecture (is this a variant quill does not support?)");
            }
        }
    }
    const fs::path file = dir / "qwen3-rope-freqs.gguf";
    const std::vector<uint8_t> qwen3 = tiny_image("qwen3", dir);
    write(file, edited(qwen3, "", "rope_freqs.weight", n_rot(qwen3) / 2));
    const test::CommandResult r = test::run_quill({"run", "-m", file.string(), "-p", "hi", "-n", "2"});
    CHECK(r.status == 1);
    CHECK(r.err == "quill: error: " + file.string() +
                       ": tensor 'rope_freqs.weight' is not used by quill's qwen3 architecture (is this a variant "
                       "quill does not support?)\n");
    fs::remove_all(dir);
}

}  // namespace test_loader_strictness
