#include "engine/io/cancel.h"

#include "engine/error.h"

#include <string>

namespace quill {

void throw_interrupted(const char* doing) { throw Interrupted(std::string("interrupted while ") + doing); }

}  // namespace quill
