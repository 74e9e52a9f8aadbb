#include "cuda/check.h"

#include "engine/error.h"

namespace quill::cuda {

void check(cudaError_t err, const char* what) {
    if (err == cudaSuccess) return;
    cudaGetLastError();  // clear a non-sticky error; a sticky one (a fault in a kernel) stays, and says so next time
    if (err == cudaErrorMemoryAllocation)
        throw Error(fmt::format("out of GPU memory in {} (another process may be using the GPU)", what));
    throw Error(fmt::format("CUDA error in {}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err)));
}

void throw_internal(const char* what) { throw Error(std::string("internal error: ") + what); }

void throw_unsupported(GgmlType type) {
    throw FileError(fmt::format("the CUDA backend has no kernel for weight type {}", type_name(type)));
}

}  // namespace quill::cuda
