// The AVX-512 four-row kernels in the kernel table: Q6_K, and Q8_0 (its decode here, more tokens on lanes.h); and
// the sixteen-row kernels of IQ4_NL, IQ4_XS and MXFP4 (iq4_decoders.h), IQ3_XXS and IQ3_S (iq3_decoders.h),
// IQ2_XXS, IQ2_XS and IQ2_S (iq2_decoders.h) and IQ1_S and IQ1_M (iq1_decoders.h).
#include "engine/cpu/x86/avx512/rows.h"
#include "engine/cpu/x86/avx512/iq1_decoders.h"
#include "engine/cpu/x86/avx512/iq2_decoders.h"
#include "engine/cpu/x86/avx512/iq3_decoders.h"
#include "engine/cpu/x86/avx512/iq4_decoders.h"
#include "engine/cpu/x86/avx512/lanes.h"

#ifdef QUILL_AVX512_BUILT

namespace quill::cpu::QUILL_AVX512_NS {

namespace {

// Q8_0: decode on the four-row kernels (exact blocks), more tokens sixteen rows at a time (the same arithmetic).
void q8_0_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    if (args.n_tokens < kRows16MinTokens) return quant_rows<DecQ8_0>(args, r0, r1, scratch);
    rows16<Dec16Q8_0>(args, r0, r1, scratch);
}

}  // namespace

void add_rows_kernels(KernelTable& table) {
    entry(table.rows, GgmlType::Q8_0) = {q8_0_rows, true};
    entry(table.rows, GgmlType::Q6_K) = {quant_rows<DecQ6_K>, true};
    entry(table.rows, GgmlType::IQ4_NL) = {rows16<Dec16Table<BlockIq4Nl>>, true};
    entry(table.rows, GgmlType::IQ4_XS) = {rows16<Dec16Iq4Xs>, true};
    entry(table.rows, GgmlType::MXFP4) = {rows16<Dec16Table<BlockMxfp4>>, true};
    entry(table.rows, GgmlType::IQ3_XXS) = {rows16<Dec16Iq3Xxs>, true};
    entry(table.rows, GgmlType::IQ3_S) = {rows16<Dec16Iq3S>, true};
    entry(table.rows, GgmlType::IQ2_XXS) = {rows16<Dec16Iq2Xxs>, true};
    entry(table.rows, GgmlType::IQ2_XS) = {rows16<Dec16Iq2Xs>, true};
    entry(table.rows, GgmlType::IQ2_S) = {rows16<Dec16Iq2S>, true};
    entry(table.rows, GgmlType::IQ1_S) = {rows16<Dec16Iq1S>, true};
    entry(table.rows, GgmlType::IQ1_M) = {rows16<Dec16Iq1M>, true};
}

}  // namespace quill::cpu::QUILL_AVX512_NS

#endif
