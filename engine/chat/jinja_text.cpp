#include "engine/chat/jinja_text.h"

#include <fmt/format.h>

#include <algorithm>

namespace quill::chat::jinja {

namespace {

bool is_py_space(uint32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}
// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (no length-changing cases such
// as German sharp s).
uint32_t cp_upper(uint32_t c) {
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return c;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7) || (c >= 0x3b1 && c <= 0x3cb && c != 0x3c2) || (c >= 0x430 && c <= 0x44f))
        return c - 32;
    if (c == 0xff) return 0x178;
    if (c == 0x3c2) return 0x3a3;
    if (c >= 0x450 && c <= 0x45f) return c - 80;
    bool pair_odd = (c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177) || (c >= 0x460 && c <= 0x481);
    if (pair_odd && (c & 1)) return c - 1;
    bool pair_even = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (pair_even && !(c & 1)) return c - 1;
    return c;
}

uint32_t cp_lower(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if ((c >= 0xc0 && c <= 0xde && c != 0xd7) || (c >= 0x391 && c <= 0x3ab && c != 0x3a2) || (c >= 0x410 && c <= 0x42f))
        return c + 32;
    if (c == 0x178) return 0xff;
    if (c >= 0x400 && c <= 0x40f) return c + 80;
    bool pair_odd = (c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177) || (c >= 0x460 && c <= 0x481);
    if (pair_odd && !(c & 1)) return c + 1;
    bool pair_even = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (pair_even && (c & 1)) return c + 1;
    return c;
}

bool is_cased(uint32_t c) {
    return cp_upper(c) != c || cp_lower(c) != c;
}

// Maps each code point: f(cp, index, previous cp).
template <class F>
std::string map_cps(std::string_view s, F f) {
    auto cps = utf8_decode(s);
    uint32_t prev = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
        uint32_t c = cps[i];
        cps[i] = f(c, i, prev);
        prev = c;
    }
    return utf8_encode(cps, 0, cps.size());
}

}  // namespace

std::string text_lower(std::string_view s) {
    return map_cps(s, [](uint32_t c, size_t, uint32_t) { return cp_lower(c); });
}

std::string text_upper(std::string_view s) {
    return map_cps(s, [](uint32_t c, size_t, uint32_t) { return cp_upper(c); });
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
    auto cps = utf8_decode(s);
    std::vector<uint32_t> set;
    if (chars) set = utf8_decode(*chars);
    auto strip_it = [&](uint32_t c) {
        return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
    };
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && strip_it(cps[b])) ++b;
    if (right)
        while (e > b && strip_it(cps[e - 1])) --e;
    return utf8_encode(cps, b, e);
}

std::string py_capitalize(std::string_view s) {
    return map_cps(s, [](uint32_t c, size_t i, uint32_t) { return i == 0 ? cp_upper(c) : cp_lower(c); });
}

std::string py_title(std::string_view s) {
    return map_cps(s, [](uint32_t c, size_t i, uint32_t prev) {
        return i > 0 && is_cased(prev) ? cp_lower(c) : cp_upper(c);
    });
}

std::string jinja_title(std::string_view s) {
    return map_cps(s, [](uint32_t c, size_t i, uint32_t prev) {
        bool word_start = i == 0 || prev == '-' || prev == '(' || prev == '{' || prev == '[' || prev == '<' ||
                          is_py_space(prev);
        return word_start ? cp_upper(c) : cp_lower(c);
    });
}

std::string py_replace(const std::string& s, const std::string& old_s, const std::string& new_s, int64_t count,
                       size_t max_size) {
    std::string out;
    auto check = [&] {
        if (out.size() > max_size) value_error(fmt::format("replace: result longer than {} bytes", max_size));
    };
    if (old_s.empty()) {  // Python inserts new_s before every code point and at the end
        auto cps = utf8_decode(s);
        for (size_t i = 0; i <= cps.size(); ++i) {
            if (count < 0 || static_cast<int64_t>(i) < count) out += new_s;
            if (i < cps.size()) out += utf8_encode(cps, i, i + 1);
            check();
        }
        return out;
    }
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t hit = s.find(old_s, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out += new_s;
        check();
        pos = hit + old_s.size();
        ++done;
    }
    out.append(s, pos, std::string::npos);
    check();
    return out;
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
    std::vector<std::string> parts;
    if (sep && sep->empty()) value_error("empty separator");
    if (sep) {
        if (!from_right) {
            size_t pos = 0;
            while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
                size_t hit = s.find(*sep, pos);
                if (hit == std::string::npos) break;
                parts.push_back(s.substr(pos, hit - pos));
                pos = hit + sep->size();
            }
            parts.push_back(s.substr(pos));
            return parts;
        }
        size_t end = s.size();
        while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
            if (end < sep->size()) break;
            size_t hit = s.rfind(*sep, end - sep->size());
            if (hit == std::string::npos) break;
            parts.push_back(s.substr(hit + sep->size(), end - hit - sep->size()));
            end = hit;
        }
        parts.push_back(s.substr(0, end));
        std::reverse(parts.begin(), parts.end());
        return parts;
    }
    // Runs of whitespace; leading and trailing whitespace gives no empty parts.
    auto cps = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < cps.size();) {
        while (i < cps.size() && is_py_space(cps[i])) ++i;
        if (i == cps.size()) break;
        size_t b = i;
        while (i < cps.size() && !is_py_space(cps[i])) ++i;
        words.emplace_back(b, i);
    }
    if (maxsplit < 0 || static_cast<int64_t>(words.size()) <= maxsplit + 1) {
        for (auto [b, e] : words) parts.push_back(utf8_encode(cps, b, e));
        return parts;
    }
    auto n = static_cast<size_t>(maxsplit);
    if (!from_right) {
        for (size_t i = 0; i < n; ++i) parts.push_back(utf8_encode(cps, words[i].first, words[i].second));
        size_t e = cps.size();
        while (e > 0 && is_py_space(cps[e - 1])) --e;
        parts.push_back(utf8_encode(cps, words[n].first, e));
        return parts;
    }
    size_t first_kept = words.size() - n;
    size_t b = 0;
    while (b < cps.size() && is_py_space(cps[b])) ++b;
    parts.push_back(utf8_encode(cps, b, words[first_kept - 1].second));
    for (size_t i = first_kept; i < words.size(); ++i) parts.push_back(utf8_encode(cps, words[i].first, words[i].second));
    return parts;
}

int64_t py_find(const std::string& s, const std::string& sub) {
    size_t hit = s.find(sub);
    if (hit == std::string::npos) return -1;
    return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, hit)));
}

int64_t py_count(const std::string& s, const std::string& sub) {
    if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return n;
}

std::string py_format(const std::string& f, const CallArgs& args) {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < f.size(); ++i) {
        char c = f[i];
        if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
            out += c;
            ++i;
            continue;
        }
        if (c == '}') value_error("format: single '}' in format string");
        if (c != '{') {
            out += c;
            continue;
        }
        size_t close = f.find('}', i);
        if (close == std::string::npos) value_error("format: unmatched '{' in format string");
        std::string field = f.substr(i + 1, close - i - 1);
        if (field.find_first_of(":!.[") != std::string::npos) value_error("format: format specs are not supported");
        std::optional<Value> v;
        if (field.empty()) v = args.get(auto_index++, "\x01");
        else if (field.size() <= 9 && std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; }))
            v = args.get(std::stoul(field), "\x01");
        else v = args.get(SIZE_MAX, field);
        if (!v) value_error(fmt::format("format: no argument for field '{{{}}}'", field));
        out += v->str();
        i = close;
    }
    return out;
}

}  // namespace quill::chat::jinja
