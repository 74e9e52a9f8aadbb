#include "engine/error.h"

namespace quill {

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
    throw Error(fmt::format("internal check failed: {} ({}) at {}:{}", msg, expr, file, line));
}

}  // namespace quill
