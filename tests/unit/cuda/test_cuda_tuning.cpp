// cuda::read_tuning: each QUILL_CUDA_* developer switch (docs/cuda.md) and QUILL_CUBLAS sets its field of the
// tuning and no other, a value the switch does not take changes nothing, and QUILL_CUDA_GEMM names a mode or is an
// error. No device needed: the tuning is read before the backend touches one.
#ifdef QUILL_HAVE_CUDA

#include "cuda/tuning.h"
#include "engine/error.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace test_cuda_tuning {

using namespace quill;

namespace {

const char* const kSwitches[] = {"QUILL_CUDA_GEMM", "QUILL_CUDA_INT8",  "QUILL_CUDA_FLASH",   "QUILL_CUDA_FUSE",
                                 "QUILL_CUDA_STREAM", "QUILL_CUDA_STAGES", "QUILL_CUDA_PDL", "QUILL_CUDA_MMA",
                                 "QUILL_CUDA_PROFILE", "QUILL_CUBLAS"};

// Every switch unset for the scope (the one named by set() set), then each restored as it was.
class SwitchesGuard {
public:
    SwitchesGuard() {
        for (const char* name : kSwitches) {
            const char* v = std::getenv(name);
            saved_.emplace_back(v ? std::optional<std::string>(v) : std::nullopt);
        }
        clear();
    }
    ~SwitchesGuard() {
        for (size_t i = 0; i < saved_.size(); ++i) {
            if (saved_[i]) setenv(kSwitches[i], saved_[i]->c_str(), 1);
            else unsetenv(kSwitches[i]);
        }
    }
    SwitchesGuard(const SwitchesGuard&) = delete;
    SwitchesGuard& operator=(const SwitchesGuard&) = delete;

    // Only `name` set, to `value`.
    void set(const char* name, const char* value) {
        clear();
        setenv(name, value, 1);
    }
    void clear() {
        for (const char* name : kSwitches) unsetenv(name);
    }

private:
    std::vector<std::optional<std::string>> saved_;
};

}  // namespace

TEST_CASE("read_tuning sets each CUDA switch's field from the environment and leaves the others at their defaults",
          "[cuda]") {
    SwitchesGuard env;
    const cuda::Tuning defaults;
    CHECK(cuda::read_tuning() == defaults);

    struct Case {
        const char* name;
        const char* value;
        cuda::Tuning want;
    };
    std::vector<Case> cases;
    auto add = [&](const char* name, const char* value, auto change) {
        cuda::Tuning t = defaults;
        change(t);
        cases.push_back({name, value, t});
    };
    add("QUILL_CUDA_GEMM", "f16", [](cuda::Tuning& t) { t.gemm = cuda::GemmMode::f16; });
    add("QUILL_CUDA_GEMM", "off", [](cuda::Tuning& t) { t.gemm = cuda::GemmMode::off; });
    add("QUILL_CUDA_INT8", "0", [](cuda::Tuning& t) { t.int8_products = false; });
    add("QUILL_CUDA_FLASH", "0", [](cuda::Tuning& t) { t.flash_attention = false; });
    add("QUILL_CUDA_FUSE", "0", [](cuda::Tuning& t) { t.fused_kernels = false; });
    add("QUILL_CUDA_STREAM", "0", [](cuda::Tuning& t) { t.stream_types.clear(); });
    add("QUILL_CUDA_STREAM", "1",
        [](cuda::Tuning& t) { t.stream_types = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}; });
    add("QUILL_CUDA_STAGES", "6", [](cuda::Tuning& t) { t.stream_stages = 6; });
    add("QUILL_CUDA_PDL", "0", [](cuda::Tuning& t) { t.programmatic_launch = t.programmatic_chain = false; });
    add("QUILL_CUDA_PDL", "products", [](cuda::Tuning& t) { t.programmatic_chain = false; });
    add("QUILL_CUDA_MMA", "0", [](cuda::Tuning& t) { t.mma_products = false; });
    add("QUILL_CUDA_MMA", "staged", [](cuda::Tuning& t) { t.mma_staged = true; });
    add("QUILL_CUDA_PROFILE", "1", [](cuda::Tuning& t) { t.profile = true; });
    add("QUILL_CUBLAS", "/opt/cublas/libcublas.so", [](cuda::Tuning& t) { t.cublas = "/opt/cublas/libcublas.so"; });
    // Values a switch does not take: the defaults.
    for (const char* name : {"QUILL_CUDA_INT8", "QUILL_CUDA_FLASH", "QUILL_CUDA_FUSE", "QUILL_CUDA_PROFILE"})
        add(name, "no", [](cuda::Tuning&) {});
    add("QUILL_CUDA_STAGES", "5", [](cuda::Tuning&) {});
    add("QUILL_CUDA_STREAM", "2", [](cuda::Tuning&) {});
    add("QUILL_CUBLAS", "", [](cuda::Tuning&) {});
    for (const Case& c : cases) {
        INFO(c.name << "=" << c.value);
        env.set(c.name, c.value);
        CHECK(cuda::read_tuning() == c.want);
    }
    env.set("QUILL_CUDA_GEMM", "TF32");
    CHECK_THROWS_AS(cuda::read_tuning(), UsageError);
}

#endif

}  // namespace test_cuda_tuning
