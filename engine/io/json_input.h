// JSON read from files and stdin (batch requests, the output --resume scans, conversation files): parsed with a
// nesting limit, so that no document can build a tree deep enough for recursive code (nlohmann's copies and dumps,
// the template engine's conversions) to overflow the stack. One bracket per level makes depth cheap for an attacker:
// 300,000 levels are 600 KB.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace quill {

// The most arrays and objects a document may nest, one in another (a chat message is 3 levels deep in a batch
// request; OpenAI tool schemas rarely pass 10).
inline constexpr int kMaxJsonDepth = 64;

// One JSON document from input. `what` names it in messages ("input line 7", a file path). UsageError
// "<what>: not valid JSON at <where>: <reason>" or "<what>: JSON nested deeper than 64 levels at <where>", where
// <where> is "line L, column C" ("column C" for text of one line); bytes that are not printable UTF-8 in the reason
// are escaped. The tree returned is at most kMaxJsonDepth deep.
nlohmann::json parse_untrusted_json(std::string_view text, std::string_view what);
// The same with objects in the document's key order (what a template printing them with tojson must show).
nlohmann::ordered_json parse_untrusted_ordered_json(std::string_view text, std::string_view what);
// The same where no message is needed (telling a format apart, scanning for records): nullopt instead of the error,
// and no exception thrown.
std::optional<nlohmann::json> try_parse_untrusted_json(std::string_view text);

// obj[key] when obj is an object holding a string there, else "": a member of another type in an untrusted document
// is passed over, where nlohmann's value(key, "") would throw a type error.
template <class Json>
std::string string_member(const Json& obj, const std::string& key) {
    if (!obj.is_object()) return {};
    const auto it = obj.find(key);
    return it != obj.end() && it->is_string() ? it->template get<std::string>() : std::string();
}

// The byte offset of the first '[' or '{' (outside strings) that opens level max_depth + 1; npos when none.
size_t json_too_deep_at(std::string_view text, int max_depth);

}  // namespace quill
