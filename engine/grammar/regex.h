// Regular expressions (the subset JSON Schema patterns and --regex use) rewritten as GBNF expressions: literals,
// escapes (\d \w \s and their negations, \n \t \r \f \v \xHH \uHHHH, escaped punctuation), classes [...] and [^...],
// `.` (any character but a newline), groups (...) and (?:...), |, and the quantifiers * + ? {m} {m,} {m,n} (a lazy
// `?` after them changes nothing here). ^ and $ only at the ends. Lookarounds, backreferences and word boundaries
// are UsageError naming them.
#pragma once

#include <string>
#include <string_view>

namespace quill::grammar {

enum class RegexMode {
    whole_text,   // the whole text matches the pattern (--regex); ^ and $ change nothing
    json_string,  // the contents of a JSON string: characters written as JSON requires (" \ and controls escaped),
                  // and, as JSON Schema's `pattern`, a match anywhere unless anchored by ^ and $
};

// A GBNF expression (parenthesized) for the pattern. `json_char` names the GBNF rule of any one JSON string
// character (for the unanchored ends in json_string mode).
std::string regex_to_gbnf(std::string_view pattern, RegexMode mode, std::string_view json_char = "jchar");

// A GBNF string literal, quotes included, for text.
std::string gbnf_literal(std::string_view text);

}  // namespace quill::grammar
