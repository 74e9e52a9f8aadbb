#include "engine/chat/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace quill::chat::jinja {

void value_error(std::string message) {
    throw ValueError{std::move(message)};
}

namespace {

void check_depth(int depth) {
    if (depth > kMaxNesting) value_error(fmt::format("values nested more than {} levels deep", kMaxNesting));
}

// Moves the children that only this container holds onto a work list, so that freeing a deep chain of
// containers takes no stack.
void release_iteratively(std::vector<Value>& work) {
    while (!work.empty()) {
        Value v = std::move(work.back());
        work.pop_back();
        if (v.is_list() && v.as_list().use_count() == 1) {
            for (auto& item : v.as_list()->items) work.push_back(std::move(item));
            v.as_list()->items.clear();
        } else if (v.is_dict() && v.as_dict().use_count() == 1) {
            for (auto& [k, item] : v.as_dict()->items) work.push_back(std::move(item));
            v.as_dict()->items.clear();
        }
    }
}

// The dict index key: equal Python keys (1, 1.0, True) share one.
std::string hash_key(const Value& key) {
    std::string out;
    switch (key.kind()) {
        case Value::Kind::String:
            out.reserve(key.as_string().size() + 1);
            out += 's';
            out += key.as_string();
            return out;
        case Value::Kind::Int:
        case Value::Kind::Bool: return fmt::format("i{}", key.as_int());
        case Value::Kind::Float: {
            double f = key.as_double();
            if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18)
                return fmt::format("i{}", static_cast<int64_t>(f));
            return fmt::format("f{}", format_float(f));
        }
        case Value::Kind::None: return "n";
        default: value_error(fmt::format("unhashable type: '{}'", key.type_name()));
    }
}

template <class Json>
Value from_json_at(const Json& j, int depth, bool untrusted) {
    check_depth(depth);
    switch (j.type()) {
        case Json::value_t::null: return Value::none();
        case Json::value_t::boolean: return Value(j.template get<bool>());
        case Json::value_t::number_integer: return Value(j.template get<int64_t>());
        case Json::value_t::number_unsigned: {
            auto u = j.template get<uint64_t>();
            if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value(static_cast<int64_t>(u));
            return Value(static_cast<double>(u));
        }
        case Json::value_t::number_float: return Value(j.template get<double>());
        case Json::value_t::string: return Value(Text(j.template get<std::string>(), untrusted));
        case Json::value_t::array: {
            auto l = std::make_shared<List>();
            for (const auto& item : j) l->items.push_back(from_json_at(item, depth + 1, untrusted));
            return Value(l);
        }
        case Json::value_t::object: {
            auto d = std::make_shared<Dict>();
            for (auto it = j.begin(); it != j.end(); ++it)
                d->set(Value(Text(it.key(), untrusted)), from_json_at(it.value(), depth + 1, untrusted));
            return Value(d);
        }
        default: return Value::none();  // binary and discarded values have no template meaning
    }
}

// Appends f(chunk, c) for each byte of s, a few KiB of input at a time, so that the string limit is checked as an
// escaped form grows (it may be several times longer than s).
template <class F>
void append_escaped(Text& out, std::string_view s, bool untrusted, Budget& budget, F escape) {
    constexpr size_t kChunk = 4096;
    std::string chunk;
    for (size_t i = 0; i < s.size(); i += kChunk) {
        chunk.clear();
        for (char c : s.substr(i, kChunk)) escape(chunk, c);
        append(out, chunk, budget, untrusted);
    }
}

// One byte of a JSON string as json.dumps writes it: quotes, backslashes and control bytes escaped.
void json_escape_byte(std::string& o, char c) {
    switch (c) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\n': o += "\\n"; break;
        case '\r': o += "\\r"; break;
        case '\t': o += "\\t"; break;
        case '\b': o += "\\b"; break;
        case '\f': o += "\\f"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) o += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
            else o += c;
    }
}

