// --device auto on gpt-oss: the CUDA backend runs its attention sinks, biased experts and clamped SwiGLU where there
// is a GPU (tests/unit/cuda/test_cuda_gpt_oss.cpp); elsewhere the model runs on the CPU, and the one line that says
// so does not blame them.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>

namespace test_gpt_oss_device {

using namespace quill;
namespace fs = std::filesystem;

TEST_CASE("quill run --device auto runs a gpt-oss file on the GPU, or on the CPU saying why once", "[cli]") {
    const fs::path file = test::temp_dir("gpt_oss_device_auto") / "gpt-oss-tiny.gguf";
    const auto save = test::run_quill(
        {"bench", "--synthetic", "gpt-oss-tiny", "--dtype", "f32", "--save", file.string(), "-p", "0", "-n", "1"});
    REQUIRE(save.status == 0);
    const auto r = test::run_quill(
        {"run", "-v", "--device", "auto", "-m", file.string(), "-p", "Hi", "--temp", "0", "-n", "3", "--json"});
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out.find("\"completion_tokens\":3") != std::string::npos);
    // The CUDA backend refuses none of gpt-oss's parts now.
    CHECK(r.err.find("attention sinks") == std::string::npos);
    CHECK(r.err.find("swiglu-oai") == std::string::npos);
    CHECK(r.err.find("mixture of experts") == std::string::npos);
    if (r.err.find("cuda backend") != std::string::npos) {  // a GPU took it
        CHECK(r.err.find("; using the CPU") == std::string::npos);
        return;
    }
    CHECK(r.err.find("cpu backend") != std::string::npos);
}

}  // namespace test_gpt_oss_device
