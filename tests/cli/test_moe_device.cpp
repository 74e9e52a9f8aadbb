// --device auto on a mixture of experts (qwen3moe): the CUDA backend runs it where there is a GPU
// (tests/unit/cuda/test_cuda_moe.cpp); elsewhere the model runs on the CPU, and the one line that says so gives the
// reason.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>

namespace test_moe_device {

using namespace quill;
namespace fs = std::filesystem;

TEST_CASE("quill run --device auto runs a qwen3moe file on the GPU, or on the CPU saying why once", "[cli]") {
    const fs::path file = test::temp_dir("moe_device_auto") / "qwen3moe-tiny.gguf";
    REQUIRE(test::run_quill({"bench", "--synthetic", "qwen3moe-tiny", "--dtype", "f32", "--save", file.string(), "-p",
                             "0", "-n", "1", "-r", "1"})
                .status == 0);
    const auto r = test::run_quill({"run", "-v", "--device", "auto", "-m", file.string(), "-p", "Hello", "--temp", "0",
                                    "-n", "2"});
    CHECK(r.status == 0);
    INFO(r.err);
    const size_t at = r.err.find("; using the CPU");
    if (r.err.find("cuda backend") != std::string::npos) {  // a GPU took it
        CHECK(at == std::string::npos);
        return;
    }
    REQUIRE(at != std::string::npos);
    CHECK(r.err.find("; using the CPU", at + 1) == std::string::npos);
    CHECK(r.err.find("cpu backend") != std::string::npos);
    // The reason is not the mixture of experts, which the CUDA backend runs.
    CHECK(r.err.find("mixture of experts") == std::string::npos);
}

}  // namespace test_moe_device