// json.dumps(ensure_ascii=True): each code point past ASCII as \uXXXX, past U+FFFF as a surrogate pair (a byte
// that is not UTF-8 as the code point of its value), a few KiB of input at a time as append_escaped does.
void append_json_ascii(Text& out, std::string_view s, bool untrusted, Budget& budget) {
    constexpr size_t kChunk = 4096;
    std::string chunk;
    for (size_t i = 0; i < s.size();) {
        size_t n = 0;
        uint32_t c = utf8_next(s, i, n);
        if (c & 0x80000000u) c &= 0xff;
        if (c < 0x80) {
            json_escape_byte(chunk, static_cast<char>(c));
        } else if (c > 0xffff) {
            c -= 0x10000;
            chunk += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff));
        } else {
            chunk += fmt::format("\\u{:04x}", c);
        }
        i += n;
        if (chunk.size() >= kChunk || i == s.size()) {
            append(out, chunk, budget, untrusted);
            chunk.clear();
        }
    }
}

void append_json_string(Text& out, const Text& s, bool ensure_ascii, Budget& budget) {
    const bool untrusted = s.any_untrusted();
    append(out, "\"", budget, untrusted);
    if (ensure_ascii) append_json_ascii(out, s.bytes, untrusted, budget);
    else append_escaped(out, s.bytes, untrusted, budget, json_escape_byte);
    append(out, "\"", budget, untrusted);
}

// Python's repr of a str, appended: single quotes unless the text holds ' and no ".
void append_repr_string(Text& out, const Text& s, Budget& budget) {
    const std::string& b = s.bytes;
    budget.bytes(b.size());
    const char quote = (b.find('\'') != std::string::npos && b.find('"') == std::string::npos) ? '"' : '\'';
    const bool untrusted = s.any_untrusted();
    append(out, std::string_view(&quote, 1), budget, untrusted);
    append_escaped(out, b, untrusted, budget, [quote](std::string& o, char c) {
        auto u = static_cast<unsigned char>(c);
        if (c == quote || c == '\\') { o += '\\'; o += c; }
        else if (c == '\n') o += "\\n";
        else if (c == '\r') o += "\\r";
        else if (c == '\t') o += "\\t";
        else if (u < 0x20 || u == 0x7f) o += fmt::format("\\x{:02x}", u);
        else o += c;
    });
    append(out, std::string_view(&quote, 1), budget, untrusted);
}

std::string json_float(double f) {
    if (std::isnan(f)) return "NaN";
    if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
    return format_float(f);
}

void to_json_at(const Value& v, Text& out, const JsonStyle& style, int level, Budget& budget) {
    const int indent = style.indent;
    check_depth(level);
    budget.step();
    auto put = [&](std::string_view s) { append(out, s, budget); };
    auto newline = [&](int lvl) {
        if (indent < 0) return;
        put("\n");
        const size_t width = static_cast<size_t>(indent) * static_cast<size_t>(lvl);
        budget.check_string(out.size() + width);
        put(std::string(width, ' '));
    };
    const char* item_sep = indent < 0 ? ", " : ",";
    switch (v.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None: put("null"); return;
        case Value::Kind::Bool: put(v.as_bool() ? "true" : "false"); return;
        case Value::Kind::Int: put(std::to_string(v.as_int())); return;
        case Value::Kind::Float: put(json_float(v.as_double())); return;
        case Value::Kind::String: append_json_string(out, v.as_text(), style.ensure_ascii, budget); return;
        case Value::Kind::List: {
            if (v.as_list()->is_generator) value_error("Object of type generator is not JSON serializable");
            const auto& items = v.as_list()->items;
            if (items.empty()) { put("[]"); return; }
            put("[");
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) put(item_sep);
                newline(level + 1);
                to_json_at(items[i], out, style, level + 1, budget);
            }
            newline(level);
            put("]");
            return;
        }
        case Value::Kind::Dict: {
            std::vector<const std::pair<Value, Value>*> items;
            budget.alloc(v.as_dict()->items.size() * sizeof(void*));
            for (const auto& kv : v.as_dict()->items) items.push_back(&kv);
            if (items.empty()) { put("{}"); return; }
            if (style.sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [&](auto* a, auto* b) { return compare(a->first, b->first, budget) < 0; });
            put("{");
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) put(item_sep);
                newline(level + 1);
                const Value& key = items[i]->first;
                const Text key_text = key.is_string() ? key.as_text() : to_json(key, JsonStyle{}, budget);
                append_json_string(out, key_text, style.ensure_ascii, budget);
                put(": ");
                to_json_at(items[i]->second, out, style, level + 1, budget);
            }
            newline(level);
            put("}");
            return;
        }
        case Value::Kind::Callable:
            value_error(fmt::format("Object of type function is not JSON serializable ({})", v.as_callable()->name));
    }
}

