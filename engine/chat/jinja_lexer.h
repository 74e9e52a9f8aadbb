// Template text -> tokens, with Hugging Face's whitespace rules applied to the text between tags:
// trim_blocks (the newline after a block or comment tag is dropped), lstrip_blocks (spaces and tabs before a
// block or comment tag on its own line are dropped), `-` on a tag side strips all whitespace on that side, `+`
// keeps it. Newlines are normalized to "\n" and one trailing newline is dropped, as Jinja2 does by default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace quill::chat::jinja {

// The template's text and name, for positions in messages.
class Source {
public:
    Source(std::string_view text, std::string name);
    const std::string& text() const { return text_; }
    const std::string& name() const { return name_; }
    // "name:line:col" for a byte offset (line and column count from 1; the column counts bytes).
    std::string where(size_t offset) const;
    // Throws TemplateError "name:line:col: what", control bytes escaped (escape_for_terminal): template text and
    // values quoted in `what` go through clip() first.
    [[noreturn]] void fail(size_t offset, const std::string& what) const;

private:
    std::string text_;  // newlines normalized
    std::string name_;
    std::vector<size_t> line_starts_;
};

// Names (variables, attributes, macros) are at most this long: every lookup hashes the name, so a megabyte-long
// one would make each step of a render slow.
constexpr size_t kMaxName = 256;

// Template or input text quoted in an error message: at most kMaxQuoted bytes (cut at a character boundary),
// then "...".
constexpr size_t kMaxQuoted = 300;
std::string clip(std::string_view text);

enum class TokKind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
    TokKind kind = TokKind::End;
    std::string text;  // Text: the text; Name/Op: its spelling; String: the unescaped value
    size_t offset = 0;  // where it starts in the source
    int64_t int_value = 0;
    double float_value = 0.0;
};

// Throws TemplateError (with line:col) for unclosed tags and comments, bad strings and stray characters.
std::vector<Token> lex(const Source& source);

}  // namespace quill::chat::jinja
