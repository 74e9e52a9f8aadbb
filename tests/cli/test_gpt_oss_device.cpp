// --device auto on gpt-oss, whose attention sinks, biased experts and clamped SwiGLU the CUDA backend refuses
// (cuda/memory_plan.cpp check_model): the model runs on the CPU; where a GPU is there, the line saying so names them.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>

using namespace quill;
namespace fs = std::filesystem;

TEST_CASE("quill run --device auto runs a gpt-oss file on the CPU, naming what CUDA lacks", "[cli]") {
    const fs::path file = test::temp_dir("gpt_oss_device_auto") / "gpt-oss-tiny.gguf";
    const auto save = test::run_quill(
        {"bench", "--synthetic", "gpt-oss-tiny", "--dtype", "f32", "--save", file.string(), "-p", "0", "-n", "1"});
    REQUIRE(save.status == 0);
    const auto r = test::run_quill(
        {"run", "-v", "--device", "auto", "-m", file.string(), "-p", "Hi", "--temp", "0", "-n", "3", "--json"});
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out.find("\"completion_tokens\":3") != std::string::npos);
    CHECK(r.err.find("cpu backend") != std::string::npos);
    // With a GPU: "quill: cannot run on <GPU> (the CUDA backend cannot run gpt-oss's attention sinks ...); using
    // the CPU".
    if (const size_t at = r.err.find("cannot run on"); at != std::string::npos)
        CHECK(r.err.find("gpt-oss's attention sinks", at) != std::string::npos);
}
