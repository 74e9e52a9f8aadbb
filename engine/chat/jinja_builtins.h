// What templates can call: filters (x | name), tests (x is name), methods on str and dict, attribute and item
// access, slicing, and the global functions (range, dict, namespace, raise_exception, strftime_now).
// Failures throw ValueError; the evaluator adds the template position.
#pragma once

#include "engine/chat/jinja_value.h"

#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quill::chat::jinja {

// raise_exception(msg) in a template: the renderer reports msg as is.
struct RaisedError {
    std::string message;
};

// What builtins need from the render: the budget that every string, list and walk is charged to, and the clock.
struct BuiltinEnv {
    Budget& budget;
    std::optional<std::tm> now;  // strftime_now's time; nullopt: the local clock
};

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(std::string_view name, const Value& v, const CallArgs& args, const BuiltinEnv& env);
bool apply_test(std::string_view name, const Value& v, const CallArgs& args, const BuiltinEnv& env);

// The items a for loop visits: a list's items, a dict's keys, a string's characters; undefined gives none.
std::vector<Value> iterate(const Value& v, const BuiltinEnv& env);
// A new list value of these items: a BudgetError past the list limit; the items count as allocated.
Value make_list(std::vector<Value> items, const BuiltinEnv& env);
// d[key] = value, counted as allocated.
void set_item(Dict& d, const Value& key, Value value, Budget& budget);

// Reading an attribute, item or slice of undefined is an error, as Jinja2's Undefined raises (the undefined that
// a missing key gives may be printed, tested and compared, not read further).
// obj.name: a str or dict method bound to obj, else the dict key; undefined when there is neither.
Value get_attr(const Value& obj, std::string_view name, const BuiltinEnv& env);
// obj[key]: list or string index (negative from the end), dict key, else a method name; undefined when missing.
Value get_item(const Value& obj, const Value& key, const BuiltinEnv& env);
// obj[start:stop:step] on a list or a string (code points), with Python's rules for negative and absent bounds.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step, const BuiltinEnv& env);

// Sets range, dict, namespace, raise_exception and strftime_now in `globals`.
void add_globals(Dict& globals, const BuiltinEnv& env);

// Binary operators with Python semantics: + - * / // % ** (~ is done by the evaluator).
Value binary_op(std::string_view op, const Value& a, const Value& b, const BuiltinEnv& env);
// `a in b`: substring, list item, dict key.
bool contains(const Value& container, const Value& item, const BuiltinEnv& env);

}  // namespace quill::chat::jinja
