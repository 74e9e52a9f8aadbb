// --device auto on a mixture of experts (qwen3moe), which the CUDA backend refuses: the model runs on the CPU, and
// where a GPU is there the one line that says so names the mixture of experts as the reason.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>

using namespace quill;
namespace fs = std::filesystem;

TEST_CASE("quill run --device auto runs a qwen3moe file on the CPU and says why once", "[cli]") {
    const fs::path file = test::temp_dir("moe_device_auto") / "qwen3moe-tiny.gguf";
    REQUIRE(test::run_quill({"bench", "--synthetic", "qwen3moe-tiny", "--dtype", "f32", "--save", file.string(), "-p",
                             "0", "-n", "1", "-r", "1"})
                .status == 0);
    const auto r = test::run_quill({"run", "-v", "--device", "auto", "-m", file.string(), "-p", "Hello", "--temp", "0",
                                    "-n", "2"});
    CHECK(r.status == 0);
    INFO(r.err);
    const size_t at = r.err.find("; using the CPU");
    REQUIRE(at != std::string::npos);
    CHECK(r.err.find("; using the CPU", at + 1) == std::string::npos);
    const size_t line = r.err.rfind('\n', at) == std::string::npos ? 0 : r.err.rfind('\n', at) + 1;
    const std::string said = r.err.substr(line, at - line);
    CHECK(r.err.find("cpu backend") != std::string::npos);
    // With a GPU: "quill: cannot run on <GPU> (the CUDA backend cannot run qwen3moe's mixture of experts ...)".
    if (said.find("cannot run on") != std::string::npos) CHECK(said.find("mixture of experts") != std::string::npos);
}
