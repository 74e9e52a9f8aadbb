#include "engine/io/escape.h"

#include "tokenizer/utf8.h"

#include <fmt/format.h>

#include <algorithm>

namespace quill {

std::string escape_for_terminal(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    auto hex = [&](std::string_view bytes) {
        for (unsigned char c : bytes) out += fmt::format("\\x{:02x}", c);
    };
    for (size_t i = 0; i < s.size();) {
        const utf8::Scan r = utf8::scan(s.substr(i));
        const size_t n = r.kind == utf8::Scan::valid ? r.length : std::max<size_t>(r.length, 1);
        const std::string_view ch = s.substr(i, n);
        const auto c0 = static_cast<unsigned char>(ch[0]);
        if (r.kind != utf8::Scan::valid) hex(ch);
        else if (c0 == '\n') out += "\\n";
        else if (c0 == '\t') out += "\\t";
        else if (c0 == '\r') out += "\\r";
        else if (c0 == '\\') out += "\\\\";
        else if (c0 < 0x20 || c0 == 0x7f) hex(ch);
        else if (c0 == 0xC2 && static_cast<unsigned char>(ch[1]) < 0xA0) hex(ch);  // C1 controls U+0080..U+009F
        else out += ch;
        i += n;
    }
    return out;
}

}  // namespace quill
