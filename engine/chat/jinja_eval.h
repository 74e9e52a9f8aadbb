// Runs a parsed template: statements write to an output string, expressions compute Values in a chain of scopes
// (a for loop's body gets a fresh scope per iteration, a macro call one whose parent is where the macro was
// defined; if and set use the current one, as in Jinja2).
#pragma once

#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_lexer.h"
#include "engine/chat/template.h"

#include <string>

namespace quill::chat::jinja {

// vars: a dict of the template's variables. Returns the output with its untrusted bytes (those that came from
// untrusted strings of vars). Throws TemplateError (TemplateBudgetError when a budget of `options` runs out), and
// quill::Interrupted when options.cancel is raised.
Text render(const Source& source, const Body& body, const Value& vars, const RenderOptions& options);

}  // namespace quill::chat::jinja
