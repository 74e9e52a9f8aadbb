// Filters and tests, as Jinja2 3.1 defines them (with Hugging Face's tojson: ensure_ascii=False, no HTML escaping).
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_lexer.h"
#include "engine/chat/jinja_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace quill::chat::jinja {

namespace {

using FilterFn = Value (*)(const Value&, const CallArgs&, const BuiltinEnv&);
using TestFn = bool (*)(const Value&, const CallArgs&, const BuiltinEnv&);

// "a.b.0": attribute path as Jinja's make_attrgetter reads it.
Value attr_path(const Value& v, const std::string& path, const BuiltinEnv& env) {
    Value cur = v;
    size_t start = 0;
    while (start <= path.size()) {
        size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        bool numeric = !part.empty() && part.size() <= 9 &&
                       std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        cur = numeric ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part))), env) : get_attr(cur, part, env);
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return cur;
}

std::string attribute_arg(const CallArgs& a, size_t i) {
    auto a_v = a.find(i, "attribute");
    if (!a_v || a_v->is_none()) return "";
    if (!a_v->is_string()) return std::to_string(a_v->as_int());
    return a_v->as_string();
}

// The comparison key for sort, unique, dictsort, min and max: case-folded strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive, Budget& budget) {
    if (!case_sensitive && v.is_string()) return Value(text_lower(v.as_text(), budget));
    return v;
}

// ---- filters ----
Value f_trim(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    auto chars = a.find(0, "chars");
    Value s = to_str(v, env.budget);
    return Value(py_strip(s.as_text(), chars && chars->is_string() ? &chars->as_string() : nullptr, true, true,
                          env.budget));
}
Value f_upper(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    return Value(text_upper(to_str(v, env.budget).as_text(), env.budget));
}
Value f_lower(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    return Value(text_lower(to_str(v, env.budget).as_text(), env.budget));
}
Value f_capitalize(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    return Value(py_capitalize(to_str(v, env.budget).as_text(), env.budget));
}
Value f_title(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    return Value(jinja_title(to_str(v, env.budget).as_text(), env.budget));
}
// Markup(v): prints as v's text, and + escapes the plain strings it meets (functionary v3.1 builds its tool list
// as '...'|safe + name + ..., whose JSON then shows &#34; in Jinja2).
Value f_safe(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    Text t = to_str(v, env.budget).as_text();
    env.budget.alloc(t.size());
    t.markup = true;
    return Value(std::move(t));
}
Value f_string(const Value& v, const CallArgs&, const BuiltinEnv& env) { return to_str(v, env.budget); }

Value f_length(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    switch (v.kind()) {
        case Value::Kind::Undefined: return Value(0);
        case Value::Kind::String:
            env.budget.bytes(v.as_string().size());
            return Value(static_cast<int64_t>(utf8_length(v.as_string())));
        case Value::Kind::List:
            if (v.as_list()->is_generator) break;
            return Value(static_cast<int64_t>(v.as_list()->items.size()));
        case Value::Kind::Dict: return Value(static_cast<int64_t>(v.as_dict()->items.size()));
        default: break;
    }
    value_error(fmt::format("object of type '{}' has no len()", v.type_name()));
}

Value f_join(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    const Value sep = to_str(a.get_or(0, "d", Value("")), env.budget);
    std::string attr = attribute_arg(a, 1);
    Text out;
    bool first = true;
    for (const Value& item : iterate(v, env)) {
        if (!first) append(out, sep.as_text(), env.budget);
        first = false;
        append_str(out, attr.empty() ? item : attr_path(item, attr, env), env.budget);
    }
    return Value(std::move(out));
}

Value f_tojson(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    Value indent = a.get_or(1, "indent", Value::none());
    if (a.get(2, "separators") && !a.get(2, "separators")->is_none()) value_error("tojson: separators are not supported");
    JsonStyle style;
    style.ensure_ascii = a.get_or(0, "ensure_ascii", Value(false)).truthy();
    style.sort_keys = a.get_or(3, "sort_keys", Value(false)).truthy();
    if (!indent.is_none() && !indent.is_undefined()) {
        if (!indent.is_int() || indent.as_int() < 0 || indent.as_int() > 64) value_error("tojson: indent must be 0..64");
        style.indent = static_cast<int>(indent.as_int());
    }
    return Value(to_json(v, style, env.budget));
}

