// CUDA device discovery. Host-only header (no CUDA includes) so main.cpp and the tests can call it.
#pragma once

#include <cstddef>
#include <string>

namespace quill::cuda {

struct DeviceInfo {
    int count = 0;            // usable devices; 0 when there is no driver or no device
    std::string name;         // device 0
    size_t total_memory = 0;  // bytes, device 0
    int cc_major = 0, cc_minor = 0;
    std::string reason;  // why count is 0 ("no CUDA driver", "no CUDA device"), empty otherwise
};

// Never throws: a machine without a GPU, driver or CUDA libraries gets count 0 and a reason.
DeviceInfo probe();

}  // namespace quill::cuda
