// Small UTF-8 helpers shared by the tokenizers, the detokenizer and the escaping of text for messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace quill::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the sequence a lead byte announces (1 for ASCII and for bytes that cannot lead a sequence).
inline size_t sequence_length(uint8_t lead) {
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    return 1;
}

// How a byte sequence starting at s[0] stands: a complete valid character of `length` bytes, an ill-formed
// prefix of `length` bytes (the maximal subpart to replace by one U+FFFD), or a valid but incomplete prefix.
struct Scan {
    enum Kind { valid, invalid, incomplete } kind;
    size_t length;
};

// Unicode Table 3-7 (well-formed UTF-8): the allowed range of the second byte depends on the lead.
inline Scan scan(std::string_view s) {
    const auto lead = static_cast<uint8_t>(s[0]);
    if (lead < 0x80) return {Scan::valid, 1};
    const size_t n = sequence_length(lead);
    if (n == 1) return {Scan::invalid, 1};  // continuation byte, C0, C1, F5..FF
    uint8_t lo = 0x80, hi = 0xBF;
    if (lead == 0xE0) lo = 0xA0;
    else if (lead == 0xED) hi = 0x9F;
    else if (lead == 0xF0) lo = 0x90;
    else if (lead == 0xF4) hi = 0x8F;
    for (size_t i = 1; i < n; ++i) {
        if (i >= s.size()) return {Scan::incomplete, i};
        const auto c = static_cast<uint8_t>(s[i]);
        if (c < lo || c > hi) return {Scan::invalid, i};
        lo = 0x80;
        hi = 0xBF;
    }
    return {Scan::valid, n};
}

inline bool is_valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        Scan r = scan(s.substr(i));
        if (r.kind != Scan::valid) return false;
        i += r.length;
    }
    return true;
}

inline void append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

// Decodes the character at s[i] (valid or not) and advances i; ill-formed bytes decode to U+FFFD one at a time.
inline uint32_t next(std::string_view s, size_t& i) {
    Scan r = scan(s.substr(i));
    if (r.kind != Scan::valid) {
        i += 1;
        return 0xFFFD;
    }
    const auto* p = reinterpret_cast<const uint8_t*>(s.data() + i);
    i += r.length;
    switch (r.length) {
        case 1: return p[0];
        case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
        case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        default: return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
    }
}

}  // namespace quill::utf8
