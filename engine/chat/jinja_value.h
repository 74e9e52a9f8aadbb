// The values a chat template computes with, with Python's semantics as Jinja2 gives them: undefined, none, bool,
// int (64-bit; overflow is an error, not a bigint), float, str (UTF-8 with provenance, see jinja_string.h;
// lengths and slices count code points), list, dict (insertion-ordered; a namespace is a dict whose attributes
// may be assigned) and callables. Strings are immutable and shared; lists and dicts are shared by reference, as in
// Python. Everything that walks a value (printing, comparing, serializing) is charged to the render's Budget.
#pragma once

#include "engine/chat/jinja_string.h"

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
using TextPtr = std::shared_ptr<const Text>;

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
    Value(bool b) : v_(b) {}                                                   // NOLINT: implicit by design
    Value(int64_t i) : v_(i) {}                                                // NOLINT
    Value(int i) : v_(int64_t(i)) {}                                           // NOLINT
    Value(double f) : v_(f) {}                                                 // NOLINT
    Value(Text t) : v_(std::make_shared<const Text>(std::move(t))) {}          // NOLINT
    Value(std::string s) : v_(std::make_shared<const Text>(std::move(s))) {}  // NOLINT: trusted text
    Value(std::string_view s) : Value(std::string(s)) {}                       // NOLINT
    Value(const char* s) : Value(std::string(s)) {}                            // NOLINT
    Value(ListPtr l) : v_(std::move(l)) {}                                     // NOLINT
    Value(DictPtr d) : v_(std::move(d)) {}                                     // NOLINT
    Value(CallablePtr c) : v_(std::move(c)) {}                                 // NOLINT
    // Strings and keys of j are untrusted input when `untrusted`.
    static Value from_json(const nlohmann::json& j, bool untrusted);
    static Value from_json(const nlohmann::ordered_json& j, bool untrusted);
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
    const std::string& as_string() const { return std::get<TextPtr>(v_)->bytes; }
    const Text& as_text() const { return *std::get<TextPtr>(v_); }
    const ListPtr& as_list() const { return std::get<ListPtr>(v_); }
    const DictPtr& as_dict() const { return std::get<DictPtr>(v_); }
    const CallablePtr& as_callable() const { return std::get<CallablePtr>(v_); }

    bool truthy() const;
    std::string type_name() const;

private:
    using Storage = std::variant<std::monostate, std::nullptr_t, bool, int64_t, double, TextPtr, ListPtr, DictPtr,
                                 CallablePtr>;
    explicit Value(Storage s) : v_(std::move(s)) {}
    Storage v_;
};

// Nesting is unbounded in principle, so containers free their children without recursion, and every recursive
// walk (str, equality, tojson) stops with a ValueError past kMaxNesting levels. A value shared many times over
// (a list holding itself twice, doubled sixty times) costs each walk its full unshared size, charged as steps.
constexpr int kMaxNesting = 512;
// What a new string value costs beyond its bytes (the shared Text and its control block), for the memory budget.
constexpr size_t kStringOverhead = sizeof(Text) + 32;

struct List {
    std::vector<Value> items;
    bool is_tuple = false;      // only changes how it prints
    bool is_generator = false;  // what map, select, reject, selectattr, rejectattr and unique give (Python
                                // generators in Jinja2): true even when empty, and len(), [i] and tojson fail
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

    // The argument at position i or with this keyword (positional first), or nullopt / null.
    std::optional<Value> get(size_t i, std::string_view keyword_name) const;
    const Value* find(size_t i, std::string_view keyword_name) const;
    Value get_or(size_t i, std::string_view keyword_name, Value fallback) const;
};

// Anything callable from a template: a macro, a global function, a bound method, loop.cycle. A macro's function
// refers to the render that made it; no value outlives its render.
struct Callable {
    std::string name;
    Value bound_self;  // the str or dict a method is bound to; undefined otherwise
    std::function<Value(CallArgs& args)> fn;
};

// Python str(v), what {{ }} prints (undefined prints ""), appended to out: a string with its provenance; inside a
// list or dict, each string's repr is untrusted when any byte of the string is.
void append_str(Text& out, const Value& v, Budget& budget);
// Python str(v) as a value of its own (a string is returned as is).
Value to_str(const Value& v, Budget& budget);
// Python json.dumps(v, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys); indent < 0 means none. A
// string (or key) is untrusted in the output when any of its bytes is.
struct JsonStyle {
    int indent = -1;
    bool sort_keys = false;
    bool ensure_ascii = false;
};
Text to_json(const Value& v, const JsonStyle& style, Budget& budget);

// Python equality (1 == 1.0, lists elementwise, undefined == undefined).
bool equals(const Value& a, const Value& b, Budget& budget);
// Python ordering for <, <=, >, >=: numbers, strings (by code point), lists lexicographically; else ValueError.
int compare(const Value& a, const Value& b, Budget& budget);

// Python's repr of a float (shortest round-trip digits; "1e-05", "1e+16", "2.0").
std::string format_float(double f);

}  // namespace quill::chat::jinja
