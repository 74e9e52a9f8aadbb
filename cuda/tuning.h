// The CUDA backend's developer switches (docs/cuda.md lists them): which kernels and launches it uses. read_tuning
// reads every one from the environment at once; the session passes the result in CudaBackendOptions::tuning, and
// the tests set the fields directly. Host-only header: no CUDA includes.
#pragma once

#include "cuda/gemm_mode.h"
#include "engine/format/quant.h"

#include <string>
#include <vector>

namespace quill::cuda {

struct Tuning {
    // Products of more than kMaxGraphTokens tokens (prefill) through cuBLAS in this mode (gemm_mode.h), when
    // cuBLAS loads; else, and with off, quill's matmul kernel. QUILL_CUDA_GEMM=off|f32|tf32|f16.
    GemmMode gemm = GemmMode::tf32;
    // Q4_0, Q4_1 and Q8_0 products of fewer tokens (decode) as int8 dot products with the input quantized per block
    // of 32, as the CPU backend's kernels do (matmul_q8); off: the float kernel (the reference backend's function).
    // QUILL_CUDA_INT8=0 turns it off.
    bool int8_products = true;
    // Prompts of more than kMaxGraphTokens tokens attend in flash-attention tiles on the tensor cores (an f16 cache
    // and head_dim a multiple of 16 up to 128; kernels.h attention). QUILL_CUDA_FLASH=0 turns it off.
    bool flash_attention = true;
    // Fewer launches a decode step: Q, K and V (and gate and up) multiplied in one launch when alike, the int8
    // inputs quantized by the norm, the attention and the activation that write them, each layer's output checked by
    // the next layer's norm; and more than eight decode tokens multiplied four rows a warp (matmul_q8 rows_kernel).
    // The same arithmetic, bit for bit (tests/unit/cuda/test_cuda.cpp): 9 launches a layer instead of 17, and a decode step's
    // kernels are short enough that the gaps between them count. QUILL_CUDA_FUSE=0 turns it off.
    bool fused_kernels = true;
    // Decode products of these types (of Q4_0, Q4_1 and Q8_0), rows a multiple of 1024 wide in the packed layout,
    // streamed through shared memory with cp.async (kernels.h Q8Launch::stream), the same bits (tests/unit/cuda/test_cuda.cpp).
    // Q8_0 keeps the register kernel, which decoded it faster at every stage count tried (matmul.cu).
    // QUILL_CUDA_STREAM=0: none, =1: all three.
    std::vector<GgmlType> stream_types = {GgmlType::Q4_0, GgmlType::Q4_1};
    // The streamed kernel's ring: 2, 3, 4, 6 or 8 stages (0: kernels.h kStreamStagesDefault). QUILL_CUDA_STAGES.
    int stream_stages = 0;
    // The int8 decode products launched as programmatic dependents (sm_90 or later; ignored below): each fetches its
    // first weights while the kernel before it finishes (kernels.h Q8Launch::pdl).
    bool programmatic_launch = true;
    // The other kernels of a decode step's layers (the norms, RoPE + K/V store, attention, activation, the
    // activations' quantization) launched as programmatic dependents too (sm_90 or later): each kernel's blocks are
    // on the multiprocessors, waiting, when the kernel before it finishes, instead of launching then. For comparison:
    // QUILL_CUDA_PDL=products launches the products alone that way, QUILL_CUDA_PDL=0 none.
    bool programmatic_chain = true;
    // More than eight decode tokens (sequences decoding together) multiplied by int8 mma on the tensor cores (kernels.h
    // Q8Launch::mma; sm_80 or later, packed layout), the same bits as the dp4a kernels by construction and by its
    // test; faster than the dp4a kernels from 16 sequences on, and more so the more sequences. QUILL_CUDA_MMA=0 turns
    // it off.
    bool mma_products = true;
    // The mma kernel with the tokens' quants and scales staged in shared memory a round at a time (kernels.h
    // Q8Launch::mma_staged), written for what Nsight Compute found the direct one bound by (L1's gathers): the same
    // bits by construction and by its tests, which have not run on a GPU yet, so off. QUILL_CUDA_MMA=staged.
    bool mma_staged = false;
    // The device time of each phase of the forward pass, printed to stderr when the backend goes (cuda/profile.h);
    // graphs and programmatic launches are off then. QUILL_CUDA_PROFILE=1.
    bool profile = false;
    // The cuBLAS library to open before the usual names (cuda/gemm.h); empty: those alone. QUILL_CUBLAS=PATH.
    std::string cublas;

    bool operator==(const Tuning&) const = default;
};

// The switches set in the environment, the defaults for the rest; a value a switch does not take leaves its
// default, except QUILL_CUDA_GEMM, which throws UsageError for a name that is not a mode.
Tuning read_tuning();

}  // namespace quill::cuda