void str_at(const Value& v, Text& out, bool as_repr, int depth, Budget& budget) {
    check_depth(depth);
    budget.step();
    auto put = [&](std::string_view s) { append(out, s, budget); };
    switch (v.kind()) {
        case Value::Kind::Undefined: return;
        case Value::Kind::None: put("None"); return;
        case Value::Kind::Bool: put(v.as_bool() ? "True" : "False"); return;
        case Value::Kind::Int: put(std::to_string(v.as_int())); return;
        case Value::Kind::Float: put(format_float(v.as_double())); return;
        case Value::Kind::String:
            if (as_repr) append_repr_string(out, v.as_text(), budget);
            else append(out, v.as_text(), budget);
            return;
        case Value::Kind::List: {
            bool tuple = v.as_list()->is_tuple;
            put(tuple ? "(" : "[");
            const auto& items = v.as_list()->items;
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) put(", ");
                str_at(items[i], out, true, depth + 1, budget);
            }
            if (tuple && items.size() == 1) put(",");
            put(tuple ? ")" : "]");
            return;
        }
        case Value::Kind::Dict: {
            put(v.as_dict()->is_namespace ? "<Namespace {" : "{");
            bool first = true;
            for (const auto& [k, item] : v.as_dict()->items) {
                if (!first) put(", ");
                first = false;
                str_at(k, out, true, depth + 1, budget);
                put(": ");
                str_at(item, out, true, depth + 1, budget);
            }
            put(v.as_dict()->is_namespace ? "}>" : "}");
            return;
        }
        case Value::Kind::Callable: put("<function " + v.as_callable()->name + ">"); return;
    }
}

bool equals_at(const Value& a, const Value& b, int depth, Budget& budget) {
    check_depth(depth);
    budget.step();
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None: return true;
        case Value::Kind::String:
            budget.bytes(std::min(a.as_string().size(), b.as_string().size()));
            return a.as_string() == b.as_string();
        case Value::Kind::List: {
            const auto& x = a.as_list()->items;
            const auto& y = b.as_list()->items;
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equals_at(x[i], y[i], depth + 1, budget)) return false;
            return true;
        }
        case Value::Kind::Dict: {
            const auto& x = *a.as_dict();
            const auto& y = *b.as_dict();
            if (x.items.size() != y.items.size()) return false;
            for (const auto& [k, item] : x.items) {
                if (k.is_string()) budget.bytes(k.as_string().size());
                const Value* other = y.find(k);
                if (!other || !equals_at(item, *other, depth + 1, budget)) return false;
            }
            return true;
        }
        case Value::Kind::Callable: return a.as_callable() == b.as_callable();
        default: return false;
    }
}

int compare_at(const Value& a, const Value& b, int depth, Budget& budget) {
    check_depth(depth);
    budget.step();
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            double x = a.as_double(), y = b.as_double();
            return x < y ? -1 : (x > y ? 1 : 0);
        }
        int64_t x = a.as_int(), y = b.as_int();
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.is_string() && b.is_string()) {
        budget.bytes(std::min(a.as_string().size(), b.as_string().size()));
        int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
        return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.is_list() && b.is_list()) {
        const auto& x = a.as_list()->items;
        const auto& y = b.as_list()->items;
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (equals_at(x[i], y[i], depth + 1, budget)) continue;
            return compare_at(x[i], y[i], depth + 1, budget);
        }
        return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    }
    value_error(fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

}  // namespace

List::~List() {
    release_iteratively(items);
}

Dict::~Dict() {
    std::vector<Value> work;
    for (auto& kv : items) work.push_back(std::move(kv.second));
    items.clear();
    release_iteratively(work);
}

Value Value::from_json(const nlohmann::json& j, bool untrusted) {
    return from_json_at(j, 0, untrusted);
}

