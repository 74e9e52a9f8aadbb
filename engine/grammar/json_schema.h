// JSON Schema to GBNF: the grammar of the compact-or-indented JSON texts that validate against a schema.
//
// Supported: type (one or a list; nullable: true adds null), properties with required and additionalProperties
// (false, true or a schema; when absent, extra properties only for an object schema without properties), items
// with minItems/maxItems, enum, const, strings with minLength/maxLength, pattern (regex.h) or format (date, time,
// date-time, uuid, email), integers with minimum/maximum/exclusiveMinimum/exclusiveMaximum, numbers with whole-number
// bounds, anyOf, oneOf, allOf of one schema, $ref to
// "#" or a JSON pointer within the document ($defs, definitions; recursion allowed), true/false schemas, and the
// annotations (title, description, default, examples, $schema, $id, $comment, readOnly, writeOnly, deprecated).
// Any other keyword is a UsageError naming it and where it is; no keyword is ever ignored.
//
// oneOf is generated as anyOf, which is exact when no value can match two of its alternatives: alternatives of
// different types (integer and number overlap), finite const/enum lists with no value in common, or objects that a
// required property tells apart (its const or enum values differ, or one alternative forbids it with
// additionalProperties: false). Any other oneOf stays anyOf, and the conversion says so in a warning.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/io/cancel.h"

#include <string>
#include <string_view>
#include <vector>

namespace quill::grammar {

// The GBNF of a schema given as JSON text (UsageError for text that is not JSON, nests deeper than 64 levels, or
// uses what is not supported). warnings, when given, gets a sentence for each relaxation (a oneOf whose
// alternatives may overlap, generated as anyOf), naming where it is. cancel: polled once a rule (Interrupted).
std::string json_schema_to_gbnf(std::string_view schema_text, std::vector<std::string>* warnings = nullptr,
                                CancelFlag cancel = nullptr);

// One value of a grammar that json_schema_rules makes: rule `rule` takes the JSON texts valid against the schema at
// JSON pointer `pointer` ("#": the whole document) of `document`, whose $refs resolve within `document`. `where`
// names it in messages.
struct SchemaRule {
    std::string rule;
    const nlohmann::ordered_json* document = nullptr;
    std::string pointer = "#";
    std::string where;
};

// The GBNF rules of several schemas, for a grammar that uses them within rules of its own (no root rule): one rule
// per SchemaRule, named as it says, and the rules they use, whose names have letters, digits and "-" only, so that
// a caller's rule names with "_" never meet them. UsageError as json_schema_to_gbnf's, after `where`.
std::string json_schema_rules(const std::vector<SchemaRule>& schemas, std::vector<std::string>* warnings = nullptr);

// The GBNF of any JSON object (--format json, response_format json_object).
std::string json_object_gbnf();

}  // namespace quill::grammar
