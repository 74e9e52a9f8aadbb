#include "engine/io/escape.h"

#include "engine/io/utf8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace quill {

namespace {

// Appends the escaped form of s to out, a character at a time, while out stays within max_bytes; returns the bytes
// of s escaped. A backslash becomes \\ only with escape_backslash.
size_t escape_into(std::string& out, std::string_view s, size_t max_bytes, bool escape_backslash) {
    std::string ch_out;
    size_t i = 0;
    while (i < s.size()) {
        const utf8::Scan r = utf8::scan(s.substr(i));
        const size_t n = r.kind == utf8::Scan::valid ? r.length : std::max<size_t>(r.length, 1);
        const std::string_view ch = s.substr(i, n);
        const auto c0 = static_cast<unsigned char>(ch[0]);
        ch_out.clear();
        auto hex = [&] {
            for (unsigned char c : ch) ch_out += fmt::format("\\x{:02x}", c);
        };
        if (r.kind != utf8::Scan::valid) hex();
        else if (c0 == '\n') ch_out = "\\n";
        else if (c0 == '\t') ch_out = "\\t";
        else if (c0 == '\r') ch_out = "\\r";
        else if (c0 == '\\' && escape_backslash) ch_out = "\\\\";
        else if (c0 < 0x20 || c0 == 0x7f) hex();
        else if (c0 == 0xC2 && static_cast<unsigned char>(ch[1]) < 0xA0) hex();  // C1 controls U+0080..U+009F
        else ch_out = ch;
        if (out.size() + ch_out.size() > max_bytes) break;
        out += ch_out;
        i += n;
    }
    return i;
}

}  // namespace

std::string escape_for_terminal(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    escape_into(out, s, SIZE_MAX, true);
    return out;
}

std::string escape_line(std::string_view s, size_t max_bytes) {
    std::string out;
    const size_t done = escape_into(out, s, max_bytes, false);
    if (done < s.size()) out += fmt::format(" [... {} more bytes]", s.size() - done);
    return out;
}

}  // namespace quill