Value f_default(const Value& v, const CallArgs& a, const BuiltinEnv&) {
    bool boolean = a.get_or(1, "boolean", Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return a.get_or(0, "default_value", Value(""));
    return v;
}

bool run_test(const Value& item, const CallArgs& a, size_t first, const BuiltinEnv& env) {
    if (first >= a.positional.size()) return item.truthy();
    const Value& name = a.positional[first];
    if (!name.is_string()) value_error("the test name must be a string");
    if (!has_test(name.as_string())) value_error(fmt::format("unknown test '{}'", clip(name.as_string())));
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1, a.positional.end());
    return apply_test(name.as_string(), item, rest, env);
}

// The generator of these items (Value::List::is_generator).
Value make_generator(std::vector<Value> items, const BuiltinEnv& env) {
    Value v = make_list(std::move(items), env);
    v.as_list()->is_generator = true;
    return v;
}

// Appends to a list being built: a BudgetError before it passes the list limit.
void push(std::vector<Value>& out, Value v, const BuiltinEnv& env) {
    env.budget.check_list(out.size() + 1);
    out.push_back(std::move(v));
}

Value select_items(const Value& v, const CallArgs& a, const BuiltinEnv& env, bool by_attr, bool keep) {
    std::vector<Value> out;
    if (!v.truthy()) return make_generator(std::move(out), env);  // Jinja2: `if value:` first, so none selects nothing
    std::string attr = by_attr ? to_str(a.get_or(0, "attribute", Value("")), env.budget).as_string() : "";
    for (const Value& item : iterate(v, env)) {
        Value subject = by_attr ? attr_path(item, attr, env) : item;
        if (run_test(subject, a, by_attr ? 1 : 0, env) == keep) push(out, item, env);
    }
    return make_generator(std::move(out), env);
}
Value f_selectattr(const Value& v, const CallArgs& a, const BuiltinEnv& e) { return select_items(v, a, e, true, true); }
Value f_rejectattr(const Value& v, const CallArgs& a, const BuiltinEnv& e) { return select_items(v, a, e, true, false); }
Value f_select(const Value& v, const CallArgs& a, const BuiltinEnv& e) { return select_items(v, a, e, false, true); }
Value f_reject(const Value& v, const CallArgs& a, const BuiltinEnv& e) { return select_items(v, a, e, false, false); }

Value f_map(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    std::vector<Value> out;
    if (!v.truthy()) return make_generator(std::move(out), env);  // as Jinja2: none maps to nothing
    std::string attr = attribute_arg(a, 99);
    if (!attr.empty()) {
        Value fallback = a.get_or(99, "default", Value());
        for (const Value& item : iterate(v, env)) {
            Value x = attr_path(item, attr, env);
            push(out, x.is_undefined() ? fallback : x, env);
        }
        return make_generator(std::move(out), env);
    }
    if (a.positional.empty() || !a.positional[0].is_string()) value_error("map needs a filter name or attribute=");
    const std::string& filter = a.positional[0].as_string();
    if (!has_filter(filter)) value_error(fmt::format("unknown filter '{}'", clip(filter)));
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const Value& item : iterate(v, env)) push(out, apply_filter(filter, item, rest, env), env);
    return make_generator(std::move(out), env);
}

Value f_items(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) value_error(fmt::format("items: expected a dict, got '{}'", v.type_name()));
    std::vector<Value> out;
    for (const auto& [k, item] : v.as_dict()->items) push(out, Value::tuple({k, item}), env);
    return make_list(std::move(out), env);
}

// first and last: a string's first or last character, a list's item, a dict's key.
Value end_item(const Value& v, const BuiltinEnv& env, bool last) {
    if (v.is_string()) {
        const Text& t = v.as_text();
        Chars cs(t.bytes, env.budget);
        if (cs.size() == 0) return Value();
        const size_t i = last ? cs.size() - 1 : 0;
        return Value(sub(t, cs.offset(i), cs.offset(i + 1), env.budget));
    }
    if (v.is_list()) {
        const auto& items = v.as_list()->items;
        if (items.empty()) return Value();
        return last ? items.back() : items.front();
    }
    auto items = iterate(v, env);
    return items.empty() ? Value() : (last ? items.back() : items.front());
}
Value f_first(const Value& v, const CallArgs&, const BuiltinEnv& env) { return end_item(v, env, false); }
Value f_last(const Value& v, const CallArgs&, const BuiltinEnv& env) { return end_item(v, env, true); }
Value f_list(const Value& v, const CallArgs&, const BuiltinEnv& env) { return make_list(iterate(v, env), env); }
Value f_reverse(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    if (v.is_string()) {
        const Text& t = v.as_text();
        Chars cs(t.bytes, env.budget);
        Text out;
        for (size_t i = cs.size(); i-- > 0;) append(out, t, cs.offset(i), cs.offset(i + 1), env.budget);
        return Value(std::move(out));
    }
    auto items = iterate(v, env);
    std::reverse(items.begin(), items.end());
    return make_list(std::move(items), env);
}

