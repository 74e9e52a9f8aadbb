#include "engine/grammar/grammar.h"

#include "engine/error.h"
#include "engine/io/utf8.h"

#include <algorithm>

namespace quill::grammar {

void ByteSet::add(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) bits[b >> 6] |= uint64_t{1} << (b & 63);
}

namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;  // one range per byte of a UTF-8 sequence

// Splits [lo, hi] until the UTF-8 encodings of each piece are the byte-wise product of ranges (the piece's first
// and last codepoints share every leading byte but the ones that span their whole continuation range).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
    for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu}) {
        if (lo <= bound && hi > bound) {
            utf8_sequences(lo, bound, out);
            utf8_sequences(bound + 1, hi, out);
            return;
        }
    }
    const int n = hi <= 0x7F ? 1 : hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if ((lo & m) != 0) {
            utf8_sequences(lo, lo | m, out);
            utf8_sequences((lo | m) + 1, hi, out);
            return;
        }
        if ((hi & m) != m) {
            utf8_sequences(lo, (hi & ~m) - 1, out);
            utf8_sequences(hi & ~m, hi, out);
            return;
        }
    }
    std::string a, b;
    utf8::append(a, lo);
    utf8::append(b, hi);
    ByteRanges seq;
    for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
    out.push_back(std::move(seq));
}

// Sorted, merged, clipped to scalar values (no surrogates); the complement when negated.
std::vector<CodepointRange> normalize(std::vector<CodepointRange> r, bool negated) {
    std::sort(r.begin(), r.end());
    std::vector<CodepointRange> merged;
    for (auto [lo, hi] : r) {
        hi = std::min(hi, kMaxCodepoint);
        if (lo > hi) continue;
        if (!merged.empty() && lo <= merged.back().second + 1)
            merged.back().second = std::max(merged.back().second, hi);
        else
            merged.emplace_back(lo, hi);
    }
    if (negated) {
        std::vector<CodepointRange> comp;
        uint32_t next = 0;
        for (auto [lo, hi] : merged) {
            if (lo > next) comp.emplace_back(next, lo - 1);
            next = hi + 1;
        }
        if (next <= kMaxCodepoint) comp.emplace_back(next, kMaxCodepoint);
        merged = std::move(comp);
    }
    std::vector<CodepointRange> out;
    for (auto [lo, hi] : merged) {
        if (lo < 0xD800 && hi >= 0xD800) out.emplace_back(lo, 0xD7FF);
        if (hi > 0xDFFF && lo <= 0xDFFF) out.emplace_back(0xE000, hi);
        if (hi < 0xD800 || lo > 0xDFFF) out.emplace_back(lo, hi);
    }
    return out;
}

}  // namespace

uint32_t GrammarBuilder::rule(std::string_view name) {
    auto it = by_name_.find(std::string(name));
    if (it != by_name_.end()) return it->second;
    const auto id = static_cast<uint32_t>(names_.size());
    names_.emplace_back(name);
    rules_.emplace_back();
    defined_.push_back(false);
    by_name_.emplace(std::string(name), id);
    return id;
}

uint32_t GrammarBuilder::fresh_rule(std::string_view base) {
    for (;;) {
        std::string name = fmt::format("{}-{}", base, ++n_fresh_);
        if (!by_name_.contains(name)) return rule(name);
    }
}

void GrammarBuilder::check_size(size_t more) const {
    if (more > kMaxGrammarElems || n_elems_ + more > kMaxGrammarElems)
        throw UsageError(fmt::format("the grammar is too large: more than {} elements (a repetition count or a "
                                     "length bound too high?)",
                                     kMaxGrammarElems));
}

void GrammarBuilder::add_alt(uint32_t rule, const std::vector<Elem>& seq) {
    check_size(seq.size() + 1);
    n_elems_ += seq.size() + 1;
    rules_[rule].push_back(seq);
    defined_[rule] = true;
}

Elem GrammarBuilder::bytes(const ByteSet& set) {
    const std::string key(reinterpret_cast<const char*>(set.bits), sizeof set.bits);
    auto [it, fresh] = set_ids_.emplace(key, static_cast<uint32_t>(sets_.size()));
    if (fresh) sets_.push_back(set);
    return {ElemKind::bytes, it->second};
}

void GrammarBuilder::append_literal(std::vector<Elem>& out, std::string_view text) {
    for (char c : text) {
        ByteSet s;
        s.add(static_cast<uint8_t>(c), static_cast<uint8_t>(c));
        out.push_back(bytes(s));
    }
}

Elem GrammarBuilder::char_class(std::vector<CodepointRange> ranges, bool negated) {
    const std::vector<CodepointRange> r = normalize(std::move(ranges), negated);
    ByteSet ascii;
    std::vector<ByteRanges> multi;
    for (auto [lo, hi] : r) {
        if (lo < 0x80) ascii.add(static_cast<uint8_t>(lo), static_cast<uint8_t>(std::min<uint32_t>(hi, 0x7F)));
        if (hi >= 0x80) utf8_sequences(std::max<uint32_t>(lo, 0x80), hi, multi);
    }
    if (multi.empty()) return bytes(ascii);
    std::string key;
    for (auto [lo, hi] : r) key += fmt::format("{:x}-{:x},", lo, hi);
    if (auto it = class_rules_.find(key); it != class_rules_.end()) return ref(it->second);
    const uint32_t rule = fresh_rule("char");
    if (!ascii.empty()) add_alt(rule, {bytes(ascii)});
    for (const ByteRanges& seq : multi) {
        std::vector<Elem> alt;
        for (auto [lo, hi] : seq) {
            ByteSet s;
            s.add(lo, hi);
            alt.push_back(bytes(s));
        }
        add_alt(rule, alt);
    }
    class_rules_.emplace(key, rule);
    return ref(rule);
}

