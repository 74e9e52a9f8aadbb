// Owners of device memory and of page-locked host memory, freed with their object. Included by the backend's .cpp
// files.
#pragma once

#include "cuda/check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace quill::cuda {

// Device memory owned by one object; freed without checking (the context may already be gone at exit).
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(size_t bytes, const char* what) { allocate(bytes, what); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void allocate(size_t bytes, const char* what) {
        release();
        check(cudaMalloc(&p_, std::max<size_t>(bytes, 1)), what);
        n_ = bytes;
    }
    void release() {
        if (p_) cudaFree(p_);
        p_ = nullptr;
        n_ = 0;
    }
    uint8_t* get() const { return static_cast<uint8_t*>(p_); }
    size_t size() const { return n_; }

private:
    void* p_ = nullptr;
    size_t n_ = 0;
};

// Page-locked host memory, for copies the GPU can do by DMA while the CPU goes on.
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    ~PinnedBuffer() {
        if (p_) cudaFreeHost(p_);
    }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    void reserve(size_t bytes, const char* what) {
        if (bytes <= n_) return;
        if (p_) cudaFreeHost(p_);
        p_ = nullptr;
        n_ = 0;
        check(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault), what);
        n_ = bytes;
    }
    uint8_t* get() const { return static_cast<uint8_t*>(p_); }
    size_t size() const { return n_; }

private:
    void* p_ = nullptr;
    size_t n_ = 0;
};

}  // namespace quill::cuda
