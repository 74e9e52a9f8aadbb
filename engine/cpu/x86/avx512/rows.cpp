// The AVX-512 four-row kernels in the kernel table: Q6_K, and Q8_0 (its decode here, more tokens on lanes.h); and
// the sixteen-row kernels of IQ4_NL, IQ4_XS and MXFP4 (iq4_decoders.h), IQ3_XXS and IQ3_S (iq3_decoders.h),
// IQ2_XXS, IQ2_XS and IQ2_S (iq2_decoders.h) and IQ1_S and IQ1_M (iq1_decoders.h).
#include "engine/cpu/x86/avx512/rows.h"
#include "engine/error.h"
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

// The types with a scale per 16 values: decode (fewer than kRows16MinTokens tokens) on the AVX2 eight-row kernel of
// the type, whose signed vpmaddubsw dot outruns the sixteen-row decode path's two vpdpbusd chains per block here;
// both compute the same exact integer dot and then the same float steps, so a token's outputs have the same bits
// alone and in a batch. More tokens on the sixteen-row tiles.
template <typename Dec, GgmlType Type>
void half_scale_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    if (args.n_tokens < kRows16MinTokens) {
        const Kernel& k = avx2::kernel_table().rows[static_cast<uint32_t>(Type)];
        QUILL_CHECK(k.fn != nullptr, "the AVX2 kernel table lacks this type");
        return k.fn(args, r0, r1, scratch);
    }
    rows16<Dec>(args, r0, r1, scratch);
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
    entry(table.rows, GgmlType::IQ2_XS) = {half_scale_rows<Dec16Iq2Xs, GgmlType::IQ2_XS>, true};
    entry(table.rows, GgmlType::IQ2_S) = {half_scale_rows<Dec16Iq2S, GgmlType::IQ2_S>, true};
    entry(table.rows, GgmlType::IQ1_S) = {rows16<Dec16Iq1S>, true};
    entry(table.rows, GgmlType::IQ1_M) = {half_scale_rows<Dec16Iq1M, GgmlType::IQ1_M>, true};
}

}  // namespace quill::cpu::QUILL_AVX512_NS

#endif
