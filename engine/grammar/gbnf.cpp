#include "engine/grammar/gbnf.h"

#include "engine/error.h"
#include "engine/io/utf8.h"

#include <unordered_map>

namespace quill::grammar {

namespace {

constexpr int kMaxNesting = 200;  // parentheses deep

struct Where {
    size_t line = 1, column = 1;
};

class GbnfParser {
public:
    GbnfParser(std::string_view text, std::string_view source) : s_(text), source_(source) {}

    Grammar parse() {
        for (;;) {
            skip_space(true);
            if (at_end()) break;
            parse_rule();
        }
        for (const auto& [rule, at] : first_use_)
            if (!b_.defined(rule))
                fail_at(where(at), fmt::format("rule '{}' is used but not defined", b_.name(rule)));
        if (!seen_root_) fail_at({}, "the grammar has no 'root' rule (the start rule)");
        try {
            return b_.finish("root");
        } catch (const UsageError& e) {
            throw UsageError(fmt::format("{}: {}", source_, e.what()));
        }
    }

private:
    bool at_end() const { return i_ >= s_.size(); }
    char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }

    Where where(size_t at) const {
        Where w;
        for (size_t k = 0; k < at && k < s_.size(); ++k) {
            if (s_[k] == '\n') {
                ++w.line;
                w.column = 1;
            } else if ((static_cast<uint8_t>(s_[k]) & 0xC0) != 0x80) {
                ++w.column;
            }
        }
        return w;
    }
    [[noreturn]] void fail_at(Where w, const std::string& what) const {
        throw UsageError(fmt::format("{}:{}:{}: {}", source_, w.line, w.column, what));
    }
    [[noreturn]] void fail(const std::string& what) const { fail_at(where(i_), what); }

    // Spaces, tabs and comments; newlines too when `newlines`.
    void skip_space(bool newlines) {
        while (!at_end()) {
            const char c = peek();
            if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                ++i_;
            } else if (c == '#') {
                while (!at_end() && peek() != '\n') ++i_;
            } else {
                break;
            }
        }
    }

