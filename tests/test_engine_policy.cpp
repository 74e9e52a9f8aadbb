// The rules main.cpp asks the engine for: GenerationParams::validate (-n and the sampling flags, or a batch
// request's fields), Backend::describe (the load line's and bench's account of a backend) and bench_table.
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/reference/reference_backend.h"
#include "engine/runtime/bench.h"
#include "engine/runtime/generator.h"
#include "tests/random_model.h"

#include <catch2/catch.hpp>

#include <string>

using namespace quill;

TEST_CASE("GenerationParams::validate names -n, or max_tokens for a batch request, and checks the sampling first",
          "[policy]") {
    GenerationParams p;
    for (int n : {-1, 0, 7}) {
        p.max_tokens = n;
        CHECK_NOTHROW(p.validate());
        CHECK_NOTHROW(p.validate(true));
    }
    p.max_tokens = -2;
    CHECK_THROWS_WITH(p.validate(), "-n -2 is out of range: expected >= -1");
    CHECK_THROWS_WITH(p.validate(true), "max_tokens -2 is out of range: expected >= 0");
    CHECK_THROWS_AS(p.validate(), UsageError);
    p.sampling.temperature = -1.0f;  // both wrong: the sampling flag is named, as before -n's check
    CHECK_THROWS_WITH(p.validate(), "--temp -1 is out of range: expected >= 0");
    CHECK_THROWS_WITH(p.validate(true), "temperature -1 is out of range: expected >= 0");
}

TEST_CASE("Backend::describe gives a CPU backend's threads and kernels, and a plain name for the others",
          "[policy]") {
    test::TinySpec spec;
    const auto m = test::make_tiny_model(spec);
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = 16;
    const cpu::CpuBackend cpu(m->config, m->weights, o);
    const BackendInfo c = cpu.describe();
    CHECK(c.name == "cpu");
    CHECK(c.n_threads == 2);
    CHECK(c.kernels == std::string(cpu::isa_name(cpu.isa())));
    CHECK(c.summary == "cpu backend, 2 threads, " + c.kernels + " kernels");

    const ReferenceBackend ref(m->config, m->weights, ReferenceBackendOptions{16, 1, KvType::f32});
    const BackendInfo r = ref.describe();
    CHECK(r.name == "reference");
    CHECK(r.n_threads == 0);
    CHECK(r.kernels.empty());
    CHECK(r.summary == "reference backend");
}

TEST_CASE("bench_table renders a row per test, with the device's fractions where it measured them", "[policy]") {
    BenchResult res;
    BenchTest pp{"pp16", 16, 0, 1, {100.0, 200.0}, {}, {1.0, 3.0}};
    BenchTest tg{"tg4", 0, 4, 1, {10.0}, {20.0}, {}};
    res.tests = {pp, tg};
    const std::string header = "| model | backend | threads | test | t/s |\n| --- | --- | ---: | ---: | ---: |\n";

    const BackendInfo cpu{"cpu", 4, "avx2", "cpu backend, 4 threads, avx2 kernels"};
    CHECK(bench_table(res, cpu, "m\x1b (q4_0)", 0.0, 0.0) ==
          header + "| m\\x1b (q4_0) | cpu avx2 | 4 | pp16 | 150.00 ± 70.71 (3.00 TFLOP/s) |\n"
                   "| m\\x1b (q4_0) | cpu avx2 | 4 | tg4 | 10.00 ± 0.00 (20.0 GB/s) |\n");

    const BackendInfo gpu{"cuda", 0, "", "cuda backend"};
    CHECK(bench_table(res, gpu, "m", 40.0, 6.0) ==
          header + "| m | cuda | - | pp16 | 150.00 ± 70.71 (3.00 TFLOP/s, 50% of GEMM) |\n"
                   "| m | cuda | - | tg4 | 10.00 ± 0.00 (20.0 GB/s, 50% of copy) |\n");
}
