// Whether a oneOf is exact as anyOf: no JSON value matches two of its alternatives. Decided from what tells real
// schemas' alternatives apart: their types (integer and number overlap: 1 is both), finite const/enum lists with no
// value in common, or, for objects, a required property whose const or enum values differ, or one that an
// alternative forbids (additionalProperties: false and not in its properties). $ref, allOf of one schema, nested
// anyOf/oneOf and nullable are followed. false means "may overlap", not "overlaps".
#pragma once

#include <nlohmann/json.hpp>

namespace quill::grammar {

// alternatives: the oneOf array, within the schema document root (for $ref).
bool alternatives_disjoint(const nlohmann::ordered_json& root, const nlohmann::ordered_json& alternatives);

}  // namespace quill::grammar
