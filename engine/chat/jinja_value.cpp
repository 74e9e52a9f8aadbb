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
Value from_json_at(const Json& j, int depth) {
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
        case Json::value_t::string: return Value(j.template get<std::string>());
        case Json::value_t::array: {
            auto l = std::make_shared<List>();
            for (const auto& item : j) l->items.push_back(from_json_at(item, depth + 1));
            return Value(l);
        }
        case Json::value_t::object: {
            auto d = std::make_shared<Dict>();
            for (auto it = j.begin(); it != j.end(); ++it) d->set(Value(it.key()), from_json_at(it.value(), depth + 1));
            return Value(d);
        }
        default: return Value::none();  // binary and discarded values have no template meaning
    }
}

void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
                else out += c;
        }
    }
    out += '"';
}

std::string json_float(double f) {
    if (std::isnan(f)) return "NaN";
    if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
    return format_float(f);
}

void to_json_at(const Value& v, std::string& out, int indent, bool sort_keys, int level) {
    check_depth(level);
    auto newline = [&](int lvl) {
        if (indent < 0) return;
        out += '\n';
        out.append(static_cast<size_t>(indent) * static_cast<size_t>(lvl), ' ');
    };
    const char* item_sep = indent < 0 ? ", " : ",";
    switch (v.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None: out += "null"; return;
        case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
        case Value::Kind::Int: out += std::to_string(v.as_int()); return;
        case Value::Kind::Float: out += json_float(v.as_double()); return;
        case Value::Kind::String: append_json_string(out, v.as_string()); return;
        case Value::Kind::List: {
            const auto& items = v.as_list()->items;
            if (items.empty()) { out += "[]"; return; }
            out += '[';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += item_sep;
                newline(level + 1);
                to_json_at(items[i], out, indent, sort_keys, level + 1);
            }
            newline(level);
            out += ']';
            return;
        }
        case Value::Kind::Dict: {
            std::vector<const std::pair<Value, Value>*> items;
            for (const auto& kv : v.as_dict()->items) items.push_back(&kv);
            if (items.empty()) { out += "{}"; return; }
            if (sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](auto* a, auto* b) { return compare(a->first, b->first) < 0; });
            out += '{';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += item_sep;
                newline(level + 1);
                const Value& key = items[i]->first;
                append_json_string(out, key.is_string() ? key.as_string() : key.to_json());
                out += ": ";
                to_json_at(items[i]->second, out, indent, sort_keys, level + 1);
            }
            newline(level);
            out += '}';
            return;
        }
        case Value::Kind::Callable:
            value_error(fmt::format("Object of type function is not JSON serializable ({})", v.as_callable()->name));
    }
}

void str_at(const Value& v, std::string& out, bool as_repr, int depth) {
    check_depth(depth);
    switch (v.kind()) {
        case Value::Kind::Undefined: return;
        case Value::Kind::None: out += "None"; return;
        case Value::Kind::Bool: out += v.as_bool() ? "True" : "False"; return;
        case Value::Kind::Int: out += std::to_string(v.as_int()); return;
        case Value::Kind::Float: out += format_float(v.as_double()); return;
        case Value::Kind::String: out += as_repr ? repr_string(v.as_string()) : v.as_string(); return;
        case Value::Kind::List: {
            bool tuple = v.as_list()->is_tuple;
            out += tuple ? '(' : '[';
            const auto& items = v.as_list()->items;
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += ", ";
                str_at(items[i], out, true, depth + 1);
            }
            if (tuple && items.size() == 1) out += ',';
            out += tuple ? ')' : ']';
            return;
        }
        case Value::Kind::Dict: {
            out += v.as_dict()->is_namespace ? "<Namespace {" : "{";
            bool first = true;
            for (const auto& [k, item] : v.as_dict()->items) {
                if (!first) out += ", ";
                first = false;
                str_at(k, out, true, depth + 1);
                out += ": ";
                str_at(item, out, true, depth + 1);
            }
            out += v.as_dict()->is_namespace ? "}>" : "}";
            return;
        }
        case Value::Kind::Callable: out += "<function " + v.as_callable()->name + ">"; return;
    }
}

