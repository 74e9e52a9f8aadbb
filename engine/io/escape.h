// Text from files (model metadata, token pieces) made safe to print on a terminal: control bytes and escape
// sequences shown as escapes instead of being obeyed by the terminal.
#pragma once

#include <string>
#include <string_view>

namespace quill {

// Printable UTF-8 kept as is; \n \t \r and backslash as \n \t \r \\; other C0 controls, DEL, C1 controls
// (U+0080..U+009F, e.g. the CSI introducer U+009B) and bytes that are not valid UTF-8 as \xNN per byte.
std::string escape_for_terminal(std::string_view s);

}  // namespace quill