Value f_int(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    Value fallback = a.get_or(0, "default", Value(0));
    if (v.is_int() || v.is_bool()) return Value(v.as_int());
    if (v.is_float()) {
        double f = v.as_double();
        if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
        return Value(static_cast<int64_t>(f));
    }
    if (!v.is_string()) return fallback;
    std::string s = py_strip(v.as_text(), nullptr, true, true, env.budget).bytes;
    if (s.empty()) return fallback;
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(s.c_str(), &end, static_cast<int>(a.get_or(1, "base", Value(10)).as_int()));
    if (errno == 0 && end && *end == '\0') return Value(static_cast<int64_t>(i));
    double f = std::strtod(s.c_str(), &end);
    if (end && *end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18) return Value(static_cast<int64_t>(f));
    return fallback;
}

Value f_float(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    Value fallback = a.get_or(0, "default", Value(0.0));
    if (v.is_number()) return Value(v.as_double());
    if (!v.is_string()) return fallback;
    std::string s = py_strip(v.as_text(), nullptr, true, true, env.budget).bytes;
    char* end = nullptr;
    double f = std::strtod(s.c_str(), &end);
    if (s.empty() || !end || *end != '\0') return fallback;
    return Value(f);
}

Value f_abs(const Value& v, const CallArgs&, const BuiltinEnv&) {
    if (v.is_float()) return Value(std::fabs(v.as_double()));
    if (!v.is_int() && !v.is_bool()) value_error(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
    int64_t i = v.as_int();
    if (i == std::numeric_limits<int64_t>::min()) value_error("integer overflow in abs()");
    return Value(i < 0 ? -i : i);
}

Value f_round(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    if (!v.is_number()) value_error(fmt::format("round: expected a number, got '{}'", v.type_name()));
    int64_t precision = a.get_or(0, "precision", Value(0)).as_int();
    std::string method = to_str(a.get_or(1, "method", Value("common")), env.budget).as_string();
    if (precision < 0 || precision > 15) value_error("round: precision must be 0..15");
    double scale = std::pow(10.0, static_cast<double>(precision));
    double x = v.as_double() * scale;
    if (method == "common") x = std::nearbyint(x);  // round half to even, as Python's round()
    else if (method == "ceil") x = std::ceil(x);
    else if (method == "floor") x = std::floor(x);
    else value_error("round: method must be 'common', 'ceil' or 'floor'");
    return Value(x / scale);
}

Value f_replace(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    auto old_s = a.get(0, "old"), new_s = a.get(1, "new");
    if (!old_s || !new_s) value_error("replace needs old and new");
    int64_t count = a.get_or(2, "count", Value(-1)).is_none() ? -1 : a.get_or(2, "count", Value(-1)).as_int();
    Budget& b = env.budget;
    return Value(py_replace(to_str(v, b).as_text(), to_str(*old_s, b).as_text(), to_str(*new_s, b).as_text(), count, b));
}

// A stable sort by each item's key (computed once per item, as Python's key function).
std::vector<Value> sorted(std::vector<Value> items, bool reverse, bool case_sensitive, const std::string& attr,
                          const BuiltinEnv& env) {
    std::vector<std::pair<Value, Value>> keyed;
    env.budget.alloc(items.size() * sizeof(Value) * 2);
    keyed.reserve(items.size());
    for (Value& item : items)
        keyed.emplace_back(sort_key(attr.empty() ? item : attr_path(item, attr, env), case_sensitive, env.budget),
                           std::move(item));
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return reverse ? compare(y.first, x.first, env.budget) < 0 : compare(x.first, y.first, env.budget) < 0;
    });
    for (size_t i = 0; i < keyed.size(); ++i) items[i] = std::move(keyed[i].second);
    return items;
}

Value f_sort(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    bool reverse = a.get_or(0, "reverse", Value(false)).truthy();
    bool case_sensitive = a.get_or(1, "case_sensitive", Value(false)).truthy();
    return make_list(sorted(iterate(v, env), reverse, case_sensitive, attribute_arg(a, 2), env), env);
}

