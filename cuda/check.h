// Checking every CUDA runtime call and kernel launch: a failure throws quill::Error naming the call and CUDA's
// message, so quill ends with a one-line error, never an abort.
#pragma once

#include "engine/format/quant.h"

#include <cuda_runtime.h>

namespace quill::cuda {

// Throws Error("CUDA error in <what>: <message>") unless err is cudaSuccess. An out-of-memory error says so plainly.
void check(cudaError_t err, const char* what);

// Throws Error("internal error: <what>"): a broken invariant of the backend's own code (the .cu files cannot
// include the fmt-based error.h).
[[noreturn]] void throw_internal(const char* what);

// Throws FileError: the CUDA backend has no kernel for this weight type.
[[noreturn]] void throw_unsupported(GgmlType type);

}  // namespace quill::cuda

#define QUILL_CUDA(call) ::quill::cuda::check((call), #call)
