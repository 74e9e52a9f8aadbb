#include "engine/grammar/regex.h"

#include "engine/error.h"
#include "engine/grammar/grammar.h"
#include "engine/io/utf8.h"

#include <algorithm>
#include <vector>

namespace quill::grammar {

namespace {

constexpr int kMaxNesting = 100;

// A GBNF escape for one codepoint inside a literal or a class.
std::string escape_cp(uint32_t cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == ' ' ||
        cp == '_' || cp == ',' || cp == ':' || cp == '.' || cp == '@' || cp == '!' || cp == '#' || cp == '%' ||
        cp == '&' || cp == '=' || cp == '~' || cp == '`' || cp == ';' || cp == '<' || cp == '>' || cp == '/')
        return std::string(1, static_cast<char>(cp));
    if (cp < 0x100) return fmt::format("\\x{:02X}", cp);
    if (cp < 0x10000) return fmt::format("\\u{:04X}", cp);
    return fmt::format("\\U{:08X}", cp);
}

std::string gbnf_class(const std::vector<CodepointRange>& r) {
    std::string out = "[";
    for (auto [lo, hi] : r) {
        out += escape_cp(lo);
        if (hi != lo) {
            out += '-';
            out += escape_cp(hi);
        }
    }
    return out + "]";
}

// Sorted and merged; the complement over U+0000..U+10FFFF when negated.
std::vector<CodepointRange> normalized(std::vector<CodepointRange> r, bool negated) {
    std::sort(r.begin(), r.end());
    std::vector<CodepointRange> m;
    for (auto [lo, hi] : r) {
        if (!m.empty() && lo <= m.back().second + 1)
            m.back().second = std::max(m.back().second, hi);
        else
            m.emplace_back(lo, hi);
    }
    if (!negated) return m;
    std::vector<CodepointRange> c;
    uint32_t next = 0;
    for (auto [lo, hi] : m) {
        if (lo > next) c.emplace_back(next, lo - 1);
        next = hi + 1;
    }
    if (next <= 0x10FFFF) c.emplace_back(next, 0x10FFFF);
    return c;
}

class RegexParser {
public:
    RegexParser(std::string_view p, RegexMode mode, std::string_view json_char)
        : p_(p), mode_(mode), json_char_(json_char) {}

    std::string parse() {
        bool start_anchor = false, end_anchor = false;
        if (peek() == '^') {
            ++i_;
            start_anchor = true;
        }
        std::string body = parse_alternatives(0);
        if (peek() == '$') {
            ++i_;
            end_anchor = true;
        }
        if (i_ < p_.size()) fail(peek() == ')' ? "unbalanced ')'" : fmt::format("unexpected '{}'", peek()));
        if (mode_ == RegexMode::json_string) {
            const std::string any = fmt::format("{}*", json_char_);
            body = (start_anchor ? "" : any + " ") + body + (end_anchor ? "" : " " + any);
        }
        return "(" + body + ")";
    }

private:
    char peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : '\0'; }
    bool at_end() const { return i_ >= p_.size(); }
    [[noreturn]] void fail(const std::string& what) const {
        throw UsageError(fmt::format("regex '{}': {} (at offset {})", p_, what, i_));
    }

    std::string parse_alternatives(int depth) {
        std::vector<std::string> alts{parse_sequence(depth)};
        while (peek() == '|') {
            ++i_;
            alts.push_back(parse_sequence(depth));
        }
        if (alts.size() == 1) return alts[0];
        std::string out = "(";
        for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
        return out + ")";
    }

