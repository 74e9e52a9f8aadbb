#include "engine/runtime/backend.h"

#include <algorithm>

namespace quill {

int Batch::n_logits() const {
    return static_cast<int>(std::count_if(tokens.begin(), tokens.end(), [](const BatchToken& t) { return t.logits; }));
}

std::string_view kv_type_name(KvType t) { return t == KvType::f16 ? "f16" : "f32"; }

}  // namespace quill
