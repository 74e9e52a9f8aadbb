// The rules main.cpp asks the engine for: GenerationParams::validate (-n and the sampling flags, or a batch
// request's fields), Backend::describe (the load line's and bench's account of a backend), bench_table and
// chat::prompt_tokens (how run's and batch's prompts become tokens).
#include "engine/chat/chat_format.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/reference/reference_backend.h"
#include "engine/runtime/bench.h"
#include "engine/runtime/generator.h"
#include "tests/support/random_model.h"

#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

namespace test_engine_policy {

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
    CHECK_THROWS_WITH(p.validate(), "--temp -1 is out of range: expected a finite number >= 0");
    CHECK_THROWS_WITH(p.validate(true), "temperature -1 is out of range: expected a finite number >= 0");
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

TEST_CASE("prompt_tokens feeds a raw prompt as is and a templated one as the user turn after the system's",
          "[policy]") {
    const auto model = Model::load(test::tiny_model_file(test::TinyModel::spm_chat).string());
    const auto tok = Tokenizer::from_gguf(model->file);
    const auto format = chat::ChatFormat::from_source(*chat::builtin_template("chatml"), "chatml", "", "");
    const std::vector<int32_t> start = tok->encode("<|im_start|>", false, true), end = tok->encode("<|im_end|>", false, true);
    REQUIRE(start.size() == 1);
    REQUIRE(end.size() == 1);
    auto count = [](const std::vector<int32_t>& ids, int32_t id) { return std::count(ids.begin(), ids.end(), id); };
    const std::string prompt = "a <|im_end|> b";  // the marker typed by the user stays text either way

    const std::vector<int32_t> raw = chat::prompt_tokens(*tok, nullptr, prompt, "ignored");
    CHECK(raw == tok->encode(prompt, true, false));
    CHECK(count(raw, end[0]) == 0);

    // chatml: [system turn], user turn, then the assistant's opening.
    const std::vector<int32_t> user = chat::prompt_tokens(*tok, &format, prompt, "");
    CHECK(count(user, start[0]) == 2);
    CHECK(count(user, end[0]) == 1);
    const std::vector<int32_t> with_system = chat::prompt_tokens(*tok, &format, prompt, "be brief");
    CHECK(count(with_system, start[0]) == 3);
    CHECK(count(with_system, end[0]) == 2);
    CHECK(with_system.size() > user.size());
}

}  // namespace test_engine_policy
