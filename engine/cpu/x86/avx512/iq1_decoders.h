// Sixteen-row decoders of IQ1_S and IQ1_M for the AVX-512 kernels: each step is two eight-row steps of the AVX2
// decoders (x86/avx2/iq1_decoders.h, values plus 128 for vpdpbusd), so the decode path (their Dec8) and the
// sixteen-row tiles give each row the same bytes and scales. IQ1_M's scales per 16 elements go as IQ2_XS's
// (Dec16Half). Included after decoders.h by the kernel files only.
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "engine/cpu/x86/avx2/iq1_decoders.h"
#include "engine/cpu/x86/avx512/decoders.h"
#include "engine/cpu/x86/avx512/iq2_decoders.h"

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

using Dec16Iq1S = Dec16Joined<avx2::Dec8Iq1S<true>>;
using Dec16Iq1M = Dec16Half<avx2::Dec8Iq1M<true>>;

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS
