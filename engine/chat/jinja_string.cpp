#include "engine/chat/jinja_string.h"

#include "engine/error.h"

#include <algorithm>
#include <cstring>

namespace quill::chat::jinja {

Text::Text(std::string b, bool all_untrusted) : bytes(std::move(b)) {
    if (all_untrusted && !bytes.empty()) untrusted.push_back({0, bytes.size()});
}

bool Text::untrusted_in(size_t begin, size_t end) const {
    if (untrusted.empty() || begin >= end) return false;
    // The first span that ends after begin.
    auto it = std::upper_bound(untrusted.begin(), untrusted.end(), begin,
                               [](size_t at, const Span& s) { return at < s.end; });
    return it != untrusted.end() && it->begin < end;
}

void Text::mark(size_t begin, size_t end) {
    if (begin >= end) return;
    if (!untrusted.empty()) {
        Span& last = untrusted.back();
        QUILL_CHECK(begin >= last.begin, "untrusted spans are marked in order ({} after {})", begin, last.begin);
        if (begin <= last.end) {
            last.end = std::max(last.end, end);
            return;
        }
    }
    untrusted.push_back({begin, end});
}

void append(Text& out, std::string_view bytes, Budget& budget, bool untrusted) {
    if (bytes.empty()) return;
    budget.check_string(out.size() + bytes.size());
    budget.alloc(bytes.size());
    const size_t at = out.size();
    out.bytes += bytes;
    if (untrusted) out.mark(at, out.size());
}

void append(Text& out, const Text& from, size_t begin, size_t end, Budget& budget) {
    if (begin >= end) return;
    budget.check_string(out.size() + (end - begin));
    budget.alloc(end - begin);
    const size_t at = out.size();
    out.bytes.append(from.bytes, begin, end - begin);
    auto it = std::upper_bound(from.untrusted.begin(), from.untrusted.end(), begin,
                               [](size_t pos, const Span& s) { return pos < s.end; });
    for (; it != from.untrusted.end() && it->begin < end; ++it)
        out.mark(at + std::max(it->begin, begin) - begin, at + std::min(it->end, end) - begin);
}

void append_repeated(Text& out, const Text& t, size_t times, Budget& budget) {
    if (t.size() == 0 || times == 0) return;
    budget.check_string(times > budget.max_string() / t.size() ? budget.max_string() + 1 : out.size() + t.size() * times);
    budget.alloc(t.size() * times);
    const size_t start = out.size(), total = t.size() * times;
    out.bytes.reserve(start + total);
    out.bytes += t.bytes;
    while (out.size() - start < total)  // doubling: a few large copies rather than many small ones
        out.bytes.append(out.bytes, start, std::min(out.size() - start, total - (out.size() - start)));
    for (size_t k = 0; k < times && t.any_untrusted(); ++k)
        for (const Span& span : t.untrusted) out.mark(start + k * t.size() + span.begin, start + k * t.size() + span.end);
}

Text sub(const Text& t, size_t begin, size_t end, Budget& budget) {
    Text out;
    append(out, t, begin, end, budget);
    return out;
}

uint32_t utf8_next(std::string_view s, size_t i, size_t& length) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (!ok) {
        length = 1;
        return 0x80000000u | c;  // a stray byte, kept as itself
    }
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    length = n;
    return cp;
}

Chars::Chars(std::string_view s, Budget& budget) : s_(s) {
    budget.bytes(s.size());
    ascii_ = std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
    if (ascii_) {
        n_ = s.size();
        return;
    }
    size_t count = 0;
    for (size_t i = 0, len = 0; i < s.size(); i += len, ++count) utf8_next(s, i, len);
    budget.alloc((count + 1) * sizeof(size_t));
    offsets_.reserve(count + 1);
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
        offsets_.push_back(i);
        utf8_next(s, i, len);
    }
    offsets_.push_back(s.size());
    n_ = count;
}

uint32_t Chars::at(size_t i) const {
    if (ascii_) return static_cast<unsigned char>(s_[i]);
    size_t len = 0;
    return utf8_next(s_, offsets_[i], len);
}

size_t find_bytes(std::string_view hay, std::string_view needle, size_t from, Budget& budget) {
    if (from > hay.size()) return std::string_view::npos;
    budget.bytes(hay.size() - from);
    if (needle.empty()) return from;
    // glibc's memmem is linear in the worst case (two-way matching for long needles), unlike std::string::find.
    const void* hit = ::memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
    if (!hit) return std::string_view::npos;
    return static_cast<size_t>(static_cast<const char*>(hit) - hay.data());
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    for (size_t i = 0, n = 0; i < s.size(); i += n) cps.push_back(utf8_next(s, i, n));
    return cps;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp & 0x80000000u) {
        out += static_cast<char>(cp & 0xff);
    } else if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

size_t utf8_length(std::string_view s) {
    if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return s.size();
    size_t count = 0;
    for (size_t i = 0, n = 0; i < s.size(); i += n, ++count) utf8_next(s, i, n);
    return count;
}

}  // namespace quill::chat::jinja
