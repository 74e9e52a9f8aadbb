// JSON Schema to GBNF: the grammar of the compact-or-indented JSON texts that validate against a schema.
//
// Supported: type (one or a list; nullable: true adds null), properties with required and additionalProperties
// (false, true or a schema; when absent, extra properties only for an object schema without properties), items
// with minItems/maxItems, enum, const, strings with minLength/maxLength, pattern (regex.h) or format (date, time,
// date-time, uuid, email), integers with minimum/maximum/exclusiveMinimum/exclusiveMaximum, numbers with whole-number
// bounds, anyOf, oneOf (its branches must not overlap: they are generated as anyOf), allOf of one schema, $ref to
// "#" or a JSON pointer within the document ($defs, definitions; recursion allowed), true/false schemas, and the
// annotations (title, description, default, examples, $schema, $id, $comment, readOnly, writeOnly, deprecated).
// Any other keyword is a UsageError naming it and where it is; no keyword is ever ignored.
#pragma once

#include <string>
#include <string_view>

namespace quill::grammar {

// The GBNF of a schema given as JSON text (UsageError for text that is not JSON, nests deeper than 64 levels, or
// uses what is not supported).
std::string json_schema_to_gbnf(std::string_view schema_text);

// The GBNF of any JSON object (--format json, response_format json_object).
std::string json_object_gbnf();

}  // namespace quill::grammar
