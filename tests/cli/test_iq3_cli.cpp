// The CLI on a file of IQ3_XXS, IQ3_S, IQ1_S and IQ1_M weights (importance types quill multiplies but cannot make):
// `quill bench --synthetic --save` writes one, `quill info` names its type, `quill run` generates from it on the CPU.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <string>

namespace test_iq3_cli {

using namespace quill;

TEST_CASE("quill bench saves, quill info describes and quill run generates from a model of IQ3 or IQ1 weights",
          "[cli]") {
    for (const char* name : {"iq3_xxs", "iq3_s", "iq1_s", "iq1_m"}) {
        const std::string type = name;
        INFO(type);
        const std::string file = (test::temp_dir("iq3_cli_" + type) / "tiny.gguf").string();
        const auto bench = test::run_quill({"bench", "--synthetic", "llama-tiny-256", "--dtype", type, "-p", "4", "-n",
                                            "2", "-r", "1", "--save", file});
        REQUIRE(bench.status == 0);
        const auto info = test::run_quill({"info", file});
        CHECK(info.status == 0);
        CHECK(info.out.find(type + " x30") != std::string::npos);  // 4 layers of 7 matrices, the embedding, the output
        const auto run = test::run_quill({"run", "-m", file, "-p", "hello", "-n", "4", "--temp", "0", "--raw",
                                          "--device", "cpu"});
        CHECK(run.status == 0);
        CHECK(!run.out.empty());
        CHECK(run.err.find("error") == std::string::npos);
    }
    // A shape whose rows are not whole 256-element blocks is refused in one line.
    const auto bad = test::run_quill({"bench", "--synthetic", "stories15m", "--dtype", "iq3_xxs", "-p", "4", "-n", "0"});
    CHECK(bad.status != 0);
    CHECK(bad.err.find("not a multiple of its block size 256") != std::string::npos);
}

}  // namespace test_iq3_cli