Value f_dictsort(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    if (!v.is_dict()) value_error(fmt::format("dictsort: expected a dict, got '{}'", v.type_name()));
    bool case_sensitive = a.get_or(0, "case_sensitive", Value(false)).truthy();
    std::string by = to_str(a.get_or(1, "by", Value("key")), env.budget).as_string();
    bool reverse = a.get_or(2, "reverse", Value(false)).truthy();
    std::vector<Value> pairs;
    for (const auto& [k, item] : v.as_dict()->items) push(pairs, Value::tuple({k, item}), env);
    return make_list(sorted(std::move(pairs), reverse, case_sensitive, by == "value" ? "1" : "0", env), env);
}

Value f_unique(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    bool case_sensitive = a.get_or(0, "case_sensitive", Value(false)).truthy();
    std::string attr = attribute_arg(a, 1);
    std::vector<Value> out, seen;
    for (const Value& item : iterate(v, env)) {
        Value key = sort_key(attr.empty() ? item : attr_path(item, attr, env), case_sensitive, env.budget);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key, env.budget); })) {
            seen.push_back(key);
            push(out, item, env);
        }
    }
    return make_generator(std::move(out), env);
}

Value pick_extreme(const Value& v, const CallArgs& a, const BuiltinEnv& env, bool want_max) {
    bool case_sensitive = a.get_or(0, "case_sensitive", Value(false)).truthy();
    auto items = sorted(iterate(v, env), want_max, case_sensitive, attribute_arg(a, 1), env);
    return items.empty() ? Value() : items.front();
}
Value f_min(const Value& v, const CallArgs& a, const BuiltinEnv& env) { return pick_extreme(v, a, env, false); }
Value f_max(const Value& v, const CallArgs& a, const BuiltinEnv& env) { return pick_extreme(v, a, env, true); }

Value f_sum(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    std::string attr = attribute_arg(a, 0);
    Value total = a.get_or(1, "start", Value(0));
    for (const Value& item : iterate(v, env)) total = binary_op("+", total, attr.empty() ? item : attr_path(item, attr, env), env);
    return total;
}

Value f_wordcount(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    int64_t n = 0;
    bool in_word = false;
    const Value s = to_str(v, env.budget);
    env.budget.bytes(s.as_string().size());
    for (char c : s.as_string()) {
        bool word = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    static_cast<unsigned char>(c) >= 0x80;
        if (word && !in_word) ++n;
        in_word = word;
    }
    return Value(n);
}

Value f_indent(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    Budget& budget = env.budget;
    Value w = a.get_or(0, "width", Value(4));
    const Text pad = w.is_string() ? w.as_text()
                                   : Text(std::string(static_cast<size_t>(std::clamp<int64_t>(w.as_int(), 0, 256)), ' '));
    bool first = a.get_or(1, "first", Value(false)).truthy();
    bool blank = a.get_or(2, "blank", Value(false)).truthy();
    const Value sv = to_str(v, budget);
    const Text& s = sv.as_text();
    Text out;
    size_t start = 0;
    for (size_t line = 0; start <= s.size(); ++line) {
        size_t nl = find_bytes(s.bytes, "\n", start, budget);
        size_t end = nl == std::string::npos ? s.size() : nl;
        if ((line > 0 || first) && (blank || end > start)) append(out, pad, budget);
        append(out, s, start, end, budget);
        if (nl == std::string::npos) break;
        append(out, s, nl, nl + 1, budget);
        start = nl + 1;
    }
    return Value(std::move(out));
}