Elem GrammarBuilder::group(const std::vector<Elem>& seq, std::string_view base) {
    if (seq.size() == 1) return seq[0];
    const uint32_t rule = fresh_rule(base);
    add_alt(rule, seq);
    return ref(rule);
}

void GrammarBuilder::append_repeat(std::vector<Elem>& out, Elem x, uint64_t min, int64_t max) {
    const uint64_t optional = max < 0 ? 1 : static_cast<uint64_t>(max) - min;
    if (min > kMaxGrammarElems || optional > kMaxGrammarElems) check_size(kMaxGrammarElems + 1);
    check_size(min + 4 * optional);
    for (uint64_t i = 0; i < min; ++i) out.push_back(x);
    if (max < 0) {  // S ::= x S | ""
        const uint32_t s = fresh_rule("star");
        add_alt(s, {x, ref(s)});
        add_alt(s, {});
        out.push_back(ref(s));
        return;
    }
    // O_k ::= x O_{k-1} | "": at most k more, nested so that the matcher's stack does not grow with k
    int64_t prev = -1;
    for (uint64_t k = 0; k < optional; ++k) {
        const uint32_t o = fresh_rule("opt");
        if (prev < 0)
            add_alt(o, {x});
        else
            add_alt(o, {x, ref(static_cast<uint32_t>(prev))});
        add_alt(o, {});
        prev = o;
    }
    if (prev >= 0) out.push_back(ref(static_cast<uint32_t>(prev)));
}

Grammar GrammarBuilder::finish(std::string_view root_name) {
    auto root_it = by_name_.find(std::string(root_name));
    if (root_it == by_name_.end() || !defined_[root_it->second])
        throw UsageError(fmt::format("the grammar has no '{}' rule", root_name));
    const size_t n = names_.size();
    // the rules reachable from the root, each defined
    std::vector<bool> reached(n, false);
    std::vector<uint32_t> todo{root_it->second};
    reached[root_it->second] = true;
    while (!todo.empty()) {
        const uint32_t r = todo.back();
        todo.pop_back();
        if (!defined_[r]) throw UsageError(fmt::format("rule '{}' is used but not defined", names_[r]));
        for (const auto& alt : rules_[r])
            for (const Elem& e : alt)
                if (e.kind == ElemKind::rule && !reached[e.arg]) {
                    reached[e.arg] = true;
                    todo.push_back(e.arg);
                }
    }
    // nullable (derives "") and productive (derives some finite text), as fixpoints
    std::vector<bool> nullable(n, false), productive(n, false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; ++r) {
            for (const auto& alt : rules_[r]) {
                bool null = true, prod = true;
                for (const Elem& e : alt) {
                    null = null && e.kind == ElemKind::rule && nullable[e.arg];
                    prod = prod && (e.kind == ElemKind::rule ? productive[e.arg] : !sets_[e.arg].empty());
                }
                if (null && !nullable[r]) nullable[r] = changed = true;
                if (prod && !productive[r]) productive[r] = changed = true;
            }
        }
    }
    for (size_t r = 0; r < n; ++r)
        if (reached[r] && !productive[r])
            throw UsageError(fmt::format("rule '{}' can never end: it derives no finite text", names_[r]));
    // left recursion: a rule reached again before any byte is consumed would expand forever
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r)
        for (const auto& alt : rules_[r])
            for (const Elem& e : alt) {
                if (e.kind != ElemKind::rule) break;
                left[r].push_back(e.arg);
                if (!nullable[e.arg]) break;
            }
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (size_t start = 0; start < n; ++start) {
        if (color[start] != 0 || !reached[start]) continue;
        path.push_back({static_cast<uint32_t>(start), 0});
        color[start] = 1;
        while (!path.empty()) {
            auto& [r, i] = path.back();
            if (i == left[r].size()) {
                color[r] = 2;
                path.pop_back();
                continue;
            }
            const uint32_t s = left[r][i++];
            if (color[s] == 1) {
                std::string cycle = names_[s];
                bool on = false;
                for (const auto& [p, _] : path) {
                    on = on || p == s;
                    if (on && p != s) cycle += " -> " + names_[p];
                }
                throw UsageError(fmt::format("rule '{}' is left-recursive ({} -> {}): rewrite it so that something "
                                             "is matched before the rule recurs",
                                             names_[s], cycle, names_[s]));
            }
            if (color[s] == 0) {
                color[s] = 1;
                path.push_back({s, 0});
            }
        }
    }
    Grammar g;
    g.sets = sets_;
    g.names = names_;
    g.root = root_it->second;
    g.alts.resize(n);
    for (size_t r = 0; r < n; ++r) {
        for (const auto& alt : rules_[r]) {
            g.alts[r].push_back(static_cast<uint32_t>(g.elems.size()));
            g.elems.insert(g.elems.end(), alt.begin(), alt.end());
            g.elems.push_back({ElemKind::end, 0});
        }
    }
    return g;
}

}  // namespace quill::grammar
