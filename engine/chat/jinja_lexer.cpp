#include "engine/chat/jinja_lexer.h"

#include "engine/chat/jinja_value.h"
#include "engine/chat/template_error.h"
#include "engine/io/escape.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace quill::chat::jinja {

namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
    return is_name_start(c) || is_digit(c);
}

std::string normalize_newlines(std::string_view in) {
    std::string out;
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '\r') {
            out += '\n';
            if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
        } else {
            out += in[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
    return out;
}

class Lexer {
public:
    explicit Lexer(const Source& source) : src_(source), s_(source.text()) {}

    std::vector<Token> run() {
        bool line_starting = true;
        while (pos_ < s_.size()) {
            size_t tag = find_tag(pos_);
            std::string text = s_.substr(pos_, tag - pos_);
            if (tag == s_.size()) {
                push_text(std::move(text), pos_);
                break;
            }
            char type = s_[tag + 1];  // '{', '%' or '#'
            char sign = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
            if (sign == '-') {
                text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
            } else if (sign != '+' && type != '{') {
                strip_line_start(text, line_starting);
            }
            push_text(std::move(text), pos_);
            size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
            if (size_t raw = type == '%' ? match_keyword_tag(body, "raw").first : 0; raw) {
                pos_ = lex_raw(tag, raw);
            } else if (type == '#') {
                pos_ = lex_comment(tag, body);
            } else {
                pos_ = lex_tag(tag, body, type == '{');
            }
            line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
        }
        tokens_.push_back(Token{TokKind::End, "", s_.size()});
        return std::move(tokens_);
    }

private:
    size_t find_tag(size_t from) const {
        for (size_t i = from; i + 1 < s_.size(); ++i)
            if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
        return s_.size();
    }

    // lstrip_blocks: spaces and tabs between the start of the line and the tag go.
    static void strip_line_start(std::string& text, bool line_starting) {
        size_t line = text.rfind('\n');
        size_t l_pos = line == std::string::npos ? 0 : line + 1;
        if (l_pos == 0 && !line_starting) return;
        if (l_pos == text.size()) return;
        for (size_t i = l_pos; i < text.size(); ++i)
            if (!is_space(text[i])) return;
        text.erase(l_pos);
    }

    void push_text(std::string text, size_t offset) {
        if (!text.empty()) tokens_.push_back(Token{TokKind::Text, std::move(text), offset});
    }

    // After a closing tag: `-` strips all following whitespace; trim_blocks drops one newline after %} and #}.
    size_t after_close(size_t end, char sign, bool is_block) const {
        if (sign == '-') {
            while (end < s_.size() && is_space(s_[end])) ++end;
        } else if (sign != '+' && is_block && end < s_.size() && s_[end] == '\n') {
            ++end;
        }
        return end;
    }

    // `{%[-+] keyword [-+]%}` from `body` (just after "{%" and its sign): where the tag ends (0 when it is not
    // that tag) and the sign before "%}".
    std::pair<size_t, char> match_keyword_tag(size_t body, std::string_view keyword) const {
        size_t i = body;
        while (i < s_.size() && is_space(s_[i])) ++i;
        if (s_.compare(i, keyword.size(), keyword) != 0) return {0, '\0'};
        i += keyword.size();
        if (i < s_.size() && is_name_char(s_[i])) return {0, '\0'};
        while (i < s_.size() && is_space(s_[i])) ++i;
        char sign = i < s_.size() && (s_[i] == '-' || s_[i] == '+') ? s_[i] : '\0';
        if (sign) ++i;
        if (s_.compare(i, 2, "%}") != 0) return {0, '\0'};
        return {i + 2, sign};
    }

    // {% raw %}...{% endraw %}: the text between is kept as is (whitespace control applies at its edges).
    size_t lex_raw(size_t tag, size_t raw_open_end) {
        size_t start = raw_open_end;
        if (s_[raw_open_end - 3] == '-')
            while (start < s_.size() && is_space(s_[start])) ++start;
        for (size_t at = s_.find("{%", start); at != std::string::npos; at = s_.find("{%", at + 2)) {
            char open_sign = at + 2 < s_.size() && (s_[at + 2] == '-' || s_[at + 2] == '+') ? s_[at + 2] : '\0';
            auto [end, close_sign] = match_keyword_tag(at + 2 + (open_sign ? 1 : 0), "endraw");
            if (!end) continue;
            std::string text = s_.substr(start, at - start);
            if (open_sign == '-') text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
            else if (open_sign != '+') strip_line_start(text, false);
            push_text(std::move(text), start);
            return after_close(end, close_sign, true);
        }
        src_.fail(tag, "missing '{% endraw %}' for '{% raw %}'");
    }

    size_t lex_comment(size_t tag, size_t body) const {
        size_t close = s_.find("#}", body);
        if (close == std::string::npos) src_.fail(tag, "missing end of comment tag '#}'");
        char sign = close > body ? s_[close - 1] : '\0';
        return after_close(close + 2, sign, true);
    }

    size_t lex_tag(size_t tag, size_t body, bool is_var) {
        tokens_.push_back(Token{is_var ? TokKind::VarBegin : TokKind::BlockBegin, "", tag});
        std::vector<char> brackets;
        const char close_char = is_var ? '}' : '%';
        size_t i = body;
        while (true) {
            while (i < s_.size() && is_space(s_[i])) ++i;
            if (i >= s_.size())
                src_.fail(tag, fmt::format("unclosed tag '{}', expected '{}}}'", is_var ? "{{" : "{%", close_char));
            if (brackets.empty()) {
                char sign = (s_[i] == '-' || s_[i] == '+') ? s_[i] : '\0';
                size_t at = i + (sign ? 1 : 0);
                if (at + 1 < s_.size() && s_[at] == close_char && s_[at + 1] == '}' && (sign != '+' || !is_var)) {
                    tokens_.push_back(Token{is_var ? TokKind::VarEnd : TokKind::BlockEnd, "", i});
                    return after_close(at + 2, sign, !is_var);
                }
            }
            i = lex_token(i, brackets);
        }
    }

    size_t lex_token(size_t i, std::vector<char>& brackets) {
        char c = s_[i];
        if (c == '\'' || c == '"') return lex_string(i);
        if (is_digit(c)) return lex_number(i);
        if (is_name_start(c)) {
            size_t j = i;
            while (j < s_.size() && is_name_char(s_[j])) ++j;
            if (j - i > kMaxName)
                src_.fail(i, fmt::format("a name longer than {} characters ('{}')", kMaxName, clip(s_.substr(i, j - i))));
            tokens_.push_back(Token{TokKind::Name, s_.substr(i, j - i), i});
            return j;
        }
        static constexpr std::string_view two_char[] = {"//", "**", "==", "!=", "<=", ">="};
        for (auto op : two_char) {
            if (s_.compare(i, 2, op) == 0) {
                tokens_.push_back(Token{TokKind::Op, std::string(op), i});
                return i + 2;
            }
        }
        if (std::string_view("+-*/%~<>()[]{},.:|=").find(c) == std::string_view::npos)
            src_.fail(i, fmt::format("unexpected character '{}' in tag", c));
        if (c == '(' || c == '[' || c == '{') {
            brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (c == ')' || c == ']' || c == '}') {
            if (brackets.empty()) src_.fail(i, fmt::format("unexpected '{}'", c));
            if (brackets.back() != c) src_.fail(i, fmt::format("unexpected '{}', expected '{}'", c, brackets.back()));
            brackets.pop_back();
        }
        tokens_.push_back(Token{TokKind::Op, std::string(1, c), i});
        return i + 1;
    }

    size_t lex_number(size_t i) {
        size_t j = i;
        while (j < s_.size() && is_digit(s_[j])) ++j;
        bool is_float = false;
        if (j + 1 < s_.size() && s_[j] == '.' && is_digit(s_[j + 1])) {
            is_float = true;
            for (++j; j < s_.size() && is_digit(s_[j]); ++j) {}
        }
        if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
            size_t k = j + 1;
            if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
            if (k < s_.size() && is_digit(s_[k])) {
                is_float = true;
                for (j = k; j < s_.size() && is_digit(s_[j]); ++j) {}
            }
        }
        Token t{is_float ? TokKind::Float : TokKind::Int, s_.substr(i, j - i), i};
        if (is_float) {
            t.float_value = std::strtod(t.text.c_str(), nullptr);
        } else {
            auto res = std::from_chars(t.text.data(), t.text.data() + t.text.size(), t.int_value);
            if (res.ec != std::errc()) src_.fail(i, fmt::format("integer literal {} is too large", clip(t.text)));
        }
        tokens_.push_back(std::move(t));
        return j;
    }

    // Python string escapes (\n \t \r \\ \' \" \xhh \uhhhh \Uhhhhhhhh, \0); an unknown escape keeps its backslash.
    size_t lex_string(size_t i) {
        char quote = s_[i];
        std::string value;
        size_t j = i + 1;
        while (true) {
            if (j >= s_.size()) src_.fail(i, "unterminated string literal");
            char c = s_[j];
            if (c == quote) break;
            if (c != '\\' || j + 1 >= s_.size()) {
                value += c;
                ++j;
                continue;
            }
            char e = s_[j + 1];
            j += 2;
            switch (e) {
                case 'n': value += '\n'; break;
                case 't': value += '\t'; break;
                case 'r': value += '\r'; break;
                case '0': value += '\0'; break;
                case 'a': value += '\a'; break;
                case 'b': value += '\b'; break;
                case 'f': value += '\f'; break;
                case 'v': value += '\v'; break;
                case '\\': case '\'': case '"': value += e; break;
                case '\n': break;  // line continuation
                case 'x': case 'u': case 'U': j = lex_hex_escape(e, j, value); break;
                default: value += '\\'; value += e;
            }
        }
        tokens_.push_back(Token{TokKind::String, std::move(value), i});
        return j + 1;
    }

    size_t lex_hex_escape(char kind, size_t j, std::string& value) const {
        size_t n = kind == 'x' ? 2 : kind == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
            char h = j + k < s_.size() ? s_[j + k] : '\0';
            int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) src_.fail(j - 2, fmt::format("truncated \\{} escape in string literal", kind));
            cp = cp * 16 + static_cast<uint32_t>(d);
        }
        if (cp > 0x10ffff) src_.fail(j - 2, "escape beyond U+10FFFF in string literal");
        append_utf8(value, cp);
        return j + n;
    }

    const Source& src_;
    const std::string& s_;
    size_t pos_ = 0;
    std::vector<Token> tokens_;
};

}  // namespace

Source::Source(std::string_view text, std::string name) : text_(normalize_newlines(text)), name_(std::move(name)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < text_.size(); ++i)
        if (text_[i] == '\n') line_starts_.push_back(i + 1);
}

std::string Source::where(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    size_t col = offset - line_starts_[line - 1] + 1;
    return fmt::format("{}:{}:{}", name_, line, col);
}

void Source::fail(size_t offset, const std::string& what) const {
    throw TemplateError(escape_for_terminal(fmt::format("{}: {}", where(offset), what)));
}

std::vector<Token> lex(const Source& source) {
    return Lexer(source).run();
}

std::string clip(std::string_view text) {
    if (text.size() <= kMaxQuoted) return std::string(text);
    size_t end = kMaxQuoted;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;  // not inside a character
    return std::string(text.substr(0, end)) + "...";
}

}  // namespace quill::chat::jinja
