// A context-free grammar over bytes: what GBNF, JSON Schema and regular expressions compile to, and what the
// automaton (automaton.h) runs. A rule is a list of alternatives; an alternative a sequence of elements, each a set
// of bytes or a reference to a rule. Unicode character classes become alternatives of UTF-8 byte sequences, so the
// automaton never decodes: a token's bytes, partial characters included, are checked one byte at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace quill::grammar {

// 256 bits, one per byte value.
struct ByteSet {
    uint64_t bits[4] = {0, 0, 0, 0};
    bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
    void add(uint8_t lo, uint8_t hi);
    bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
    bool operator==(const ByteSet&) const = default;
};

enum class ElemKind : uint8_t { bytes, rule, end };

struct Elem {
    ElemKind kind = ElemKind::end;
    uint32_t arg = 0;  // bytes: index into Grammar::sets; rule: rule index
};

// The compiled grammar. Every alternative's elements lie in `elems`, each alternative ended by an `end` element, so
// a position (an index into elems) says where in which alternative the matcher is.
struct Grammar {
    std::vector<Elem> elems;
    std::vector<ByteSet> sets;
    std::vector<std::vector<uint32_t>> alts;  // [n_rules] start position of each alternative
    std::vector<std::string> names;           // [n_rules]
    uint32_t root = 0;
    // What its compilation from a JSON schema relaxed (a oneOf generated as anyOf), a sentence each, naming where.
    std::vector<std::string> warnings;
};

// The largest grammar quill builds (elements), so that a repetition count or a schema cannot exhaust memory.
inline constexpr size_t kMaxGrammarElems = 1u << 20;

// A codepoint range [lo, hi], both inclusive.
using CodepointRange = std::pair<uint32_t, uint32_t>;

// Builds a Grammar rule by rule. Rules are named; a name may be referenced before its definition. finish() checks
// the whole: every referenced rule defined, no left recursion, every rule able to end. Errors are UsageError.
class GrammarBuilder {
public:
    // The rule of this name, created (undefined) on first use.
    uint32_t rule(std::string_view name);
    // A new rule named after `base` with a unique suffix.
    uint32_t fresh_rule(std::string_view base);
    bool defined(uint32_t rule) const { return defined_[rule]; }
    const std::string& name(uint32_t rule) const { return names_[rule]; }
    // Adds an alternative (a sequence; empty: the empty string) and marks the rule defined.
    void add_alt(uint32_t rule, const std::vector<Elem>& seq);
    void mark_defined(uint32_t rule) { defined_[rule] = true; }

    Elem bytes(const ByteSet& set);
    static Elem ref(uint32_t rule) { return {ElemKind::rule, rule}; }
    // The UTF-8 bytes of a literal text, one element per byte.
    void append_literal(std::vector<Elem>& out, std::string_view text);
    // A character class over codepoints (negated: its complement in U+0000..U+10FFFF, surrogates excluded): one
    // element when every member is one byte, else a reference to a rule of UTF-8 byte sequences.
    Elem char_class(std::vector<CodepointRange> ranges, bool negated);
    // x repeated min..max times (max -1: unbounded), appended to out. UsageError when it would make the grammar
    // larger than kMaxGrammarElems.
    void append_repeat(std::vector<Elem>& out, Elem x, uint64_t min, int64_t max);
    // A sequence as one element: itself when it has one element, else a reference to a new rule.
    Elem group(const std::vector<Elem>& seq, std::string_view base);

    // The grammar starting at rule `root` (UsageError when undefined, left-recursive or never ending).
    Grammar finish(std::string_view root);

private:
    void check_size(size_t more) const;

    std::vector<std::string> names_;
    std::vector<std::vector<std::vector<Elem>>> rules_;  // [n_rules][alternative][element]
    std::vector<bool> defined_;
    std::unordered_map<std::string, uint32_t> by_name_;
    std::vector<ByteSet> sets_;
    std::unordered_map<std::string, uint32_t> set_ids_;  // a set's 32 bytes -> its index in sets_
    std::unordered_map<std::string, uint32_t> class_rules_;  // char_class memo, by its ranges
    size_t n_elems_ = 0;
    uint32_t n_fresh_ = 0;
};

}  // namespace quill::grammar
