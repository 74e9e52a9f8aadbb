// Template strings with provenance: each string remembers which of its bytes came from untrusted input (the
// messages), through concatenation, slicing, strip, split, replace, case mapping and printing, so that the
// tokenizer can parse special tokens in the template's own bytes only. An operation that cannot tell which output
// bytes came from which input marks the whole result untrusted when any input byte was (conservative).
// Strings are built under the render's Budget: the size limit is checked before bytes are added.
#pragma once

#include "engine/chat/jinja_budget.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace quill::chat::jinja {

// The bytes [begin, end) of a string.
struct Span {
    size_t begin = 0;
    size_t end = 0;
};

struct Text {
    std::string bytes;
    std::vector<Span> untrusted;  // sorted, disjoint, non-empty, non-adjacent
    bool markup = false;          // markupsafe.Markup, from the safe filter: + HTML-escapes a plain str beside it

    Text() = default;
    explicit Text(std::string b, bool all_untrusted = false);
    size_t size() const { return bytes.size(); }
    bool any_untrusted() const { return !untrusted.empty(); }
    // Whether any byte of [begin, end) is untrusted.
    bool untrusted_in(size_t begin, size_t end) const;
    // Marks [begin, end) untrusted; begin must not precede the last span's begin (spans are added in order).
    void mark(size_t begin, size_t end);
};

// Appends bytes (all untrusted or none), or bytes [begin, end) of `from` with their provenance. A BudgetError
// before `out` would pass the string limit; the bytes count as allocated.
void append(Text& out, std::string_view bytes, Budget& budget, bool untrusted = false);
void append(Text& out, const Text& from, size_t begin, size_t end, Budget& budget);
inline void append(Text& out, const Text& from, Budget& budget) { append(out, from, 0, from.size(), budget); }
// `times` copies of t, checked and counted once.
void append_repeated(Text& out, const Text& t, size_t times, Budget& budget);
// Bytes [begin, end) of t with their provenance.
Text sub(const Text& t, size_t begin, size_t end, Budget& budget);

// The characters of a string: code points and their byte offsets (a byte that is not valid UTF-8 is one
// character of its own, as utf8_decode keeps it). ASCII text needs no table.
class Chars {
public:
    Chars(std::string_view s, Budget& budget);
    size_t size() const { return n_; }
    size_t offset(size_t i) const { return ascii_ ? i : offsets_[i]; }  // i <= size()
    uint32_t at(size_t i) const;

private:
    std::string_view s_;
    size_t n_ = 0;
    bool ascii_ = true;
    std::vector<size_t> offsets_;  // [n_ + 1]
};

// Maps each character of t with f(code point, index, previous code point); each output character is untrusted
// when its input character was.
template <class F>
Text map_chars(const Text& t, Budget& budget, F f);

// The first occurrence of needle in hay at or after from, in linear time; npos when none.
size_t find_bytes(std::string_view hay, std::string_view needle, size_t from, Budget& budget);

// UTF-8 helpers: text as code points (invalid bytes pass through as single units 0x80000000 | byte) and back.
std::vector<uint32_t> utf8_decode(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);
size_t utf8_length(std::string_view s);
// The code point at s[i] and its length in bytes (an invalid byte: 0x80000000 | byte, length 1).
uint32_t utf8_next(std::string_view s, size_t i, size_t& length);

template <class F>
Text map_chars(const Text& t, Budget& budget, F f) {
    Text out;
    std::string_view s = t.bytes;
    budget.bytes(s.size());
    out.bytes.reserve(s.size());
    uint32_t prev = 0;
    size_t index = 0;
    for (size_t i = 0; i < s.size(); ++index) {
        size_t n = 0;
        const uint32_t c = utf8_next(s, i, n);
        const size_t at = out.size();
        append_utf8(out.bytes, f(c, index, prev));
        budget.check_string(out.size());
        if (t.untrusted_in(i, i + n)) out.mark(at, out.size());
        prev = c;
        i += n;
    }
    budget.alloc(out.size());
    return out;
}

}  // namespace quill::chat::jinja
