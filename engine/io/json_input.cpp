#include "engine/io/json_input.h"

#include "engine/error.h"
#include "engine/io/escape.h"

#include <algorithm>

namespace quill {

namespace {

// "line L, column C" of a byte offset, or "column C" when the text is one line (trailing newlines aside).
std::string where(std::string_view text, size_t offset) {
    offset = std::min(offset, text.size());
    const std::string_view before = text.substr(0, offset);
    const size_t newline = before.rfind('\n');
    const size_t column = offset - (newline == std::string_view::npos ? 0 : newline + 1) + 1;
    const std::string_view body = text.substr(0, text.find_last_not_of('\n') + 1);
    if (body.find('\n') == std::string_view::npos) return fmt::format("column {}", column);
    return fmt::format("line {}, column {}", std::count(before.begin(), before.end(), '\n') + 1, column);
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix and a parse error's "parse error at
// line 1, column 5: ", cut to a length fit for one line (its "last read" part quotes the token, which may be a whole
// long string).
std::string reason(const nlohmann::json::exception& e) {
    constexpr size_t kMaxReason = 200;
    std::string_view m = e.what();
    if (const size_t bracket = m.find("] "); m.starts_with("[json.exception.") && bracket != std::string_view::npos)
        m.remove_prefix(bracket + 2);
    if (const size_t colon = m.find(": "); m.starts_with("parse error") && colon != std::string_view::npos)
        m.remove_prefix(colon + 2);
    return m.size() <= kMaxReason ? escape_for_terminal(m) : escape_for_terminal(m.substr(0, kMaxReason)) + "...";
}

}  // namespace

// The scan follows JSON's own token rules as far as brackets need: a string runs from a '"' to the next '"' not
// escaped by a backslash, and a bracket outside strings opens or closes a level. nlohmann's parser reads the same
// tokens up to the first byte where the text stops being JSON, and stops there; so the depth it reaches is never
// more than the depth seen here, and a text that passes this scan builds no tree deeper than max_depth.
size_t json_too_deep_at(std::string_view text, int max_depth) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') {
                ++i;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) return i;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return std::string_view::npos;
}

std::optional<nlohmann::json> try_parse_untrusted_json(std::string_view text) {
    if (json_too_deep_at(text, kMaxJsonDepth) != std::string_view::npos) return std::nullopt;
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    return j;
}

namespace {

template <class Json>
Json parse_checked(std::string_view text, std::string_view what) {
    if (const size_t at = json_too_deep_at(text, kMaxJsonDepth); at != std::string_view::npos)
        throw UsageError(fmt::format("{}: JSON nested deeper than {} levels at {}", what, kMaxJsonDepth, where(text, at)));
    try {
        return Json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        // e.byte: 1-based, the byte where the parser stopped
        throw UsageError(fmt::format("{}: not valid JSON at {}: {}", what, where(text, e.byte ? e.byte - 1 : 0),
                                     reason(e)));
    } catch (const nlohmann::json::exception& e) {  // a number out of range
        throw UsageError(fmt::format("{}: not valid JSON: {}", what, reason(e)));
    }
}

}  // namespace

nlohmann::json parse_untrusted_json(std::string_view text, std::string_view what) {
    return parse_checked<nlohmann::json>(text, what);
}

nlohmann::ordered_json parse_untrusted_ordered_json(std::string_view text, std::string_view what) {
    return parse_checked<nlohmann::ordered_json>(text, what);
}

}  // namespace quill
