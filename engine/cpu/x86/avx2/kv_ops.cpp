// The attention primitives on AVX2 + F16C (kv_ops_impl.h and kv_ops_rows_impl.h, as namespace avx2).
#include "engine/cpu/x86/kv_ops_impl.h"
#include "engine/cpu/x86/kv_ops_rows_impl.h"
