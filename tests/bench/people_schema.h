// The JSON schema the grammar benchmarks constrain with: nine properties, a nested object, a pattern, formats, an
// enum, a bounded number and a recursive $ref.
#pragma once

namespace quill::bench {

inline const char* const kPeopleSchema = R"({"type":"object","properties":{
 "name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
 "email":{"type":"string","format":"email"},"born":{"type":"string","format":"date"},
 "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
   "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["street","city"],"additionalProperties":false},
 "tags":{"type":"array","items":{"type":"string"},"maxItems":8},
 "status":{"enum":["active","inactive","banned"]},
 "score":{"type":"number","minimum":0,"maximum":100},
 "friends":{"type":"array","items":{"$ref":"#"}}},
 "required":["name","age","status"],"additionalProperties":false})";

}  // namespace quill::bench
