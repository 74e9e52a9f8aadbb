#include "engine/chat/jinja_text.h"

#include "engine/chat/jinja_lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

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

}  // namespace

Text text_lower(const Text& s, Budget& budget) {
    return map_chars(s, budget, [](uint32_t c, size_t, uint32_t) { return cp_lower(c); });
}

Text text_upper(const Text& s, Budget& budget) {
    return map_chars(s, budget, [](uint32_t c, size_t, uint32_t) { return cp_upper(c); });
}

Text py_strip(const Text& s, const std::string* chars, bool left, bool right, Budget& budget) {
    Chars cs(s.bytes, budget);
    // The characters to strip: ASCII in a table, the rest sorted (a long `chars` costs n log n, not n per test).
    std::array<bool, 128> ascii{};
    std::vector<uint32_t> others;
    if (chars) {
        budget.bytes(chars->size());
        for (size_t i = 0, n = 0; i < chars->size(); i += n) {
            const uint32_t c = utf8_next(*chars, i, n);
            if (c < 128) ascii[c] = true;
            else others.push_back(c);
        }
        budget.alloc(others.size() * sizeof(uint32_t));
        std::sort(others.begin(), others.end());
    }
    auto strip_it = [&](uint32_t c) {
        if (!chars) return is_py_space(c);
        return c < 128 ? ascii[c] : std::binary_search(others.begin(), others.end(), c);
    };
    size_t b = 0, e = cs.size();
    if (left)
        while (b < e && strip_it(cs.at(b))) ++b;
    if (right)
        while (e > b && strip_it(cs.at(e - 1))) --e;
    return sub(s, cs.offset(b), cs.offset(e), budget);
}

Text py_capitalize(const Text& s, Budget& budget) {
    return map_chars(s, budget, [](uint32_t c, size_t i, uint32_t) { return i == 0 ? cp_upper(c) : cp_lower(c); });
}

Text py_title(const Text& s, Budget& budget) {
    return map_chars(s, budget, [](uint32_t c, size_t i, uint32_t prev) {
        return i > 0 && is_cased(prev) ? cp_lower(c) : cp_upper(c);
    });
}

Text jinja_title(const Text& s, Budget& budget) {
    return map_chars(s, budget, [](uint32_t c, size_t i, uint32_t prev) {
        bool word_start = i == 0 || prev == '-' || prev == '(' || prev == '{' || prev == '[' || prev == '<' ||
                          is_py_space(prev);
        return word_start ? cp_upper(c) : cp_lower(c);
    });
}

Text html_escape(const Text& s, Budget& budget) {
    if (s.markup) return s;
    Text out;
    size_t run = 0;  // the start of the bytes not yet copied
    for (size_t i = 0; i < s.size(); ++i) {
        std::string_view entity;
        switch (s.bytes[i]) {
            case '&': entity = "&amp;"; break;
            case '<': entity = "&lt;"; break;
            case '>': entity = "&gt;"; break;
            case '"': entity = "&#34;"; break;
            case '\'': entity = "&#39;"; break;
            default: continue;
        }
        append(out, s, run, i, budget);
        append(out, entity, budget, s.untrusted_in(i, i + 1));
        run = i + 1;
    }
    append(out, s, run, s.size(), budget);
    out.markup = true;
    return out;
}

Text py_replace(const Text& s, const Text& old_s, const Text& new_s, int64_t count, Budget& budget) {
    Text out;
    if (old_s.bytes.empty()) {  // Python inserts new_s before every code point and at the end
        Chars cs(s.bytes, budget);
        for (size_t i = 0; i <= cs.size(); ++i) {
            if (count < 0 || static_cast<int64_t>(i) < count) append(out, new_s, budget);
            if (i < cs.size()) append(out, s, cs.offset(i), cs.offset(i + 1), budget);
        }
        return out;
    }
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t hit = find_bytes(s.bytes, old_s.bytes, pos, budget);
        if (hit == std::string::npos) break;
        append(out, s, pos, hit, budget);
        append(out, new_s, budget);
        pos = hit + old_s.size();
        ++done;
    }
    append(out, s, pos, s.size(), budget);
    return out;
}

