// Tokens -> statements and expressions, with Jinja2's grammar and operator precedence (lowest first):
// `a if c else b`, or, and, not, comparisons (chained; in, not in), + -, ~, * / // %, **, unary - +,
// then postfix . [] () and filters | and tests `is`. Unknown tags, filters and tests are errors here, at parse time.
#pragma once

#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_lexer.h"

namespace quill::chat::jinja {

// Nesting of blocks and expressions the parser accepts (deeper is a TemplateError, never a stack overflow).
constexpr int kMaxParseDepth = 200;

// Throws TemplateError (name:line:col: what) on any syntax error.
Body parse(const Source& source);

}  // namespace quill::chat::jinja
