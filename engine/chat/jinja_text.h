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

// Each output character is untrusted when the input character it came from was (jinja_string.h).
Text text_lower(const Text& s, Budget& budget);
Text text_upper(const Text& s, Budget& budget);
// str.strip / lstrip / rstrip: whitespace, or the code points in *chars.
Text py_strip(const Text& s, const std::string* chars, bool left, bool right, Budget& budget);
// str.capitalize: first character upper, the rest lower.
Text py_capitalize(const Text& s, Budget& budget);
// str.title: each run of letters starts upper, continues lower.
Text py_title(const Text& s, Budget& budget);
// Jinja's title filter: words split at whitespace and - ( { [ <.
Text jinja_title(const Text& s, Budget& budget);
// str.replace(old, new, count); count < 0: all. The kept parts of s and each copy of new keep their provenance.
Text py_replace(const Text& s, const Text& old_s, const Text& new_s, int64_t count, Budget& budget);
// str.split(sep, maxsplit) and str.rsplit; sep null: runs of whitespace.
std::vector<Text> py_split(const Text& s, const std::string* sep, int64_t maxsplit, bool from_right, Budget& budget);
// str.find and str.count over code points (find returns -1 when absent).
int64_t py_find(const std::string& s, const std::string& sub, Budget& budget);
int64_t py_count(const std::string& s, const std::string& sub, Budget& budget);
// markupsafe.escape: & < > " ' as &amp; &lt; &gt; &#34; &#39;, a Markup result; a Markup is returned as it is.
Text html_escape(const Text& s, Budget& budget);
// str.format with {} / {0} / {name} fields (no format specs) and {{ }}.
Text py_format(const Text& fmt_s, const CallArgs& args, Budget& budget);

}  // namespace quill::chat::jinja
