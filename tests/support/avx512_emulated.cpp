// The AVX-512 kernels built on SIMDe (tests/support/avx512_emulated.h, tests/CMakeLists.txt): on a machine without AVX-512
// but with AVX2, installed at start-up as the avx512 family (cpu::set_avx512_kernels; isa_name then says
// "emulated"); a machine with AVX-512 runs the real ones.
#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul.h"

namespace quill::cpu::avx512_simde {
const KernelTable& kernel_table();
}

namespace {

struct InstallEmulatedAvx512 {
    InstallEmulatedAvx512() {
        using namespace quill::cpu;
        if (!isa_available(Isa::avx512) && isa_available(Isa::avx2)) set_avx512_kernels(&avx512_simde::kernel_table());
    }
} install_emulated_avx512;

}  // namespace
