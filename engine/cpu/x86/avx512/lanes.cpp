// The AVX-512 sixteen-row kernels in the kernel table: the 4- and 5-bit types read from the file's rows.
#include "engine/cpu/x86/avx512/lanes.h"

#ifdef QUILL_AVX512_BUILT

namespace quill::cpu::QUILL_AVX512_NS {

void add_lanes_kernels(KernelTable& table) {
    entry(table.rows, GgmlType::Q4_0) = {rows16<Dec16Q4_0>, true};
    entry(table.rows, GgmlType::Q4_1) = {rows16<Dec16Q4_1>, true};
    entry(table.rows, GgmlType::Q5_0) = {rows16<Dec16Q5_0>, true};
    entry(table.rows, GgmlType::Q5_1) = {rows16<Dec16Q5_1>, true};
    entry(table.rows, GgmlType::Q4_K) = {rows16<Dec16Q4_K>, true};
    entry(table.rows, GgmlType::Q5_K) = {rows16<Dec16Q5_K>, true};
}

}  // namespace quill::cpu::QUILL_AVX512_NS

#endif
