// The attention primitives (kv_ops_impl.h) built with AVX-512 (CMakeLists.txt gives this folder the AVX-512 flags),
// as namespace avx512kv: there the decode tiles' scores and the mix also run sixteen lanes wide with 32 registers,
// each lane doing the AVX2 build's operations in the same order, so that both give the same bits (tested).
// attention.cpp picks it where the CPU has AVX-512.
#define QUILL_KV_NS avx512kv
// GCC 12's AVX-512 intrinsics initialize their pass-through operands with `__m512 __Y = __Y;`, which -Wuninitialized
// reports after inlining (GCC bug 105593, fixed in GCC 13; as in common.h).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "engine/cpu/x86/kv_ops_impl.h"
#include "engine/cpu/x86/kv_ops_rows_impl.h"
