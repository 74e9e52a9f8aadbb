#include "cuda/tuning.h"

#include <cstdlib>
#include <string_view>

namespace quill::cuda {

Tuning read_tuning() {
    Tuning t;
    auto switch_is = [](const char* name, std::string_view value) {
        const char* env = std::getenv(name);
        return env && value == env;
    };
    if (const char* env = std::getenv("QUILL_CUDA_GEMM"); env && *env) t.gemm = parse_gemm_mode(env);
    if (switch_is("QUILL_CUDA_INT8", "0")) t.int8_products = false;
    if (switch_is("QUILL_CUDA_FLASH", "0")) t.flash_attention = false;
    if (switch_is("QUILL_CUDA_FUSE", "0")) t.fused_kernels = false;
    if (switch_is("QUILL_CUDA_STREAM", "0")) t.stream_types.clear();
    if (switch_is("QUILL_CUDA_STREAM", "1")) t.stream_types = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0};
    for (const char* n : {"2", "3", "4", "6", "8"})
        if (switch_is("QUILL_CUDA_STAGES", n)) t.stream_stages = std::atoi(n);
    if (switch_is("QUILL_CUDA_PDL", "0")) t.programmatic_launch = t.programmatic_chain = false;
    if (switch_is("QUILL_CUDA_PDL", "products")) t.programmatic_chain = false;
    if (switch_is("QUILL_CUDA_MMA", "0")) t.mma_products = false;
    if (switch_is("QUILL_CUDA_MMA", "staged")) t.mma_staged = true;
    if (switch_is("QUILL_CUDA_PROFILE", "1")) t.profile = true;
    if (const char* env = std::getenv("QUILL_CUBLAS"); env && *env) t.cublas = env;
    return t;
}

}  // namespace quill::cuda