struct FilterEntry {
    std::string_view name;
    FilterFn fn;
};
constexpr FilterEntry kFilters[] = {
    {"abs", f_abs}, {"capitalize", f_capitalize}, {"count", f_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", f_dictsort}, {"first", f_first}, {"float", f_float}, {"indent", f_indent}, {"int", f_int},
    {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length}, {"list", f_list},
    {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min}, {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round},
    {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},
    {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique},
    {"upper", f_upper}, {"wordcount", f_wordcount},
};

// ---- tests ----
const Value& arg0(const CallArgs& a, std::string_view test) {
    if (a.positional.empty()) value_error(fmt::format("test '{}' needs an argument", test));
    return a.positional[0];
}
bool t_defined(const Value& v, const CallArgs&, const BuiltinEnv&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_undefined(); }
bool t_none(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_none(); }
bool t_string(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_string(); }
bool t_number(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_number(); }
bool t_integer(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_int(); }
bool t_float(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_float(); }
bool t_mapping(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_dict() && !v.as_dict()->is_namespace; }
bool t_iterable(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }
bool t_sequence(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_string() || v.is_list() || v.is_dict(); }
bool t_boolean(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_bool(); }
bool t_true(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_bool() && !v.as_bool(); }
bool t_callable(const Value& v, const CallArgs&, const BuiltinEnv&) { return v.is_callable(); }
bool t_eq(const Value& v, const CallArgs& a, const BuiltinEnv& env) { return equals(v, arg0(a, "eq"), env.budget); }
bool t_ne(const Value& v, const CallArgs& a, const BuiltinEnv& env) { return !equals(v, arg0(a, "ne"), env.budget); }
bool t_lt(const Value& v, const CallArgs& a, const BuiltinEnv& env) { return compare(v, arg0(a, "lt"), env.budget) < 0; }
bool t_le(const Value& v, const CallArgs& a, const BuiltinEnv& env) { return compare(v, arg0(a, "le"), env.budget) <= 0; }
bool t_gt(const Value& v, const CallArgs& a, const BuiltinEnv& env) { return compare(v, arg0(a, "gt"), env.budget) > 0; }
bool t_ge(const Value& v, const CallArgs& a, const BuiltinEnv& env) { return compare(v, arg0(a, "ge"), env.budget) >= 0; }
bool t_in(const Value& v, const CallArgs& a, const BuiltinEnv& env) { return contains(arg0(a, "in"), v, env); }
bool t_sameas(const Value& v, const CallArgs& a, const BuiltinEnv& env) {
    const Value& o = arg0(a, "sameas");
    if (v.kind() != o.kind()) return false;
    if (v.is_list()) return v.as_list() == o.as_list();
    if (v.is_dict()) return v.as_dict() == o.as_dict();
    return equals(v, o, env.budget);
}
int64_t need_int(const Value& v, std::string_view test) {
    if (!v.is_int() && !v.is_bool()) value_error(fmt::format("test '{}' needs an integer, got '{}'", test, v.type_name()));
    return v.as_int();
}
bool t_odd(const Value& v, const CallArgs&, const BuiltinEnv&) { return need_int(v, "odd") % 2 != 0; }
bool t_even(const Value& v, const CallArgs&, const BuiltinEnv&) { return need_int(v, "even") % 2 == 0; }
bool t_divisibleby(const Value& v, const CallArgs& a, const BuiltinEnv&) {
    int64_t d = need_int(arg0(a, "divisibleby"), "divisibleby");
    if (d == 0) value_error("divisibleby 0");
    if (d == -1) return true;
    return need_int(v, "divisibleby") % d == 0;
}
bool t_lower(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    return v.is_string() && text_lower(v.as_text(), env.budget).bytes == v.as_string();
}
bool t_upper(const Value& v, const CallArgs&, const BuiltinEnv& env) {
    return v.is_string() && text_upper(v.as_text(), env.budget).bytes == v.as_string();
}

struct TestEntry {
    std::string_view name;
    TestFn fn;
};
constexpr TestEntry kTests[] = {
    {"!=", t_ne}, {"<", t_lt}, {"<=", t_le}, {"==", t_eq}, {">", t_gt}, {">=", t_ge},
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq}, {"equalto", t_eq}, {"even", t_even}, {"false", t_false}, {"float", t_float}, {"ge", t_ge},
    {"greaterthan", t_gt}, {"gt", t_gt}, {"in", t_in}, {"integer", t_integer}, {"iterable", t_iterable},
    {"le", t_le}, {"lessthan", t_lt}, {"lower", t_lower}, {"lt", t_lt}, {"mapping", t_mapping}, {"ne", t_ne},
    {"none", t_none}, {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas}, {"sequence", t_sequence},
    {"string", t_string}, {"true", t_true}, {"undefined", t_undefined}, {"upper", t_upper},
};

template <class Table>
auto find_entry(const Table& table, std::string_view name) -> decltype(&table[0]) {
    for (const auto& e : table)
        if (e.name == name) return &e;
    return nullptr;
}

}  // namespace

bool has_filter(std::string_view name) {
    return find_entry(kFilters, name) != nullptr;
}

bool has_test(std::string_view name) {
    return find_entry(kTests, name) != nullptr;
}

Value apply_filter(std::string_view name, const Value& v, const CallArgs& args, const BuiltinEnv& env) {
    const auto* e = find_entry(kFilters, name);
    if (!e) value_error(fmt::format("unknown filter '{}'", clip(name)));
    return e->fn(v, args, env);
}

bool apply_test(std::string_view name, const Value& v, const CallArgs& args, const BuiltinEnv& env) {
    const auto* e = find_entry(kTests, name);
    if (!e) value_error(fmt::format("unknown test '{}'", clip(name)));
    return e->fn(v, args, env);
}

}  // namespace quill::chat::jinja
