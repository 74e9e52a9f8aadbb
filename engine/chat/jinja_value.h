// The values a chat template computes with, with Python's semantics as Jinja2 gives them: undefined, none, bool,
// int (64-bit; overflow is an error, not a bigint), float, str (UTF-8; lengths and slices count code points),
// list, dict (insertion-ordered; a namespace is a dict whose attributes may be assigned) and callables.
// Lists and dicts are shared by reference, as in Python.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace quill::chat::jinja {

class Value;
struct List;
struct Dict;
struct Callable;
using ListPtr = std::shared_ptr<List>;
using DictPtr = std::shared_ptr<Dict>;
using CallablePtr = std::shared_ptr<Callable>;

// A failure while computing; the evaluator adds the template name and position. Not a quill::Error on purpose:
// only TemplateError leaves the renderer.
struct ValueError {
    std::string message;
};
[[noreturn]] void value_error(std::string message);

class Value {
public:
    enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

    Value() = default;  // undefined
    static Value none() { return Value(Storage(nullptr)); }
    Value(bool b) : v_(b) {}                         // NOLINT: implicit by design
    Value(int64_t i) : v_(i) {}                      // NOLINT
    Value(int i) : v_(int64_t(i)) {}                 // NOLINT
    Value(double f) : v_(f) {}                       // NOLINT
    Value(std::string s) : v_(std::move(s)) {}       // NOLINT
    Value(std::string_view s) : v_(std::string(s)) {}  // NOLINT
    Value(const char* s) : v_(std::string(s)) {}     // NOLINT
    Value(ListPtr l) : v_(std::move(l)) {}           // NOLINT
    Value(DictPtr d) : v_(std::move(d)) {}           // NOLINT
    Value(CallablePtr c) : v_(std::move(c)) {}       // NOLINT
    static Value from_json(const nlohmann::json& j);
    static Value from_json(const nlohmann::ordered_json& j);
    static Value list(std::vector<Value> items);
    static Value tuple(std::vector<Value> items);  // a list that prints as (a, b)

    Kind kind() const { return static_cast<Kind>(v_.index()); }
    bool is_undefined() const { return kind() == Kind::Undefined; }
    bool is_none() const { return kind() == Kind::None; }
    bool is_bool() const { return kind() == Kind::Bool; }
    bool is_int() const { return kind() == Kind::Int; }
    bool is_float() const { return kind() == Kind::Float; }
    bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is a number
    bool is_string() const { return kind() == Kind::String; }
    bool is_list() const { return kind() == Kind::List; }
    bool is_dict() const { return kind() == Kind::Dict; }
    bool is_callable() const { return kind() == Kind::Callable; }

    bool as_bool() const { return std::get<bool>(v_); }
    int64_t as_int() const;      // int or bool
    double as_double() const;    // any number
    const std::string& as_string() const { return std::get<std::string>(v_); }
    const ListPtr& as_list() const { return std::get<ListPtr>(v_); }
    const DictPtr& as_dict() const { return std::get<DictPtr>(v_); }
    const CallablePtr& as_callable() const { return std::get<CallablePtr>(v_); }

    bool truthy() const;
    std::string str() const;   // Python str(): what {{ }} prints (undefined prints "")
    std::string repr() const;  // Python repr(): how items print inside a list or dict
    std::string type_name() const;
    // Python json.dumps(self, ensure_ascii=False, indent=indent, sort_keys=sort_keys); indent < 0 means none.
    std::string to_json(int indent = -1, bool sort_keys = false) const;

private:
    using Storage = std::variant<std::monostate, std::nullptr_t, bool, int64_t, double, std::string, ListPtr,
                                 DictPtr, CallablePtr>;
    explicit Value(Storage s) : v_(std::move(s)) {}
    Storage v_;
};

// Nesting is unbounded in principle, so containers free their children without recursion, and every recursive
// walk (str, equality, tojson) stops with a ValueError past kMaxNesting levels.
constexpr int kMaxNesting = 512;

struct List {
    std::vector<Value> items;
    bool is_tuple = false;  // only changes how it prints
    List() = default;
    explicit List(std::vector<Value> v) : items(std::move(v)) {}
    List(const List&) = delete;
    List& operator=(const List&) = delete;
    ~List();
};

// Insertion-ordered dict. Keys are hashable scalars (str, int, float, bool, none), compared as Python does
// (1 == 1.0 == True).
struct Dict {
    std::vector<std::pair<Value, Value>> items;
    bool is_namespace = false;

    Dict() = default;
    Dict(const Dict&) = delete;
    Dict& operator=(const Dict&) = delete;
    ~Dict();
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const { return find(Value(key)); }
    void set(const Value& key, Value value);

private:
    std::unordered_map<std::string, size_t> index_;  // hash key -> position in items
};

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;

    // The argument at position i or with this keyword (positional first), or nullopt.
    std::optional<Value> get(size_t i, std::string_view keyword_name) const;
    Value get_or(size_t i, std::string_view keyword_name, Value fallback) const;
};

// Anything callable from a template: a macro, a global function, a bound method, loop.cycle. A macro's function
// refers to the render that made it; no value outlives its render.
struct Callable {
    std::string name;
    Value bound_self;  // the str or dict a method is bound to; undefined otherwise
    std::function<Value(CallArgs& args)> fn;
};

// Python equality (1 == 1.0, lists elementwise, undefined == undefined).
bool equals(const Value& a, const Value& b);
// Python ordering for <, <=, >, >=: numbers, strings (by code point), lists lexicographically; else ValueError.
int compare(const Value& a, const Value& b);

// Python's repr of a float (shortest round-trip digits; "1e-05", "1e+16", "2.0").
std::string format_float(double f);
// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string repr_string(std::string_view s);

// UTF-8 helpers: text as code points (invalid bytes pass through as single units) and back.
std::vector<uint32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);
void append_utf8(std::string& out, uint32_t cp);
size_t utf8_length(std::string_view s);

}  // namespace quill::chat::jinja
