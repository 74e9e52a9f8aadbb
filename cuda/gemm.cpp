#include "cuda/gemm.h"

#include "cuda/check.h"
#include "engine/error.h"

#include <cublas_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <vector>

namespace quill::cuda {

namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Whether the matrix multiplies as stored (no dequantized slice): float rows for f32 and tf32, f16 rows for f16.
bool direct(GemmMode mode, GgmlType t) { return mode == GemmMode::f16 ? t == GgmlType::F16 : t == GgmlType::F32; }

int64_t slice_rows(const DeviceMatrix& w, int64_t slice_elems) {
    return std::clamp<int64_t>(slice_elems / w.cols, 1, w.rows);
}

// Elements of the weight slice: at least one row.
int64_t slice_size(int64_t max_elems, int64_t max_cols, int64_t slice_elems) {
    return std::min(max_elems, std::max(slice_elems, max_cols));
}

}  // namespace

const char* gemm_mode_name(GemmMode m) {
    switch (m) {
        case GemmMode::off: return "off";
        case GemmMode::f32: return "f32";
        case GemmMode::tf32: return "tf32";
        case GemmMode::f16: return "f16";
    }
    return "?";
}

GemmMode parse_gemm_mode(const std::string& s) {
    for (GemmMode m : {GemmMode::off, GemmMode::f32, GemmMode::tf32, GemmMode::f16})
        if (s == gemm_mode_name(m)) return m;
    throw UsageError(fmt::format("GEMM mode '{}' is not one of off, f32, tf32, f16", s));
}

size_t gemm_scratch_bytes(GemmMode mode, int64_t max_elems, int64_t max_cols, int64_t n_tokens,
                          int64_t slice_elems) {
    if (mode == GemmMode::off) return 0;
    const size_t elem = mode == GemmMode::f16 ? 2 : 4;
    size_t n = align_up(static_cast<size_t>(slice_size(max_elems, max_cols, slice_elems)) * elem);
    if (mode == GemmMode::f16) n += align_up(static_cast<size_t>(n_tokens * max_cols) * 2);
    return n;
}

struct Gemm::Impl {
    using Create = cublasStatus_t (*)(cublasHandle_t*);
    using Destroy = cublasStatus_t (*)(cublasHandle_t);
    using SetStream = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
    using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                      const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                      const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    using StatusString = const char* (*)(cublasStatus_t);

    void* lib = nullptr;
    cublasHandle_t handle = nullptr;
    std::string why;
    Destroy destroy = nullptr;
    SetStream set_stream = nullptr;
    GemmEx gemm_ex = nullptr;
    StatusString status_string = nullptr;

    std::string message(cublasStatus_t st) const {
        return status_string ? status_string(st) : fmt::format("status {}", static_cast<int>(st));
    }
};

Gemm::Gemm(const std::string& library) : impl_(std::make_unique<Impl>()) {
    Impl& d = *impl_;
    std::vector<std::string> names;
    if (!library.empty()) names.push_back(library);
    for (const char* n : {"libcublas.so.13", "libcublas.so.12", "/usr/local/cuda/lib64/libcublas.so.13",
                          "/usr/local/cuda/lib64/libcublas.so.12", "/usr/local/cuda/lib64/libcublas.so"})
        names.emplace_back(n);
    for (const std::string& n : names)
        if ((d.lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (!d.lib) {
        d.why = "cuBLAS not found (libcublas.so.13 or .12; $QUILL_CUBLAS names another)";
        return;
    }
    auto sym = [&](const char* name) { return dlsym(d.lib, name); };
    auto create = reinterpret_cast<Impl::Create>(sym("cublasCreate_v2"));
    d.destroy = reinterpret_cast<Impl::Destroy>(sym("cublasDestroy_v2"));
    d.set_stream = reinterpret_cast<Impl::SetStream>(sym("cublasSetStream_v2"));
    d.gemm_ex = reinterpret_cast<Impl::GemmEx>(sym("cublasGemmEx"));
    d.status_string = reinterpret_cast<Impl::StatusString>(sym("cublasGetStatusString"));
    if (!create || !d.destroy || !d.set_stream || !d.gemm_ex) {
        d.why = "cuBLAS lacks cublasCreate_v2, cublasSetStream_v2 or cublasGemmEx";
        return;
    }
    if (const cublasStatus_t st = create(&d.handle); st != CUBLAS_STATUS_SUCCESS) {
        d.handle = nullptr;
        d.why = "cublasCreate failed: " + d.message(st);
    }
}

Gemm::~Gemm() {
    if (impl_->handle) impl_->destroy(impl_->handle);
    // The library stays loaded: cuBLAS may still hold callbacks with the runtime until the process ends.
}

bool Gemm::available() const { return impl_->handle != nullptr; }

const std::string& Gemm::why() const { return impl_->why; }

void Gemm::gemm(GemmMode mode, const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, bool accumulate,
                void* scratch, size_t scratch_bytes, cudaStream_t s, int64_t slice_elems) {
    Impl& d = *impl_;
    QUILL_CHECK(available() && mode != GemmMode::off, "gemm() without cuBLAS or in mode off");
    QUILL_CHECK(scratch_bytes >= gemm_scratch_bytes(mode, w.rows * w.cols, w.cols, n_tokens, slice_elems),
                "GEMM scratch of {} bytes is too small for {}x{} with {} tokens", scratch_bytes, w.rows, w.cols,
                n_tokens);
    QUILL_CHECK(w.rows < INT32_MAX && w.cols < INT32_MAX && n_tokens < INT32_MAX, "GEMM shape beyond int");
    auto ok = [&](cublasStatus_t st, const char* what) {
        if (st != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("cuBLAS error in {}: {}", what, d.message(st)));
    };
    ok(d.set_stream(d.handle, s), "cublasSetStream");
    const bool f16 = mode == GemmMode::f16;
    const cudaDataType ab = f16 ? CUDA_R_16F : CUDA_R_32F;
    const cublasComputeType_t compute = mode == GemmMode::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const size_t elem = f16 ? 2 : 4;
    auto* slice = static_cast<uint8_t*>(scratch);
    const void* b = x;
    if (f16) {  // the activations as F16, after the weight slice
        void* xh = slice + align_up(static_cast<size_t>(slice_size(w.rows * w.cols, w.cols, slice_elems)) * elem);
        float_to_f16(x, n_tokens * w.cols, xh, s);
        b = xh;
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const bool as_stored = direct(mode, w.type);
    const int64_t step = as_stored ? w.rows : slice_rows(w, slice_elems);
    for (int64_t r0 = 0; r0 < w.rows; r0 += step) {
        const int64_t r1 = std::min(w.rows, r0 + step);
        const void* a = w.data + static_cast<size_t>(r0) * w.row_bytes;
        if (!as_stored) {
            dequantize_rows(w, r0, r1, f16, slice, s);
            a = slice;
        }
        // Column-major view: C (rows x tokens, ld rows) = A^T (A: cols x rows, ld cols) B (cols x tokens, ld cols).
        ok(d.gemm_ex(d.handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(r1 - r0), static_cast<int>(n_tokens),
                     static_cast<int>(w.cols), &alpha, a, ab, static_cast<int>(w.cols), b, ab,
                     static_cast<int>(w.cols), &beta, y + r0, CUDA_R_32F, static_cast<int>(w.rows), compute,
                     CUBLAS_GEMM_DEFAULT),
           "cublasGemmEx");
    }
}

}  // namespace quill::cuda
