// The AVX-512 kernel table: each file's kernels by weight type, made once.
#include "engine/cpu/x86/avx512/common.h"

#ifdef QUILL_AVX512_BUILT

namespace quill::cpu::QUILL_AVX512_NS {

const KernelTable& kernel_table() {
    static const KernelTable table = [] {
        KernelTable t{};
        add_float_rows_kernels(t);
        add_rows_kernels(t);
        add_lanes_kernels(t);
#ifndef QUILL_AVX512_EMULATED  // (the tests' SIMDe build has the kernels over the file's rows alone)
        add_pack_kernels(t);
        add_amx_kernels(t);
#endif
        return t;
    }();
    return table;
}

}  // namespace quill::cpu::QUILL_AVX512_NS

#else  // built without AVX-512 support in the compiler flags

namespace quill::cpu::avx512 {
const KernelTable& kernel_table() {
    static const KernelTable none{};
    return none;
}
bool quantize_rows(const float*, int64_t, int64_t, int64_t, const QuantizedActs&) { return false; }
bool greedy_search(const float*, int64_t, int64_t, int64_t*, bool*) { return false; }
bool quantize_blocks(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, const QuantizedActs&) { return false; }
bool amx_built() { return false; }
bool pack_tiles(const WeightMatrix&, void*, int64_t, int64_t) { return false; }
bool pair_tiles(const float*, int64_t, int64_t, bool, const PairActs&, uint16_t*, int64_t, int64_t) { return false; }
}  // namespace quill::cpu::avx512

#endif
