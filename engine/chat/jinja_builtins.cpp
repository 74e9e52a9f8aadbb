// Attribute and item access, slicing, operators, str and dict methods, and the global functions.
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_lexer.h"
#include "engine/chat/jinja_text.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>

namespace quill::chat::jinja {

namespace {

// Jinja's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

[[noreturn]] void bad_operands(std::string_view op, const Value& a, const Value& b) {
    value_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

void check_overflow(bool overflow) {
    if (overflow) value_error("integer overflow");
}

const Text& text_arg(const CallArgs& a, size_t i, std::string_view name, std::string_view method) {
    const Value* v = a.find(i, name);
    if (!v || !v->is_string()) value_error(fmt::format("{}() needs a string argument '{}'", method, name));
    return v->as_text();
}

const std::string* optional_string(const CallArgs& a, size_t i, std::string_view name) {
    const Value* v = a.find(i, name);
    return v && v->is_string() ? &v->as_string() : nullptr;
}

// startswith / endswith accept one string or a list of them.
bool affix_matches(const std::string& s, const Value& affix, bool at_start, Budget& budget) {
    auto one = [&](const Value& a) {
        if (!a.is_string()) value_error("startswith/endswith need a string or a list of strings");
        const std::string& x = a.as_string();
        budget.bytes(x.size());
        if (x.size() > s.size()) return false;
        return at_start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (affix.is_list()) {
        for (const Value& a : affix.as_list()->items)
            if (one(a)) return true;
        return false;
    }
    return one(affix);
}

Value split_method(const Text& s, const CallArgs& a, bool from_right, const BuiltinEnv& env) {
    const std::string* sep = optional_string(a, 0, "sep");
    int64_t maxsplit = a.get_or(1, "maxsplit", Value(-1)).as_int();
    std::vector<Value> parts;
    for (auto& p : py_split(s, sep, maxsplit, from_right, env.budget)) parts.emplace_back(std::move(p));
    return Value::list(std::move(parts));
}

Value string_method(const Value& self, std::string_view m, const CallArgs& a, const BuiltinEnv& env) {
    const Text& t = self.as_text();
    const std::string& s = t.bytes;
    Budget& budget = env.budget;
    if (m == "strip" || m == "lstrip" || m == "rstrip")
        return Value(py_strip(t, optional_string(a, 0, "chars"), m != "rstrip", m != "lstrip", budget));
    if (m == "startswith" || m == "endswith") {
        auto affix = a.get(0, "prefix");
        if (!affix) value_error(fmt::format("{}() needs an argument", m));
        return Value(affix_matches(s, *affix, m == "startswith", budget));
    }
    if (m == "split" || m == "rsplit") return split_method(t, a, m == "rsplit", env);
    if (m == "splitlines") {
        CallArgs nl;
        nl.positional.push_back(Value("\n"));
        const size_t end = s.empty() || s.back() != '\n' ? s.size() : s.size() - 1;
        Value parts = split_method(sub(t, 0, end, budget), nl, false, env);
        if (s.empty()) parts.as_list()->items.clear();
        return parts;
    }
    if (m == "replace") {
        int64_t count = a.get_or(2, "count", Value(-1)).as_int();
        return Value(py_replace(t, text_arg(a, 0, "old", m), text_arg(a, 1, "new", m), count, budget));
    }
    if (m == "upper") return Value(text_upper(t, budget));
    if (m == "lower") return Value(text_lower(t, budget));
    if (m == "title") return Value(py_title(t, budget));
    if (m == "capitalize") return Value(py_capitalize(t, budget));
    if (m == "find") return Value(py_find(s, text_arg(a, 0, "sub", m).bytes, budget));
    if (m == "count") return Value(py_count(s, text_arg(a, 0, "sub", m).bytes, budget));
    if (m == "join") {
        Text out;
        bool first = true;
        for (const Value& item : iterate(a.get_or(0, "iterable", Value()), env)) {
            if (!item.is_string()) value_error(fmt::format("join: expected str items, got '{}'", item.type_name()));
            if (!first) append(out, t, budget);
            first = false;
            append(out, item.as_text(), budget);
        }
        return Value(std::move(out));
    }
    if (m == "format") return Value(py_format(t, a, budget));
    value_error(fmt::format("'str' object has no method '{}'", m));
}

Value dict_method(const Dict& d, std::string_view m, const CallArgs& a, const BuiltinEnv& env) {
    std::vector<Value> out;
    if (m == "get") {
        auto key = a.get(0, "key");
        if (!key) value_error("get() needs a key");
        if (key->is_string()) env.budget.bytes(key->as_string().size());
        const Value* v = d.find(*key);
        return v ? *v : a.get_or(1, "default", Value::none());
    }
    env.budget.check_list(d.items.size());
    for (const auto& [k, v] : d.items) {
        if (m == "items") out.push_back(Value::tuple({k, v}));
        else out.push_back(m == "keys" ? k : v);
    }
    return make_list(std::move(out), env);
}

bool is_string_method(std::string_view m) {
    static constexpr std::string_view names[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split",
                                                 "rsplit", "splitlines", "replace", "upper", "lower", "title",
                                                 "capitalize", "find", "count", "join", "format"};
    for (auto n : names)
        if (n == m) return true;
    return false;
}

bool is_dict_method(std::string_view m) {
    return m == "items" || m == "keys" || m == "values" || m == "get";
}

Value bind_method(const Value& obj, std::string_view name, const BuiltinEnv& env) {
    auto c = std::make_shared<Callable>();
    c->name = std::string(name);
    c->bound_self = obj;
    const BuiltinEnv* e = &env;
    std::string m(name);
    if (obj.is_string()) {
        c->fn = [obj, m, e](CallArgs& a) {
            Value r = string_method(obj, m, a, *e);
            if (!obj.as_text().markup || !r.is_string()) return r;
            Text t = r.as_text();  // a Markup's str methods give Markup
            t.markup = true;
            return Value(std::move(t));
        };
    } else {
        c->fn = [d = obj.as_dict(), m, e](CallArgs& a) { return dict_method(*d, m, a, *e); };
    }
    return Value(c);
}

// Python's index rule: negative counts from the end; nullopt when out of range.
std::optional<size_t> resolve_index(const Value& key, size_t n) {
    if (!key.is_int() && !key.is_bool()) return std::nullopt;
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(n);
    if (i < 0 || i >= static_cast<int64_t>(n)) return std::nullopt;
    return static_cast<size_t>(i);
}

Value int_pow(int64_t base, int64_t exp) {
    int64_t result = 1;
    while (exp > 0) {
        if (exp & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
        exp >>= 1;
        if (exp) check_overflow(__builtin_mul_overflow(base, base, &base));
    }
    return Value(result);
}

// The size of `times` copies of something of size n, saturated past the limit (no overflow).
size_t repeated_size(size_t n, int64_t times, size_t limit) {
    if (n == 0 || times <= 0) return 0;
    return static_cast<size_t>(times) > limit / n ? limit + 1 : n * static_cast<size_t>(times);
}

Value repeat(const Value& seq, int64_t times, const BuiltinEnv& env) {
    Budget& budget = env.budget;
    if (seq.is_string()) {
        Text out;
        append_repeated(out, seq.as_text(), times > 0 ? static_cast<size_t>(times) : 0, budget);
        return Value(std::move(out));
    }
    const auto& items = seq.as_list()->items;
    budget.check_list(repeated_size(items.size(), times, budget.max_list()));
    std::vector<Value> out;
    for (int64_t i = 0; i < times && !items.empty(); ++i) out.insert(out.end(), items.begin(), items.end());
    return make_list(std::move(out), env);
}

Value arithmetic(std::string_view op, const Value& a, const Value& b) {
    if (!a.is_number() || !b.is_number()) bad_operands(op, a, b);
    bool ints = !a.is_float() && !b.is_float();
    if (op == "/") {
        if (b.as_double() == 0.0) value_error("division by zero");
        return Value(a.as_double() / b.as_double());
    }
    if (ints) {
        int64_t x = a.as_int(), y = b.as_int(), r = 0;
        if (op == "+" || op == "-" || op == "*") {
            check_overflow(op == "+"   ? __builtin_add_overflow(x, y, &r)
                           : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                       : __builtin_mul_overflow(x, y, &r));
            return Value(r);
        }
        if (op == "**") return y >= 0 ? int_pow(x, y) : Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
        if (y == 0) value_error("integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) value_error("integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
            --q;
            m += y;
        }
        return Value(op == "//" ? q : m);
    }
    double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0.0) value_error("float division by zero");
    if (op == "//") return Value(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
}

Value make_range(const CallArgs& a, const BuiltinEnv& env) {
    auto need_int = [](const Value& v) {
        if (!v.is_int() && !v.is_bool()) value_error(fmt::format("range() needs integers, got '{}'", v.type_name()));
        return v.as_int();
    };
    int64_t start = 0, stop = 0, step = 1;
    const auto& p = a.positional;
    if (p.size() == 1) stop = need_int(p[0]);
    else if (p.size() == 2 || p.size() == 3) {
        start = need_int(p[0]);
        stop = need_int(p[1]);
        if (p.size() == 3) step = need_int(p[2]);
    } else value_error("range() takes 1 to 3 arguments");
    if (step == 0) value_error("range() step must not be zero");
    // Count in double: the int64 difference may overflow.
    double span = (static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step);
    double count = std::max(0.0, std::ceil(span));
    if (count > static_cast<double>(kMaxRange))
        value_error(fmt::format("range too big: more than {} items", kMaxRange));
    env.budget.check_list(static_cast<size_t>(count));
    std::vector<Value> items;
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.emplace_back(start + i * step);
    return make_list(std::move(items), env);
}

Value make_dict(const CallArgs& a, bool is_namespace, const BuiltinEnv& env) {
    auto d = std::make_shared<Dict>();
    d->is_namespace = is_namespace;
    for (const Value& p : a.positional) {
        if (!p.is_dict()) value_error("dict() and namespace() take a dict or keyword arguments");
        for (const auto& [k, v] : p.as_dict()->items) set_item(*d, k, v, env.budget);
    }
    for (const auto& [k, v] : a.keyword) set_item(*d, Value(k), v, env.budget);
    return Value(d);
}

Value strftime_now(const CallArgs& a, const BuiltinEnv& env) {
    auto f = a.get(0, "format");
    if (!f || !f->is_string()) value_error("strftime_now() needs a format string");
    std::tm tm{};
    if (env.now) {
        tm = *env.now;
    } else {
        std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
        localtime_r(&t, &tm);
    }
    const size_t size = 256 + f->as_string().size() * 8;
    env.budget.alloc(size);
    std::string buf(size, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), f->as_string().c_str(), &tm);
    buf.resize(n);
    return Value(std::move(buf));
}

void add_function(Dict& globals, const std::string& name, std::function<Value(CallArgs&)> fn) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->fn = std::move(fn);
    globals.set(Value(name), Value(c));
}

}  // namespace

Value make_list(std::vector<Value> items, const BuiltinEnv& env) {
    env.budget.check_list(items.size());
    env.budget.alloc(items.size() * sizeof(Value));
    return Value::list(std::move(items));
}

void set_item(Dict& d, const Value& key, Value value, Budget& budget) {
    budget.alloc(sizeof(Value) * 2 + (key.is_string() ? key.as_string().size() : 0));
    d.set(key, std::move(value));
}

std::vector<Value> iterate(const Value& v, const BuiltinEnv& env) {
    Budget& budget = env.budget;
    switch (v.kind()) {
        case Value::Kind::Undefined: return {};
        case Value::Kind::List:
            budget.alloc(v.as_list()->items.size() * sizeof(Value));
            return v.as_list()->items;
        case Value::Kind::Dict: {
            budget.alloc(v.as_dict()->items.size() * sizeof(Value));
            std::vector<Value> keys;
            for (const auto& kv : v.as_dict()->items) keys.push_back(kv.first);
            return keys;
        }
        case Value::Kind::String: {
            const Text& t = v.as_text();
            Chars cs(t.bytes, budget);
            budget.check_list(cs.size());
            std::vector<Value> chars;
            for (size_t i = 0; i < cs.size(); ++i) {
                budget.alloc(kStringOverhead);
                chars.emplace_back(sub(t, cs.offset(i), cs.offset(i + 1), budget));
            }
            return chars;
        }
        default: value_error(fmt::format("'{}' object is not iterable", v.type_name()));
    }
}

Value get_attr(const Value& obj, std::string_view name, const BuiltinEnv& env) {
    if (obj.is_undefined()) value_error(fmt::format("cannot read '{}' of an undefined value", clip(name)));
    if (obj.is_dict()) {
        if (!obj.as_dict()->is_namespace && is_dict_method(name)) return bind_method(obj, name, env);
        const Value* v = obj.as_dict()->find(name);
        return v ? *v : Value();
    }
    if (obj.is_string() && is_string_method(name)) return bind_method(obj, name, env);
    return Value();
}

Value get_item(const Value& obj, const Value& key, const BuiltinEnv& env) {
    if (obj.is_undefined()) value_error("cannot index an undefined value");
    if (obj.is_list()) {
        if (obj.as_list()->is_generator) return Value();  // a generator has no items to index
        const auto& items = obj.as_list()->items;
        auto i = resolve_index(key, items.size());
        return i ? items[*i] : Value();
    }
    if (obj.is_string()) {
        const Text& t = obj.as_text();
        Chars cs(t.bytes, env.budget);
        auto i = resolve_index(key, cs.size());
        return i ? Value(sub(t, cs.offset(*i), cs.offset(*i + 1), env.budget)) : Value();
    }
    if (obj.is_dict()) {
        if (key.is_list() || key.is_dict() || key.is_callable() || key.is_undefined()) return Value();
        if (key.is_string()) env.budget.bytes(key.as_string().size());
        const Value* v = obj.as_dict()->find(key);
        if (v) return *v;
    }
    if (key.is_string()) return get_attr(obj, key.as_string(), env);
    return Value();
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v, const BuiltinEnv& env) {
    auto opt_int = [](const Value& v) -> std::optional<int64_t> {
        if (v.is_undefined() || v.is_none()) return std::nullopt;
        if (!v.is_int() && !v.is_bool()) value_error("slice indices must be integers or none");
        return v.as_int();
    };
    if (!obj.is_string() && !obj.is_list()) {
        if (obj.is_undefined()) value_error("cannot slice an undefined value");
        value_error(fmt::format("'{}' object is not subscriptable", obj.type_name()));
    }
    std::optional<Chars> cs;
    if (obj.is_string()) cs.emplace(obj.as_string(), env.budget);
    auto n = static_cast<int64_t>(cs ? cs->size() : obj.as_list()->items.size());
    int64_t step = opt_int(step_v).value_or(1);
    if (step == 0) value_error("slice step cannot be zero");
    if (step == std::numeric_limits<int64_t>::min()) step = -std::numeric_limits<int64_t>::max();
    auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
        if (!v) return fallback;
        int64_t x = *v;
        if (x < 0) {
            x = x < -n ? -1 : x + n;
            if (x < 0) x = step < 0 ? -1 : 0;
        } else if (x >= n) {
            x = step < 0 ? n - 1 : n;
        }
        return x;
    };
    int64_t start = adjust(opt_int(start_v), step < 0 ? n - 1 : 0);
    int64_t stop = adjust(opt_int(stop_v), step < 0 ? -1 : n);
    if (cs && step == 1) {  // one piece of the text
        if (stop <= start) return Value("");
        return Value(sub(obj.as_text(), cs->offset(static_cast<size_t>(start)), cs->offset(static_cast<size_t>(stop)),
                         env.budget));
    }
    Text text;
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        const auto at = static_cast<size_t>(i);
        if (cs) {
            append(text, obj.as_text(), cs->offset(at), cs->offset(at + 1), env.budget);
        } else {
            env.budget.check_list(items.size() + 1);
            items.push_back(obj.as_list()->items[at]);
        }
        if (__builtin_add_overflow(i, step, &i)) break;
    }
    if (cs) return Value(std::move(text));
    return make_list(std::move(items), env);
}