bool equals_at(const Value& a, const Value& b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None: return true;
        case Value::Kind::String: return a.as_string() == b.as_string();
        case Value::Kind::List: {
            const auto& x = a.as_list()->items;
            const auto& y = b.as_list()->items;
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equals_at(x[i], y[i], depth + 1)) return false;
            return true;
        }
        case Value::Kind::Dict: {
            const auto& x = *a.as_dict();
            const auto& y = *b.as_dict();
            if (x.items.size() != y.items.size()) return false;
            for (const auto& [k, item] : x.items) {
                const Value* other = y.find(k);
                if (!other || !equals_at(item, *other, depth + 1)) return false;
            }
            return true;
        }
        case Value::Kind::Callable: return a.as_callable() == b.as_callable();
        default: return false;
    }
}

int compare_at(const Value& a, const Value& b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            double x = a.as_double(), y = b.as_double();
            return x < y ? -1 : (x > y ? 1 : 0);
        }
        int64_t x = a.as_int(), y = b.as_int();
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.is_string() && b.is_string()) {
        int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
        return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.is_list() && b.is_list()) {
        const auto& x = a.as_list()->items;
        const auto& y = b.as_list()->items;
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (equals_at(x[i], y[i], depth + 1)) continue;
            return compare_at(x[i], y[i], depth + 1);
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

Value Value::from_json(const nlohmann::json& j) {
    return from_json_at(j, 0);
}

Value Value::from_json(const nlohmann::ordered_json& j) {
    return from_json_at(j, 0);
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
        case Kind::List: return !as_list()->items.empty();
        case Kind::Dict: return as_dict()->is_namespace || !as_dict()->items.empty();
        case Kind::Callable: return true;
    }
    return false;
}

std::string Value::str() const {
    if (is_string()) return as_string();
    std::string out;
    str_at(*this, out, false, 0);
    return out;
}

std::string Value::repr() const {
    std::string out;
    str_at(*this, out, true, 0);
    return out;
}

std::string Value::type_name() const {
    switch (kind()) {
        case Kind::Undefined: return "undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::String: return "str";
        case Kind::List: return "list";
        case Kind::Dict: return as_dict()->is_namespace ? "Namespace" : "dict";
        case Kind::Callable: return "function";
    }
    return "?";
}

std::string Value::to_json(int indent, bool sort_keys) const {
    std::string out;
    to_json_at(*this, out, indent, sort_keys, 0);
    return out;
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

std::optional<Value> CallArgs::get(size_t i, std::string_view keyword_name) const {
    if (i < positional.size()) return positional[i];
    for (const auto& [k, v] : keyword)
        if (k == keyword_name) return v;
    return std::nullopt;
}

Value CallArgs::get_or(size_t i, std::string_view keyword_name, Value fallback) const {
    auto v = get(i, keyword_name);
    return v ? *v : std::move(fallback);
}

bool equals(const Value& a, const Value& b) {
    return equals_at(a, b, 0);
}

int compare(const Value& a, const Value& b) {
    return compare_at(a, b, 0);
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

std::string repr_string(std::string_view s) {
    char quote = (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) ? '"' : '\'';
    std::string out(1, quote);
    for (char c : s) {
        auto u = static_cast<unsigned char>(c);
        if (c == quote || c == '\\') { out += '\\'; out += c; }
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
        else out += c;
    }
    out += quote;
    return out;
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = n > 0 && i + n <= s.size();
        for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
        if (!ok) {
            cps.push_back(0x80000000u | c);  // a stray byte, kept as itself
            ++i;
            continue;
        }
        uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
        for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
        cps.push_back(cp);
        i += n;
    }
    return cps;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp & 0x80000000u) {
        out += static_cast<char>(cp & 0xff);
    } else if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
    std::string out;
    for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
    return out;
}

size_t utf8_length(std::string_view s) {
    if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return s.size();
    return utf8_decode(s).size();
}

}  // namespace quill::chat::jinja