    std::string parse_sequence(int depth) {
        std::string out;
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '$' && i_ + 1 == p_.size() && depth == 0) break;
            std::string atom = parse_atom(depth);
            atom += parse_quantifier();
            out += (out.empty() ? "" : " ") + atom;
        }
        return out.empty() ? "\"\"" : out;
    }

    std::string parse_quantifier() {
        std::string q;
        const char c = peek();
        if (c == '*' || c == '+' || c == '?') {
            ++i_;
            q = std::string(1, c);
        } else if (c == '{' && (peek(1) >= '0' && peek(1) <= '9')) {
            const size_t start = i_;
            while (!at_end() && peek() != '}') ++i_;
            if (at_end()) fail("unterminated {m,n}");
            ++i_;
            q = std::string(p_.substr(start, i_ - start));
        } else {
            return "";
        }
        if (peek() == '?') ++i_;  // lazy: the same language
        if (peek() == '+') fail("possessive quantifiers are not supported");
        if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') fail("a quantifier follows a quantifier");
        return q;
    }

    // One codepoint as the text must hold it: itself, or its JSON escape in a JSON string.
    std::string literal(uint32_t cp) const {
        if (mode_ == RegexMode::json_string && (cp < 0x20 || cp == '"' || cp == '\\'))
            return gbnf_literal(json_escape(cp));
        std::string raw;
        utf8::append(raw, cp);
        return gbnf_literal(raw);
    }

    static std::string json_escape(uint32_t cp) {
        switch (cp) {
            case '"': return "\\\"";
            case '\\': return "\\\\";
            case '\n': return "\\n";
            case '\t': return "\\t";
            case '\r': return "\\r";
            case '\b': return "\\b";
            case '\f': return "\\f";
            default: return fmt::format("\\u{:04x}", cp);
        }
    }

    // A set of codepoints as a GBNF expression; in a JSON string, the ones JSON escapes become their escapes.
    std::string char_set(const std::vector<CodepointRange>& r) const {
        if (r.empty()) fail("a character class that matches nothing");
        if (mode_ == RegexMode::whole_text) return gbnf_class(r);
        std::vector<CodepointRange> plain;
        std::vector<std::string> escapes;
        auto has = [&](uint32_t cp) {
            return std::any_of(r.begin(), r.end(),
                               [&](const CodepointRange& x) { return x.first <= cp && cp <= x.second; });
        };
        for (uint32_t cp = 0; cp < 0x20; ++cp)
            if (has(cp)) escapes.push_back(literal(cp));
        if (has('"')) escapes.push_back(literal('"'));
        if (has('\\')) escapes.push_back(literal('\\'));
        for (auto [lo, hi] : r) {
            // split around 0x00-0x1F, '"' (0x22) and '\\' (0x5C)
            for (auto [a, b] : std::vector<CodepointRange>{{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}) {
                const uint32_t x = std::max(lo, a), y = std::min(hi, b);
                if (x <= y) plain.emplace_back(x, y);
            }
        }
        std::string out;
        if (!plain.empty()) out = gbnf_class(plain);
        for (const auto& e : escapes) out += (out.empty() ? "" : " | ") + e;
        return escapes.empty() ? out : "(" + out + ")";
    }

    static std::vector<CodepointRange> class_escape(char e, bool& ok) {
        ok = true;
        const std::vector<CodepointRange> digit{{'0', '9'}};
        const std::vector<CodepointRange> word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
        const std::vector<CodepointRange> space{{'\t', '\r'}, {' ', ' '}};
        switch (e) {
            case 'd': return digit;
            case 'w': return word;
            case 's': return space;
            case 'D': return normalized(digit, true);
            case 'W': return normalized(word, true);
            case 'S': return normalized(space, true);
            default: ok = false; return {};
        }
    }

    uint32_t hex(int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
            const char h = peek();
            const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) fail(fmt::format("expected {} hexadecimal digits", n));
            v = v * 16 + static_cast<uint32_t>(d);
            ++i_;
        }
        return v;
    }

    // After a backslash: a single codepoint escape.
    uint32_t escaped_char() {
        const char e = peek();
        ++i_;
        switch (e) {
            case 'n': return '\n';
            case 't': return '\t';
            case 'r': return '\r';
            case 'f': return '\f';
            case 'v': return '\v';
            case '0': return 0;
            case 'x': return hex(2);
            case 'u': return hex(4);
            default: break;
        }
        if (e == 'b' || e == 'B') fail("word boundaries (\\b, \\B) are not supported");
        if (e >= '1' && e <= '9') fail("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || e == '\0')
            fail(fmt::format("unknown escape '\\{}'", e));
        return static_cast<uint8_t>(e);
    }

    uint32_t next_cp() {
        size_t k = i_;
        const uint32_t cp = utf8::next(p_, k);
        i_ = k;
        return cp;
    }

    std::string parse_class() {
        ++i_;  // '['
        const bool negated = peek() == '^';
        if (negated) ++i_;
        std::vector<CodepointRange> r;
        bool first = true;
        while (first || peek() != ']') {
            if (at_end()) fail("unterminated character class");
            first = false;
            uint32_t lo;
            if (peek() == '\\') {
                ++i_;
                bool ok = false;
                const auto cls = class_escape(peek(), ok);
                if (ok) {
                    ++i_;
                    r.insert(r.end(), cls.begin(), cls.end());
                    continue;
                }
                lo = escaped_char();
            } else {
                lo = next_cp();
            }
            uint32_t hi = lo;
            if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
                ++i_;
                if (peek() == '\\') {
                    ++i_;
                    hi = escaped_char();
                } else {
                    hi = next_cp();
                }
                if (hi < lo) fail("a reversed range in a character class");
            }
            r.emplace_back(lo, hi);
        }
        ++i_;  // ']'
        return char_set(normalized(r, negated));
    }

    std::string parse_atom(int depth) {
        const char c = peek();
        if (c == '(') {
            if (depth >= kMaxNesting) fail(fmt::format("groups nested deeper than {}", kMaxNesting));
            ++i_;
            if (peek() == '?') {
                if (peek(1) != ':') fail("lookarounds and named groups are not supported");
                i_ += 2;
            }
            std::string inner = parse_alternatives(depth + 1);
            if (peek() != ')') fail("expected ')'");
            ++i_;
            return "(" + inner + ")";
        }
        if (c == '[') return parse_class();
        if (c == '.') {
            ++i_;
            return char_set(normalized({{'\n', '\n'}}, true));
        }
        if (c == '\\') {
            ++i_;
            bool ok = false;
            const auto cls = class_escape(peek(), ok);
            if (ok) {
                ++i_;
                return char_set(normalized(cls, false));
            }
            return literal(escaped_char());
        }
        if (c == '^' || c == '$') fail("^ and $ are supported only at the ends of the pattern");
        if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing before it");
        return literal(next_cp());
    }

    std::string_view p_;
    RegexMode mode_;
    std::string_view json_char_;
    size_t i_ = 0;
};

}  // namespace

std::string gbnf_literal(std::string_view text) {
    std::string out = "\"";
    for (size_t i = 0; i < text.size();) {
        const auto b = static_cast<uint8_t>(text[i]);
        if (b >= 0x80) {  // UTF-8 passes through as it is
            out += text[i++];
            continue;
        }
        ++i;
        if (b == '"') out += "\\\"";
        else if (b == '\\') out += "\\\\";
        else if (b < 0x20 || b == 0x7F) out += fmt::format("\\x{:02X}", b);
        else out += static_cast<char>(b);
    }
    return out + "\"";
}

std::string regex_to_gbnf(std::string_view pattern, RegexMode mode, std::string_view json_char) {
    return RegexParser(pattern, mode, json_char).parse();
}

}  // namespace quill::grammar
