// GBNF, llama.cpp's grammar format (grammars/README.md there), parsed into a byte-level Grammar: rules
// `name ::= alternatives`, "literals" and [character classes] with \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH escapes,
// `.` for any character, ( ) groups, | alternatives, the repetitions * + ? {m} {m,} {m,n} {,n}, # comments. A rule
// ends at a newline unless inside parentheses or after `::=` or `|` (a line starting with `|` also continues it).
// `root` is the start rule. Token references (<[id]>, <text>) are not supported.
#pragma once

#include "engine/grammar/grammar.h"

#include <string_view>

namespace quill::grammar {

// UsageError "SOURCE:LINE:COLUMN: what was expected" on a syntax error, an undefined rule (at its first use), or a
// grammar finish() rejects (left recursion, a rule that never ends, too large).
Grammar parse_gbnf(std::string_view text, std::string_view source = "grammar");

}  // namespace quill::grammar