    static bool name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }

    std::string_view parse_name() {
        const size_t start = i_;
        while (name_char(peek())) ++i_;
        if (i_ == start) fail("expected a rule name");
        return s_.substr(start, i_ - start);
    }

    void parse_rule() {
        const size_t start = i_;
        const std::string_view name = parse_name();
        skip_space(false);
        if (s_.substr(i_, 3) != "::=") fail(fmt::format("expected '::=' after rule name '{}'", name));
        i_ += 3;
        const uint32_t rule = b_.rule(name);
        if (b_.defined(rule)) fail_at(where(start), fmt::format("rule '{}' is defined twice", name));
        b_.mark_defined(rule);
        seen_root_ = seen_root_ || name == "root";
        skip_space(true);  // the body may start on the next line
        parse_alternatives(rule, 0);
        skip_space(false);
        if (!at_end() && peek() != '\n') fail(fmt::format("unexpected '{}' at the end of rule '{}'", peek(), name));
    }

    // Fills `rule` with `a | b | ...`; stops before ')' (nested) or the newline ending the rule.
    void parse_alternatives(uint32_t rule, int depth) {
        for (;;) {
            b_.add_alt(rule, parse_sequence(rule, depth));
            // a newline followed by a line starting with '|' continues the rule
            const size_t save = i_;
            skip_space(depth > 0);
            if (peek() == '\n') {
                skip_space(true);
                if (peek() != '|') {
                    i_ = save;
                    return;
                }
            }
            if (peek() != '|') {
                if (depth == 0) i_ = save;
                return;
            }
            ++i_;
            skip_space(true);
        }
    }

    std::vector<Elem> parse_sequence(uint32_t rule, int depth) {
        std::vector<Elem> seq;
        for (;;) {
            skip_space(depth > 0);
            const char c = peek();
            if (at_end() || c == '|' || c == ')' || c == '\n') break;
            const size_t item_start = i_;
            std::vector<Elem> item = parse_primary(rule, depth);
            skip_space(depth > 0);
            if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') {
                const Elem x = b_.group(item, b_.name(rule));
                item.clear();
                parse_repetition(item, x, item_start);
            }
            seq.insert(seq.end(), item.begin(), item.end());
        }
        return seq;
    }

    uint64_t parse_count() {
        const size_t start = i_;
        uint64_t n = 0;
        while (peek() >= '0' && peek() <= '9') {
            n = n * 10 + static_cast<uint64_t>(peek() - '0');
            if (n > kMaxGrammarElems) fail(fmt::format("repetition count is too large: at most {}", kMaxGrammarElems));
            ++i_;
        }
        if (i_ == start) fail("expected a number in the repetition");
        return n;
    }

    void parse_repetition(std::vector<Elem>& out, Elem x, size_t item_start) {
        const char c = peek();
        ++i_;
        uint64_t min = 0;
        int64_t max = -1;
        if (c == '+') {
            min = 1;
        } else if (c == '?') {
            max = 1;
        } else if (c == '{') {
            skip_space(false);
            if (peek() != ',') min = parse_count();
            skip_space(false);
            if (peek() == ',') {
                ++i_;
                skip_space(false);
                if (peek() != '}') max = static_cast<int64_t>(parse_count());
            } else {
                max = static_cast<int64_t>(min);
            }
            skip_space(false);
            if (peek() != '}') fail("expected '}' closing the repetition");
            ++i_;
            if (max >= 0 && static_cast<uint64_t>(max) < min)
                fail(fmt::format("repetition {{{},{}}}: the maximum is below the minimum", min, max));
        }
        try {
            b_.append_repeat(out, x, min, max);
        } catch (const UsageError& e) {
            fail_at(where(item_start), e.what());
        }
        skip_space(false);
        if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') {
            const Elem y = b_.group(out, "rep");
            out.clear();
            parse_repetition(out, y, item_start);
        }
    }

    // One codepoint of a literal or class, escapes decoded.
    uint32_t parse_char() {
        if (at_end()) fail("unexpected end of the grammar");
        if (peek() != '\\') {
            size_t k = i_;
            const uint32_t cp = utf8::next(s_, k);
            i_ = k;
            return cp;
        }
        ++i_;
        const char e = peek();
        ++i_;
        auto hex = [&](int n) {
            uint32_t v = 0;
            for (int k = 0; k < n; ++k) {
                const char h = peek();
                const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                            : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) fail(fmt::format("expected {} hexadecimal digits after \\{}", n, e));
                v = v * 16 + static_cast<uint32_t>(d);
                ++i_;
            }
            if (v > 0x10FFFF) fail(fmt::format("codepoint {:X} is beyond U+10FFFF", v));
            return v;
        };
        switch (e) {
            case 'n': return '\n';
            case 'r': return '\r';
            case 't': return '\t';
            case '0': return 0;
            case 'x': return hex(2);
            case 'u': return hex(4);
            case 'U': return hex(8);
            case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
                return static_cast<uint8_t>(e);
            default: i_ -= 2; fail(fmt::format("unknown escape '\\{}'", e));
        }
    }

    std::vector<Elem> parse_primary(uint32_t rule, int depth) {
        const char c = peek();
        std::vector<Elem> out;
        if (c == '"') {
            ++i_;
            std::string text;
            while (peek() != '"') {
                if (at_end() || peek() == '\n') fail("unterminated string literal (expected '\"')");
                utf8::append(text, parse_char());
            }
            ++i_;
            b_.append_literal(out, text);
            if (out.empty()) out.push_back(b_.group({}, "empty"));
        } else if (c == '[') {
            ++i_;
            const bool negated = peek() == '^';
            if (negated) ++i_;
            std::vector<CodepointRange> ranges;
            while (peek() != ']') {
                if (at_end() || peek() == '\n') fail("unterminated character class (expected ']')");
                const uint32_t lo = parse_char();
                uint32_t hi = lo;
                if (peek() == '-' && peek(1) != ']' && peek(1) != '\n') {
                    ++i_;
                    hi = parse_char();
                    if (hi < lo) fail(fmt::format("character range {:X}-{:X} is reversed", lo, hi));
                }
                ranges.emplace_back(lo, hi);
            }
            ++i_;
            out.push_back(b_.char_class(std::move(ranges), negated));
        } else if (c == '.') {
            ++i_;
            out.push_back(b_.char_class({}, true));
        } else if (c == '(') {
            if (depth >= kMaxNesting) fail(fmt::format("parentheses nested deeper than {}", kMaxNesting));
            ++i_;
            const uint32_t sub = b_.fresh_rule(b_.name(rule));
            skip_space(true);
            parse_alternatives(sub, depth + 1);
            skip_space(true);
            if (peek() != ')') fail("expected ')'");
            ++i_;
            out.push_back(GrammarBuilder::ref(sub));
        } else if (c == '<' || c == '!') {
            fail("token references (<[id]>, <text>, !<...>) are not supported");
        } else if (name_char(c)) {
            const size_t at = i_;
            const uint32_t r = b_.rule(parse_name());
            first_use_.emplace(r, at);
            out.push_back(GrammarBuilder::ref(r));
        } else {
            fail(fmt::format("unexpected '{}'", c));
        }
        return out;
    }

    std::string_view s_;
    std::string_view source_;
    size_t i_ = 0;
    GrammarBuilder b_;
    bool seen_root_ = false;
    std::unordered_map<uint32_t, size_t> first_use_;  // rule -> offset of its first use
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::string_view source) { return GbnfParser(text, source).parse(); }

}  // namespace quill::grammar
