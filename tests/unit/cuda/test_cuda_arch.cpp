// The CUDA backend on qwen3 (Q/K norms, NEOX RoPE: kernels it has for gemma3) against the reference backend and
// llama.cpp's greedy tokens, and qwen2vl and qwen3vl (M-RoPE: pairs that keep still for text) against the reference
// backend. smollm3, mistral3, qwen3 with YaRN, gemma2 and phi3: test_cuda_arch_features.cpp.
#ifdef QUILL_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/device.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/backend_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <utility>
#include <vector>

namespace test_cuda_arch {

using namespace quill;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<Model> saved_synthetic(const std::string& shape, GgmlType type, const fs::path& dir) {
    const fs::path path = dir / (shape + ".gguf");
    SyntheticModel::make(synthetic_config(shape), type, 42)->save(path.string());
    return Model::load(path.string());
}

// Greedy decode of `prompt` on the CUDA backend (F32 GEMMs, KV f32) and on the reference backend of m: both
// steps' logits.
std::pair<std::vector<float>, std::vector<float>> cuda_and_reference(const Model& m, const std::vector<int32_t>& prompt,
                                                                     int n, std::vector<int32_t>* cuda_tokens) {
    cuda::CudaBackendOptions o;
    o.n_ctx = 64;
    o.kv_type = KvType::f32;
    o.tuning.gemm = cuda::GemmMode::f32;
    cuda::CudaBackend g(m.config, m.weights, o);
    ReferenceBackend r(m.config, m.weights, ReferenceBackendOptions{64, 1, KvType::f32});
    std::vector<float> got, want;
    const std::vector<int32_t> tokens = test::greedy_tokens(g, prompt, n, &got);
    if (cuda_tokens) *cuda_tokens = tokens;
    test::greedy_tokens(r, prompt, n, &want);
    return {got, want};
}

}  // namespace

TEST_CASE("qwen3 on the CUDA backend matches the reference backend and llama.cpp's greedy tokens", "[cuda]") {
    if (cuda::probe().count == 0) {
        test::skip_no_device("no CUDA device here");
        return;
    }
    const fs::path dir = test::temp_dir("cuda-arch-qwen3");
    auto m = saved_synthetic("qwen3-tiny", GgmlType::F32, dir);
    const std::vector<int32_t> prompt{1,  300, 17,  412, 99, 260, 450, 33, 501, 7,   288, 123,
                                      64, 399, 270, 5,   311, 480, 42, 256, 190, 77,  333, 2};
    std::vector<int32_t> greedy;
    const auto [got, want] = cuda_and_reference(*m, prompt, 24, &greedy);
    // Float arithmetic against double over the same F32 weights and cache: 1e-4 of the logits' rms, as test_cuda.cpp
    CHECK(test::max_diff(got, want) / test::rms(want) < 1e-4);
    // llama.cpp's tokens (tests/data/arch/qwen3-tiny-f32.greedy.txt); its first near-tie comes after these
    const std::vector<int32_t> oracle{177, 456, 456, 456, 456, 456, 456, 456, 456, 456, 456, 456,
                                      456, 456, 456, 177, 23,  456, 456, 179, 230, 230, 230, 230};
    CHECK(std::vector<int32_t>(greedy.begin(), greedy.begin() + 12) ==
          std::vector<int32_t>(oracle.begin(), oracle.begin() + 12));
}

TEST_CASE("qwen2vl and qwen3vl on the CUDA backend match the reference backend", "[cuda]") {
    if (cuda::probe().count == 0) {
        test::skip_no_device("no CUDA device here");
        return;
    }
    for (const char* shape : {"qwen2vl-tiny", "qwen3vl-tiny"}) {
        INFO(shape);
        const fs::path dir = test::temp_dir(std::string("cuda-arch-") + shape);
        auto m = saved_synthetic(shape, GgmlType::F32, dir);
        const std::vector<int32_t> prompt{1, 300, 17, 299, 99, 260, 45, 33, 301, 7, 288, 123, 64, 199, 270, 5};
        const auto [got, want] = cuda_and_reference(*m, prompt, 16, nullptr);
        CHECK(test::max_diff(got, want) / test::rms(want) < 1e-4);
    }
}
#endif

}  // namespace test_cuda_arch