void add_globals(Dict& globals, const BuiltinEnv& env) {
    const BuiltinEnv* e = &env;
    add_function(globals, "range", [e](CallArgs& a) { return make_range(a, *e); });
    add_function(globals, "dict", [e](CallArgs& a) { return make_dict(a, false, *e); });
    add_function(globals, "namespace", [e](CallArgs& a) { return make_dict(a, true, *e); });
    add_function(globals, "raise_exception", [e](CallArgs& a) -> Value {
        throw RaisedError{to_str(a.get_or(0, "message", Value("")), e->budget).as_string()};
    });
    add_function(globals, "strftime_now", [e](CallArgs& a) { return strftime_now(a, *e); });
}

Value binary_op(std::string_view op, const Value& a, const Value& b, const BuiltinEnv& env) {
    if (op == "+") {
        if (a.is_string() && b.is_string()) {
            env.budget.check_string(a.as_string().size() + b.as_string().size());
            // Markup + str and str + Markup escape the str and give Markup, as markupsafe does.
            const bool markup = a.as_text().markup || b.as_text().markup;
            Text out;
            append(out, markup ? html_escape(a.as_text(), env.budget) : a.as_text(), env.budget);
            append(out, markup ? html_escape(b.as_text(), env.budget) : b.as_text(), env.budget);
            out.markup = markup;
            return Value(std::move(out));
        }
        if (a.is_list() && b.is_list()) {
            env.budget.check_list(a.as_list()->items.size() + b.as_list()->items.size());
            std::vector<Value> out = a.as_list()->items;
            out.insert(out.end(), b.as_list()->items.begin(), b.as_list()->items.end());
            return make_list(std::move(out), env);
        }
    }
    if (op == "*") {
        if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), env);
        if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), env);
    }
    return arithmetic(op, a, b);
}

bool contains(const Value& container, const Value& item, const BuiltinEnv& env) {
    switch (container.kind()) {
        case Value::Kind::Undefined: return false;
        case Value::Kind::String:
            if (!item.is_string())
                value_error(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
            return find_bytes(container.as_string(), item.as_string(), 0, env.budget) != std::string::npos;
        case Value::Kind::List:
            for (const Value& v : container.as_list()->items)
                if (equals(v, item, env.budget)) return true;
            return false;
        case Value::Kind::Dict:
            if (item.is_string()) env.budget.bytes(item.as_string().size());
            return container.as_dict()->find(item) != nullptr;
        default: value_error(fmt::format("argument of type '{}' is not iterable", container.type_name()));
    }
}

}  // namespace quill::chat::jinja
