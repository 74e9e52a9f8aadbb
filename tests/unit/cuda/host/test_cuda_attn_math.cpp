// The per-architecture attention arithmetic the CUDA kernels run (cuda/attn_math.h: mistral3's query temperature,
// gemma2's score soft-cap, the RoPE magnitude scale), compiled here for the host and compared bit for bit with the
// CPU backend's (ModelConfig::attn_temp, cpu::softcap_scores, the angle table's cos * rope_mscale). Runs on every
// machine, GPU or not.
#include "cuda/attn_math.h"
#include "engine/cpu/attention.h"
#include "engine/model/synthetic.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

namespace test_cuda_attn_math {

using namespace quill;

TEST_CASE("the CUDA query temperature is the CPU backend's, position by position", "[attention]") {
    const ModelConfig c = synthetic_config("mistral3-tiny");
    REQUIRE(c.attn_temp_scale != 0.0f);
    REQUIRE(c.attn_temp_floor > 0);
    int changes = 0;
    float last = 1.0f;
    for (int64_t pos = 0; pos < 40 * c.attn_temp_floor; ++pos) {
        INFO("position " << pos);
        const float got = cuda::query_temperature(pos, c.attn_temp_scale, c.attn_temp_floor);
        CHECK(got == static_cast<float>(c.attn_temp(pos)));  // the CPU backend's factor (cpu_backend.cpp)
        changes += got != last;
        last = got;
    }
    CHECK(changes == 39);  // a new factor at each multiple of the floor
    CHECK(cuda::query_temperature(0, c.attn_temp_scale, c.attn_temp_floor) == 1.0f);
    // Without the setting: 1 everywhere, whatever the floor.
    for (int64_t pos : {0, 1, 17, 100000}) CHECK(cuda::query_temperature(pos, 0.0f, 0) == 1.0f);
}

TEST_CASE("the CUDA soft-capped score is the CPU backend's, bit for bit", "[attention]") {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> score(-80.0f, 80.0f);
    for (float cap : {0.1f, 0.5f, 30.0f, 50.0f}) {
        std::vector<float> s(4096);
        for (float& v : s) v = score(rng);
        std::vector<float> want = s;
        cpu::softcap_scores(want.data(), want.size(), cap);
        for (size_t i = 0; i < s.size(); ++i) {
            INFO("cap " << cap << ", score " << s[i]);
            CHECK(cuda::capped_score(s[i], cap) == want[i]);
            CHECK(std::fabs(cuda::capped_score(s[i], cap)) <= cap);
        }
    }
}

TEST_CASE("the CUDA RoPE terms carry the magnitude scale as the CPU backend's angle table does", "[attention]") {
    const ModelConfig c = synthetic_config("qwen3-tiny-yarn");
    REQUIRE(c.rope_mscale != 1.0f);
    const double m = c.rope_mscale;  // (cpu_backend.cpp rope_angles: cos(theta) * m in double, then float)
    for (double theta : {0.0, 0.3, 1.0, 2.5, 100.0, 12345.678}) {
        INFO("theta " << theta);
        CHECK(cuda::scaled_rope_term(std::cos(theta), m) == static_cast<float>(std::cos(theta) * m));
        CHECK(cuda::scaled_rope_term(std::sin(theta), m) == static_cast<float>(std::sin(theta) * m));
    }
    CHECK(cuda::scaled_rope_term(1.0, m) == c.rope_mscale);
}

}  // namespace test_cuda_attn_math
