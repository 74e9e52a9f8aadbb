// Attribute and item access, slicing, operators, str and dict methods, and the global functions.
#include "engine/chat/jinja_builtins.h"
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

std::string string_arg(const CallArgs& a, size_t i, std::string_view name, std::string_view method) {
    auto v = a.get(i, name);
    if (!v || !v->is_string()) value_error(fmt::format("{}() needs a string argument '{}'", method, name));
    return v->as_string();
}

const std::string* optional_string(const CallArgs& a, size_t i, std::string_view name) {
    if (i < a.positional.size()) return a.positional[i].is_string() ? &a.positional[i].as_string() : nullptr;
    for (const auto& [k, v] : a.keyword)
        if (k == name && v.is_string()) return &v.as_string();
    return nullptr;
}

// startswith / endswith accept one string or a list of them.
bool affix_matches(const std::string& s, const Value& affix, bool at_start) {
    auto one = [&](const Value& a) {
        if (!a.is_string()) value_error("startswith/endswith need a string or a list of strings");
        const std::string& x = a.as_string();
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

Value split_method(const std::string& s, const CallArgs& a, bool from_right, const BuiltinEnv& env) {
    const std::string* sep = optional_string(a, 0, "sep");
    int64_t maxsplit = a.get_or(1, "maxsplit", Value(-1)).as_int();
    std::vector<Value> parts;
    for (auto& p : py_split(s, sep, maxsplit, from_right)) parts.emplace_back(std::move(p));
    env.check_size(parts.size());
    return Value::list(std::move(parts));
}

Value string_method(const std::string& s, std::string_view m, const CallArgs& a, const BuiltinEnv& env) {
    if (m == "strip" || m == "lstrip" || m == "rstrip")
        return Value(py_strip(s, optional_string(a, 0, "chars"), m != "rstrip", m != "lstrip"));
    if (m == "startswith" || m == "endswith") {
        auto affix = a.get(0, "prefix");
        if (!affix) value_error(fmt::format("{}() needs an argument", m));
        return Value(affix_matches(s, *affix, m == "startswith"));
    }
    if (m == "split" || m == "rsplit") return split_method(s, a, m == "rsplit", env);
    if (m == "splitlines") {
        CallArgs nl;
        nl.positional.push_back(Value("\n"));
        Value parts = split_method(s.empty() || s.back() != '\n' ? s : s.substr(0, s.size() - 1), nl, false, env);
        if (s.empty()) parts.as_list()->items.clear();
        return parts;
    }
    if (m == "replace") {
        int64_t count = a.get_or(2, "count", Value(-1)).as_int();
        return Value(py_replace(s, string_arg(a, 0, "old", m), string_arg(a, 1, "new", m), count, env.max_size));
    }
    if (m == "upper") return Value(text_upper(s));
    if (m == "lower") return Value(text_lower(s));
    if (m == "title") return Value(py_title(s));
    if (m == "capitalize") return Value(py_capitalize(s));
    if (m == "find") return Value(py_find(s, string_arg(a, 0, "sub", m)));
    if (m == "count") return Value(py_count(s, string_arg(a, 0, "sub", m)));
    if (m == "join") {
        std::string out;
        bool first = true;
        for (const Value& item : iterate(a.get_or(0, "iterable", Value()))) {
            if (!item.is_string()) value_error(fmt::format("join: expected str items, got '{}'", item.type_name()));
            if (!first) out += s;
            first = false;
            out += item.as_string();
            env.check_size(out.size());
        }
        return Value(std::move(out));
    }
    if (m == "format") {
        std::string out = py_format(s, a);
        env.check_size(out.size());
        return Value(std::move(out));
    }
    value_error(fmt::format("'str' object has no method '{}'", m));
}

Value dict_method(const Dict& d, std::string_view m, const CallArgs& a, const BuiltinEnv& env) {
    std::vector<Value> out;
    if (m == "get") {
        auto key = a.get(0, "key");
        if (!key) value_error("get() needs a key");
        const Value* v = d.find(*key);
        return v ? *v : a.get_or(1, "default", Value::none());
    }
    for (const auto& [k, v] : d.items) {
        if (m == "items") out.push_back(Value::tuple({k, v}));
        else out.push_back(m == "keys" ? k : v);
    }
    env.check_size(out.size());
    return Value::list(std::move(out));
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
        c->fn = [s = obj.as_string(), m, e](CallArgs& a) { return string_method(s, m, a, *e); };
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

Value repeat(const Value& seq, int64_t times, const BuiltinEnv& env) {
    if (times < 0) times = 0;
    if (seq.is_string()) {
        const std::string& s = seq.as_string();
        if (!s.empty()) env.check_size(static_cast<size_t>(times) > env.max_size / s.size() ? env.max_size + 1 : s.size() * static_cast<size_t>(times));
        std::string out;
        for (int64_t i = 0; i < times && !s.empty(); ++i) out += s;
        return Value(std::move(out));
    }
    const auto& items = seq.as_list()->items;
    if (!items.empty()) env.check_size(static_cast<size_t>(times) > env.max_size / items.size() ? env.max_size + 1 : items.size() * static_cast<size_t>(times));
    std::vector<Value> out;
    for (int64_t i = 0; i < times && !items.empty(); ++i) out.insert(out.end(), items.begin(), items.end());
    return Value::list(std::move(out));
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
    std::vector<Value> items;
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.emplace_back(start + i * step);
    env.check_size(items.size());
    return Value::list(std::move(items));
}

Value make_dict(const CallArgs& a, bool is_namespace) {
    auto d = std::make_shared<Dict>();
    d->is_namespace = is_namespace;
    for (const Value& p : a.positional) {
        if (!p.is_dict()) value_error("dict() and namespace() take a dict or keyword arguments");
        for (const auto& [k, v] : p.as_dict()->items) d->set(k, v);
    }
    for (const auto& [k, v] : a.keyword) d->set(Value(k), v);
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
    std::string buf(256 + f->as_string().size() * 8, '\0');
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

void BuiltinEnv::check_size(size_t n) const {
    if (n > max_size) value_error(fmt::format("result larger than the limit of {} bytes or items", max_size));
}

std::vector<Value> iterate(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined: return {};
        case Value::Kind::List: return v.as_list()->items;
        case Value::Kind::Dict: {
            std::vector<Value> keys;
            for (const auto& kv : v.as_dict()->items) keys.push_back(kv.first);
            return keys;
        }
        case Value::Kind::String: {
            auto cps = utf8_decode(v.as_string());
            std::vector<Value> chars;
            for (size_t i = 0; i < cps.size(); ++i) chars.emplace_back(utf8_encode(cps, i, i + 1));
            return chars;
        }
        default: value_error(fmt::format("'{}' object is not iterable", v.type_name()));
    }
}

Value get_attr(const Value& obj, std::string_view name, const BuiltinEnv& env) {
    if (obj.is_dict()) {
        if (!obj.as_dict()->is_namespace && is_dict_method(name)) return bind_method(obj, name, env);
        const Value* v = obj.as_dict()->find(name);
        return v ? *v : Value();
    }
    if (obj.is_string() && is_string_method(name)) return bind_method(obj, name, env);
    return Value();
}

Value get_item(const Value& obj, const Value& key, const BuiltinEnv& env) {
    if (obj.is_list()) {
        const auto& items = obj.as_list()->items;
        auto i = resolve_index(key, items.size());
        return i ? items[*i] : Value();
    }
    if (obj.is_string()) {
        auto cps = utf8_decode(obj.as_string());
        auto i = resolve_index(key, cps.size());
        return i ? Value(utf8_encode(cps, *i, *i + 1)) : Value();
    }
    if (obj.is_dict()) {
        if (key.is_list() || key.is_dict() || key.is_callable() || key.is_undefined()) return Value();
        const Value* v = obj.as_dict()->find(key);
        if (v) return *v;
    }
    if (key.is_string()) return get_attr(obj, key.as_string(), env);
    return Value();
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
    auto opt_int = [](const Value& v) -> std::optional<int64_t> {
        if (v.is_undefined() || v.is_none()) return std::nullopt;
        if (!v.is_int() && !v.is_bool()) value_error("slice indices must be integers or none");
        return v.as_int();
    };
    std::vector<uint32_t> cps;
    if (obj.is_string()) cps = utf8_decode(obj.as_string());
    else if (!obj.is_list()) {
        if (obj.is_undefined()) return Value();
        value_error(fmt::format("'{}' object is not subscriptable", obj.type_name()));
    }
    auto n = static_cast<int64_t>(obj.is_string() ? cps.size() : obj.as_list()->items.size());
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
    std::vector<size_t> picks;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        picks.push_back(static_cast<size_t>(i));
        if (__builtin_add_overflow(i, step, &i)) break;
    }
    if (obj.is_string()) {
        std::vector<uint32_t> out;
        for (size_t i : picks) out.push_back(cps[i]);
        return Value(utf8_encode(out, 0, out.size()));
    }
    std::vector<Value> out;
    for (size_t i : picks) out.push_back(obj.as_list()->items[i]);
    return Value::list(std::move(out));
}

void add_globals(Dict& globals, const BuiltinEnv& env) {
    const BuiltinEnv* e = &env;
    add_function(globals, "range", [e](CallArgs& a) { return make_range(a, *e); });
    add_function(globals, "dict", [](CallArgs& a) { return make_dict(a, false); });
    add_function(globals, "namespace", [](CallArgs& a) { return make_dict(a, true); });
    add_function(globals, "raise_exception", [](CallArgs& a) -> Value {
        throw RaisedError{a.get_or(0, "message", Value("")).str()};
    });
    add_function(globals, "strftime_now", [e](CallArgs& a) { return strftime_now(a, *e); });
}

Value binary_op(std::string_view op, const Value& a, const Value& b, const BuiltinEnv& env) {
    if (op == "+") {
        if (a.is_string() && b.is_string()) {
            env.check_size(a.as_string().size() + b.as_string().size());
            return Value(a.as_string() + b.as_string());
        }
        if (a.is_list() && b.is_list()) {
            std::vector<Value> out = a.as_list()->items;
            out.insert(out.end(), b.as_list()->items.begin(), b.as_list()->items.end());
            env.check_size(out.size());
            return Value::list(std::move(out));
        }
    }
    if (op == "*") {
        if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), env);
        if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), env);
    }
    return arithmetic(op, a, b);
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind()) {
        case Value::Kind::Undefined: return false;
        case Value::Kind::String:
            if (!item.is_string())
                value_error(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
            return container.as_string().find(item.as_string()) != std::string::npos;
        case Value::Kind::List:
            for (const Value& v : container.as_list()->items)
                if (equals(v, item)) return true;
            return false;
        case Value::Kind::Dict: return container.as_dict()->find(item) != nullptr;
        default: value_error(fmt::format("argument of type '{}' is not iterable", container.type_name()));
    }
}

}  // namespace quill::chat::jinja
