// The AVX-512 float-weight kernels in the kernel table.
#include "engine/cpu/x86/avx512/float_rows.h"

#ifdef QUILL_AVX512_BUILT

namespace quill::cpu::QUILL_AVX512_NS {

void add_float_rows_kernels(KernelTable& table) {
    entry(table.rows, GgmlType::F32) = {float_rows<LoadF32>, false};
    entry(table.rows, GgmlType::F16) = {float_rows<LoadF16>, false};
    entry(table.rows, GgmlType::BF16) = {float_rows<LoadBF16>, false};
}

}  // namespace quill::cpu::QUILL_AVX512_NS

#endif
