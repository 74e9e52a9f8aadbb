// The AVX2 kernel table: each file's kernels by weight type, made once.
#include "engine/cpu/x86/avx2/common.h"

#ifdef QUILL_AVX2_BUILT

namespace quill::cpu::avx2 {

const KernelTable& kernel_table() {
    static const KernelTable table = [] {
        KernelTable t{};
        add_float_rows_kernels(t);
        add_rows_kernels(t);
        add_lanes_kernels(t);
        add_scale16_kernels(t);
        return t;
    }();
    return table;
}

}  // namespace quill::cpu::avx2

#else  // built without AVX2 in the compiler flags

namespace quill::cpu::avx2 {
const KernelTable& kernel_table() {
    static const KernelTable none{};
    return none;
}
float quantize_block(const float* x, int8_t* q, int32_t* sums) { return generic::quantize_block(x, q, sums); }
bool quantize_blocks(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, const QuantizedActs&) { return false; }
bool quantize_rows(const float*, int64_t, int64_t, int64_t, const QuantizedActs&) { return false; }
void lay_out_lanes(const QuantizedActs& q, int64_t t0, int64_t t1, int64_t b0, int64_t b1) {
    generic::lay_out_lanes(q, t0, t1, b0, b1);
}
}  // namespace quill::cpu::avx2

#endif