Value Value::from_json(const nlohmann::ordered_json& j, bool untrusted) {
    return from_json_at(j, 0, untrusted);
}

Value Value::list(std::vector<Value> items) {
    return Value(std::make_shared<List>(std::move(items)));
}

Value Value::tuple(std::vector<Value> items) {
    auto l = std::make_shared<List>(std::move(items));
    l->is_tuple = true;
    return Value(l);
}

int64_t Value::as_int() const {
    if (is_bool()) return as_bool() ? 1 : 0;
    return std::get<int64_t>(v_);
}

double Value::as_double() const {
    if (is_float()) return std::get<double>(v_);
    return static_cast<double>(as_int());
}

bool Value::truthy() const {
    switch (kind()) {
        case Kind::Undefined:
        case Kind::None: return false;
        case Kind::Bool: return as_bool();
        case Kind::Int: return as_int() != 0;
        case Kind::Float: return as_double() != 0.0;
        case Kind::String: return !as_string().empty();
        case Kind::List: return as_list()->is_generator || !as_list()->items.empty();
        case Kind::Dict: return as_dict()->is_namespace || !as_dict()->items.empty();
        case Kind::Callable: return true;
    }
    return false;
}

std::string Value::type_name() const {
    switch (kind()) {
        case Kind::Undefined: return "undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::String: return "str";
        case Kind::List: return as_list()->is_generator ? "generator" : "list";
        case Kind::Dict: return as_dict()->is_namespace ? "Namespace" : "dict";
        case Kind::Callable: return "function";
    }
    return "?";
}

const Value* Dict::find(const Value& key) const {
    auto it = index_.find(hash_key(key));
    return it == index_.end() ? nullptr : &items[it->second].second;
}

void Dict::set(const Value& key, Value value) {
    auto [it, inserted] = index_.try_emplace(hash_key(key), items.size());
    if (inserted) items.emplace_back(key, std::move(value));
    else items[it->second].second = std::move(value);
}

const Value* CallArgs::find(size_t i, std::string_view keyword_name) const {
    if (i < positional.size()) return &positional[i];
    for (const auto& [k, v] : keyword)
        if (k == keyword_name) return &v;
    return nullptr;
}

std::optional<Value> CallArgs::get(size_t i, std::string_view keyword_name) const {
    const Value* v = find(i, keyword_name);
    if (!v) return std::nullopt;
    return *v;
}

Value CallArgs::get_or(size_t i, std::string_view keyword_name, Value fallback) const {
    auto v = get(i, keyword_name);
    return v ? *v : std::move(fallback);
}

void append_str(Text& out, const Value& v, Budget& budget) {
    str_at(v, out, false, 0, budget);
}

Value to_str(const Value& v, Budget& budget) {
    if (v.is_string()) return v;
    Text out;
    str_at(v, out, false, 0, budget);
    return Value(std::move(out));
}

Text to_json(const Value& v, const JsonStyle& style, Budget& budget) {
    Text out;
    to_json_at(v, out, style, 0, budget);
    return out;
}

bool equals(const Value& a, const Value& b, Budget& budget) {
    return equals_at(a, b, 0, budget);
}

int compare(const Value& a, const Value& b, Budget& budget) {
    return compare_at(a, b, 0, budget);
}

std::string format_float(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    // Shortest round-trip digits in scientific form, then laid out as Python's repr does.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    size_t e_pos = sci.find('e');
    int exp = std::stoi(sci.substr(e_pos + 1));
    std::string mant = sci.substr(0, e_pos);
    bool neg = mant[0] == '-';
    if (neg) mant.erase(0, 1);
    std::string digits;
    for (char c : mant)
        if (c != '.') digits += c;
    std::string out = neg ? "-" : "";
    if (exp < -4 || exp >= 16) {
        out += digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
    } else if (exp < 0) {
        out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else {
        auto int_len = static_cast<size_t>(exp) + 1;
        if (digits.size() <= int_len) {
            out += digits + std::string(int_len - digits.size(), '0') + ".0";
        } else {
            out += digits.substr(0, int_len) + "." + digits.substr(int_len);
        }
    }
    return out;
}

}  // namespace quill::chat::jinja
