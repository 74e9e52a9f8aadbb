#include "cuda/device.h"

#include <cuda_runtime.h>

#include <string>

namespace quill::cuda {

DeviceInfo probe() {
    DeviceInfo info;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        switch (err) {
            case cudaErrorInsufficientDriver: info.reason = "no CUDA driver"; break;
            case cudaErrorNoDevice: info.reason = "no CUDA device"; break;
            default: info.reason = std::string("CUDA unavailable: ") + cudaGetErrorString(err); break;
        }
        cudaGetLastError();  // clear the sticky-free error so later calls start clean
        return info;
    }
    if (count == 0) {
        info.reason = "no CUDA device";
        return info;
    }
    cudaDeviceProp prop{};
    err = cudaGetDeviceProperties(&prop, 0);
    if (err != cudaSuccess) {
        info.reason = std::string("CUDA device 0 unusable: ") + cudaGetErrorString(err);
        return info;
    }
    info.count = count;
    info.name = prop.name;
    info.total_memory = prop.totalGlobalMem;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    return info;
}

}  // namespace quill::cuda
