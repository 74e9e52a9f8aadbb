// Text from files (model metadata, token pieces) made safe to print on a terminal: control bytes and escape
// sequences shown as escapes instead of being obeyed by the terminal.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace quill {

// The most bytes of escaped text escape_line keeps of a message (an error, a warning, a name from a file).
inline constexpr size_t kMaxLineBytes = 1000;

// Printable UTF-8 kept as is; \n \t \r and backslash as \n \t \r \\; other C0 controls, DEL, C1 controls
// (U+0080..U+009F, e.g. the CSI introducer U+009B) and bytes that are not valid UTF-8 as \xNN per byte.
std::string escape_for_terminal(std::string_view s);

// Text for one line of stderr: escaped as escape_for_terminal does (so a newline or an escape sequence in it stays
// text) except that a backslash stays itself, so that a message whose parts were escaped where it was made (a
// template's error) is not escaped twice; cut after at most max_bytes of escaped text, between characters, with
// " [... N more bytes]" saying how much was cut.
std::string escape_line(std::string_view s, size_t max_bytes = kMaxLineBytes);

}  // namespace quill
