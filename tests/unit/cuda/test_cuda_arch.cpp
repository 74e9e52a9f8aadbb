// The CUDA backend on qwen3 (Q/K norms, NEOX RoPE: kernels it has for gemma3) against the reference backend and
// llama.cpp's greedy tokens. smollm3, mistral3, qwen3 with YaRN, gemma2 and phi3: test_cuda_arch_features.cpp.
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

using namespace quill;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<Model> saved_synthetic(const std::string& shape, GgmlType type, const fs::path& dir) {
    const fs::path path = dir / (shape + ".gguf");
    SyntheticModel::make(synthetic_config(shape), type, 42)->save(path.string());
    return Model::load(path.string());
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
    cuda::CudaBackendOptions o;
    o.n_ctx = 64;
    o.kv_type = KvType::f32;
    o.tuning.gemm = cuda::GemmMode::f32;
    cuda::CudaBackend g(m->config, m->weights, o);
    ReferenceBackend r(m->config, m->weights, ReferenceBackendOptions{64, 1, KvType::f32});
    std::vector<float> got, want;
    const std::vector<int32_t> greedy = test::greedy_tokens(g, prompt, 24, &got);
    test::greedy_tokens(r, prompt, 24, &want);
    // Float arithmetic against double over the same F32 weights and cache: 1e-4 of the logits' rms, as test_cuda.cpp
    CHECK(test::max_diff(got, want) / test::rms(want) < 1e-4);
    // llama.cpp's tokens (tests/data/arch/qwen3-tiny-f32.greedy.txt); its first near-tie comes after these
    const std::vector<int32_t> oracle{177, 456, 456, 456, 456, 456, 456, 456, 456, 456, 456, 456,
                                      456, 456, 456, 177, 23,  456, 456, 179, 230, 230, 230, 230};
    CHECK(std::vector<int32_t>(greedy.begin(), greedy.begin() + 12) ==
          std::vector<int32_t>(oracle.begin(), oracle.begin() + 12));
}
#endif
