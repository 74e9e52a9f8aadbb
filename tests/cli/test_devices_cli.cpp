// --devices cpu,cpu@N through the binary: run, chat and batch (with --resume) give the unsplit text bit for bit at
// every split point, on a synthetic tiny model of every architecture (bench --synthetic --save) and on the default
// model; the plan line on the load line; bad --devices and --gpu-layers give one clear error.
#include <catch2/catch.hpp>

#include "tests/support/test_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

namespace test_devices_cli {

namespace fs = std::filesystem;
using quill::test::run_quill;

namespace {

// The synthetic model of a preset, saved with its SPM vocabulary of byte tokens into dir.
std::string synthetic_file(const fs::path& dir, const std::string& shape) {
    const std::string path = (dir / (shape + ".gguf")).string();
    const auto r = run_quill({"bench", "--synthetic", shape, "--dtype", "q8_0", "-p", "0", "-n", "1", "-r", "1",
                              "--save", path, "-t", "1"});
    REQUIRE(r.status == 0);
    return path;
}

int n_layers(const std::string& model) {
    const auto r = run_quill({"info", "-m", model, "--json"});
    REQUIRE(r.status == 0);
    const std::string key = "\"n_layer\":";
    const size_t at = r.out.find(key);
    REQUIRE(at != std::string::npos);
    return std::stoi(r.out.substr(at + key.size()));
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
}

}  // namespace

TEST_CASE("quill run split across two CPU backends gives the unsplit text at every split point on every architecture",
          "[cli][split]") {
    const fs::path dir = quill::test::temp_dir("devices-arch");
    for (const std::string shape : {"stories15m", "gemma2-tiny", "phi3-tiny", "qwen3-tiny", "smollm3-tiny",
                                    "mistral3-tiny"}) {
        const std::string model = synthetic_file(dir, shape);
        const int n = n_layers(model);
        const std::vector<std::string> args{"run", "--raw", "-m", model, "-p", "abc def", "-n", "12", "--temp", "0",
                                            "-t", "1"};
        const auto whole = run_quill(args);
        REQUIRE(whole.status == 0);
        for (int split = 1; split < n; ++split) {
            INFO(shape << " split at layer " << split);
            const auto r = run_quill(with(args, {"--devices", "cpu,cpu@" + std::to_string(split)}));
            REQUIRE(r.status == 0);
            CHECK(r.out == whole.out);
            const std::string first = split == 1 ? "layer 0" : fmt::format("layers 0-{}", split - 1);
            CHECK_THAT(r.err, Catch::Contains(fmt::format("model: {} of {} layers on cpu ({}, ", split, n, first)));
        }
    }
}

TEST_CASE("the default model split at every layer: run and a two-turn chat give the unsplit text", "[cli][split]") {
    const auto model = quill::test::require_default_model();
    if (!model) return;
    const std::vector<std::string> run{"run", "-m", model->string(), "-p", "Name three colors.", "-n", "16", "--temp",
                                       "0", "-t", "2"};
    const std::vector<std::string> chat{"chat", "-m", model->string(), "-n", "12", "--temp", "0", "-t", "2"};
    const std::string turns = "What is 2+2?\nAnd times 3?\n";
    const auto run_whole = run_quill(run);
    const auto chat_whole = run_quill(chat, turns);
    REQUIRE(run_whole.status == 0);
    REQUIRE(chat_whole.status == 0);
    const int n = n_layers(model->string());
    for (int split = 1; split < n; ++split) {
        INFO("split at layer " << split);
        const std::string devices = "cpu,cpu@" + std::to_string(split);
        const auto r = run_quill(with(run, {"--devices", devices}));
        REQUIRE(r.status == 0);
        CHECK(r.out == run_whole.out);
        if (split % 7 == 1) {  // (a chat at a few split points: each loads the model again)
            const auto c = run_quill(with(chat, {"--devices", devices}), turns);
            REQUIRE(c.status == 0);
            CHECK(c.out == chat_whole.out);
        }
    }
    // --devices cpu,cpu without a split point: the plan halves the bytes
    const auto even = run_quill(with(run, {"--devices", "cpu,cpu"}));
    REQUIRE(even.status == 0);
    CHECK(even.out == run_whole.out);
    CHECK_THAT(even.err, Catch::Contains("KV cache with each range's layers"));
}

TEST_CASE("quill batch split across two CPU backends gives the unsplit records resumed or not", "[cli][split][batch]") {
    const fs::path dir = quill::test::temp_dir("devices-batch");
    const std::string model = synthetic_file(dir, "qwen3-tiny");
    const std::string in = (dir / "in.txt").string();
    {
        std::ofstream f(in);
        for (int i = 0; i < 8; ++i) f << "prompt number " << i << " says" << std::string(i, '!') << "\n";
    }
    auto batch = [&](const std::string& out, std::vector<std::string> more) {
        return run_quill(with({"batch", "--raw", "-m", model, "-i", in, "-o", out, "--temp", "0", "--seed", "3", "-n",
                               "10", "--parallel", "3", "-t", "1"},
                              more));
    };
    const std::string whole = (dir / "whole.jsonl").string();
    REQUIRE(batch(whole, {}).status == 0);
    const std::string want = quill::test::read_file(whole);
    for (int split = 1; split < 4; ++split) {
        INFO("split at layer " << split);
        const std::string out = (dir / fmt::format("split{}.jsonl", split)).string();
        const std::string devices = "cpu,cpu@" + std::to_string(split);
        REQUIRE(batch(out, {"--devices", devices}).status == 0);
        CHECK(quill::test::read_file(out) == want);
        // the first three records kept, the rest resumed on the split
        std::ofstream(out, std::ios::trunc) << want.substr(0, [&] {
            size_t at = 0;
            for (int i = 0; i < 3; ++i) at = want.find('\n', at) + 1;
            return at;
        }());
        REQUIRE(batch(out, {"--devices", devices, "--resume"}).status == 0);
        const std::string resumed = quill::test::read_file(out);
        CHECK(resumed.size() == want.size());
        for (int i = 0; i < 8; ++i) {  // every record, whatever order the resumed ones finished in
            const size_t a = want.find(fmt::format("\"id\":\"line-{}\"", i + 1));
            REQUIRE(a != std::string::npos);
            const size_t line_start = want.rfind('\n', a) == std::string::npos ? 0 : want.rfind('\n', a) + 1;
            const std::string line = want.substr(line_start, want.find('\n', a) - line_start + 1);
            CHECK(resumed.find(line) != std::string::npos);
        }
    }
}

TEST_CASE("bad --devices and --gpu-layers give one clear error", "[cli][split]") {
    const fs::path dir = quill::test::temp_dir("devices-bad");
    const std::string model = synthetic_file(dir, "qwen3-tiny");
    struct Case {
        std::vector<std::string> flags;
        const char* error;
    };
    for (const Case& c :
         {Case{{"--devices", "gpu9"}, "quill: error: --devices: 'gpu9' is not a device (expected cpu, cuda or cuda:N)"},
          Case{{"--devices", "cpu,cpu@4"}, "quill: error: --devices: layer 4 is past the model's last layer (3; it has "
                                           "4 layers)"},
          Case{{"--devices", "cpu,cpu@2,cpu@1"}, "quill: error: --devices: first layers must increase"},
          Case{{"--devices", "cpu,cpu,cpu,cpu,cpu"}, "quill: error: --devices: 5 devices for a model of 4 layers"},
          Case{{"--devices", "cpu,cpu", "--gpu-layers", "2"},
               "quill: error: --devices and --gpu-layers both place layers: give one of them"}}) {
        INFO(c.error);
        const auto r = run_quill(with({"run", "--raw", "-m", model, "-p", "a", "-n", "2"}, c.flags));
        CHECK(r.status != 0);
        CHECK(r.out.empty());
        CHECK_THAT(r.err, Catch::StartsWith(c.error));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
#ifndef QUILL_HAVE_CUDA
    const auto ngl = run_quill({"run", "--raw", "-m", model, "-p", "a", "-n", "2", "-ngl", "2"});
    CHECK(ngl.status != 0);
    CHECK(ngl.err == "quill: error: --gpu-layers 2: there is no GPU to put layers on\n");
    const auto cuda = run_quill({"run", "--raw", "-m", model, "-p", "a", "-n", "2", "--devices", "cpu,cuda:0"});
    CHECK(cuda.err == "quill: error: --devices cuda:0: this quill was built without CUDA\n");
    const auto zero = run_quill({"run", "--raw", "-m", model, "-p", "a", "-n", "2", "--gpu-layers", "0"});
    CHECK(zero.status == 0);
#endif
}

}  // namespace test_devices_cli