namespace {

// Adds a part of a split result: a BudgetError before the list would pass its limit.
void add_part(std::vector<Text>& parts, const Text& s, size_t begin, size_t end, Budget& budget) {
    budget.check_list(parts.size() + 1);
    budget.alloc(sizeof(Value));
    parts.push_back(sub(s, begin, end, budget));
}

// Split at sep from the right: matches are found right to left (as Python's rsplit), by a forward search over the
// reversed text.
std::vector<Text> rsplit_at(const Text& s, const std::string& sep, int64_t maxsplit, Budget& budget) {
    const std::string rev(s.bytes.rbegin(), s.bytes.rend()), rsep(sep.rbegin(), sep.rend());
    budget.alloc(rev.size());
    const size_t n = s.size();
    std::vector<Text> parts;
    size_t end = n;  // the original text [0, end) is still to split
    size_t from = 0;  // the same place in rev
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = find_bytes(rev, rsep, from, budget);
        if (hit == std::string::npos) break;
        const size_t begin = n - hit;  // the original [n - hit - |sep|, n - hit) is the separator
        add_part(parts, s, begin, end, budget);
        end = begin - sep.size();
        from = hit + sep.size();
    }
    add_part(parts, s, 0, end, budget);
    std::reverse(parts.begin(), parts.end());
    return parts;
}

}  // namespace

std::vector<Text> py_split(const Text& s, const std::string* sep, int64_t maxsplit, bool from_right, Budget& budget) {
    std::vector<Text> parts;
    if (sep && sep->empty()) value_error("empty separator");
    if (sep) {
        if (from_right) return rsplit_at(s, *sep, maxsplit, budget);
        size_t pos = 0;
        while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
            size_t hit = find_bytes(s.bytes, *sep, pos, budget);
            if (hit == std::string::npos) break;
            add_part(parts, s, pos, hit, budget);
            pos = hit + sep->size();
        }
        add_part(parts, s, pos, s.size(), budget);
        return parts;
    }
    // Runs of whitespace; leading and trailing whitespace gives no empty parts.
    Chars cs(s.bytes, budget);
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < cs.size();) {
        while (i < cs.size() && is_py_space(cs.at(i))) ++i;
        if (i == cs.size()) break;
        size_t b = i;
        while (i < cs.size() && !is_py_space(cs.at(i))) ++i;
        budget.check_list(words.size() + 1);
        budget.alloc(sizeof(words[0]));
        words.emplace_back(b, i);
    }
    auto part = [&](size_t b, size_t e) { add_part(parts, s, cs.offset(b), cs.offset(e), budget); };
    if (maxsplit < 0 || static_cast<int64_t>(words.size()) <= maxsplit + 1) {
        for (auto [b, e] : words) part(b, e);
        return parts;
    }
    auto n = static_cast<size_t>(maxsplit);
    if (!from_right) {
        for (size_t i = 0; i < n; ++i) part(words[i].first, words[i].second);
        size_t e = cs.size();
        while (e > 0 && is_py_space(cs.at(e - 1))) --e;
        part(words[n].first, e);
        return parts;
    }
    size_t first_kept = words.size() - n;
    size_t b = 0;
    while (b < cs.size() && is_py_space(cs.at(b))) ++b;
    part(b, words[first_kept - 1].second);
    for (size_t i = first_kept; i < words.size(); ++i) part(words[i].first, words[i].second);
    return parts;
}

int64_t py_find(const std::string& s, const std::string& sub_s, Budget& budget) {
    size_t hit = find_bytes(s, sub_s, 0, budget);
    if (hit == std::string::npos) return -1;
    return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, hit)));
}

int64_t py_count(const std::string& s, const std::string& sub_s, Budget& budget) {
    budget.bytes(s.size());
    if (sub_s.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
    int64_t n = 0;
    for (size_t pos = find_bytes(s, sub_s, 0, budget); pos != std::string::npos;
         pos = find_bytes(s, sub_s, pos + sub_s.size(), budget))
        ++n;
    return n;
}

Text py_format(const Text& f_text, const CallArgs& args, Budget& budget) {
    const std::string& f = f_text.bytes;
    Text out;
    size_t auto_index = 0;
    size_t literal = 0;  // the format text [literal, i) is still to be copied
    for (size_t i = 0; i < f.size(); ++i) {
        char c = f[i];
        if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
            append(out, f_text, literal, i + 1, budget);
            literal = ++i + 1;
            continue;
        }
        if (c == '}') value_error("format: single '}' in format string");
        if (c != '{') continue;
        append(out, f_text, literal, i, budget);
        size_t close = f.find('}', i);
        if (close == std::string::npos) value_error("format: unmatched '{' in format string");
        std::string field = f.substr(i + 1, close - i - 1);
        if (field.find_first_of(":!.[") != std::string::npos) value_error("format: format specs are not supported");
        std::optional<Value> v;
        if (field.empty()) v = args.get(auto_index++, "\x01");
        else if (field.size() <= 9 && std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; }))
            v = args.get(std::stoul(field), "\x01");
        else v = args.get(SIZE_MAX, field);
        if (!v) value_error(fmt::format("format: no argument for field '{{{}}}'", clip(field)));
        append_str(out, *v, budget);
        i = close;
        literal = close + 1;
    }
    append(out, f_text, literal, f.size(), budget);
    return out;
}

}  // namespace quill::chat::jinja
