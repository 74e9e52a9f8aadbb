// The check of a KV cache's size that every backend's constructor makes first.
#pragma once

#include <cstdint>

namespace quill {

// UsageError unless the context (positions per slot) and the slot count are at least 1.
void check_kv_size(int64_t n_ctx, int64_t n_slots);

}  // namespace quill
