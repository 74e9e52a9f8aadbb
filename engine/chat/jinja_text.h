// Python's string operations as templates use them (str.strip, split, replace, title, capitalize, find, count,
// format). Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; lengths and positions count
// code points.
#pragma once

#include "engine/chat/jinja_value.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace quill::chat::jinja {

std::string text_lower(std::string_view s);
std::string text_upper(std::string_view s);
// str.strip / lstrip / rstrip: whitespace, or the code points in *chars.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.capitalize: first character upper, the rest lower.
std::string py_capitalize(std::string_view s);
// str.title: each run of letters starts upper, continues lower.
std::string py_title(std::string_view s);
// Jinja's title filter: words split at whitespace and - ( { [ <.
std::string jinja_title(std::string_view s);
// str.replace(old, new, count); count < 0: all. Throws ValueError past max_size bytes.
std::string py_replace(const std::string& s, const std::string& old_s, const std::string& new_s, int64_t count,
                       size_t max_size);
// str.split(sep, maxsplit) and str.rsplit; sep null: runs of whitespace.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
// str.find and str.count over code points (find returns -1 when absent).
int64_t py_find(const std::string& s, const std::string& sub);
int64_t py_count(const std::string& s, const std::string& sub);
// str.format with {} / {0} / {name} fields (no format specs) and {{ }}.
std::string py_format(const std::string& fmt_s, const CallArgs& args);

}  // namespace quill::chat::jinja
