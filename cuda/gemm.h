// Prefill products on the tensor cores through cuBLAS, loaded with dlopen on first use so that quill keeps no hard
// dependency on a CUDA library (it starts on machines without one, and falls back to its own kernels on a GPU
// machine without cuBLAS). A product of many tokens dequantizes the weight matrix, a slice of rows at a time, into
// a scratch buffer and multiplies that slice with all the tokens in one GEMM: the weights are read once per forward
// call instead of once per tile of tokens, and the multiply runs on the tensor cores (TF32 or F16) or as exact
// float (F32).
#pragma once

#include "cuda/gemm_mode.h"
#include "cuda/kernels.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace quill::cuda {


// Products of at least this many tokens go through the GEMM (fewer: the matmul kernel; decode steps, which may be
// captured as CUDA graphs, have at most kMaxGraphTokens = 64 tokens).
constexpr int64_t kGemmMinTokens = 65;

// Elements of the largest weight slice dequantized at once (256 MiB as float).
constexpr int64_t kGemmSliceElems = int64_t{64} << 20;

// Scratch bytes gemm() needs for matrices of at most max_elems elements and max_cols columns, with n_tokens tokens.
// slice_elems: the most weight elements dequantized at once (smaller in the tests, to cross slices).
size_t gemm_scratch_bytes(GemmMode mode, int64_t max_elems, int64_t max_cols, int64_t n_tokens,
                          int64_t slice_elems = kGemmSliceElems);

class Gemm {
public:
    // Loads cuBLAS (`library` first when not empty, then libcublas.so.13 and .12; Tuning::cublas) and creates a
    // handle. available() is false, and why() says why, when the library or the handle cannot be had; gemm() must
    // not be called then.
    explicit Gemm(const std::string& library = {});
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    bool available() const;
    const std::string& why() const;

    // y[t, r] = sum_k W[r, k] x[t, k] (y += when accumulate) for n_tokens tokens, on stream s, through `scratch`
    // (gemm_scratch_bytes for this matrix). Throws Error naming cuBLAS's status on failure.
    void gemm(GemmMode mode, const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, bool accumulate,
              void* scratch, size_t scratch_bytes, cudaStream_t s, int64_t slice_elems = kGemmSliceElems);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace quill::cuda
