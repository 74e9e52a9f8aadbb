#include "engine/grammar/schema_shape.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace quill::grammar {

namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// Schemas looked at for one oneOf ($ref, nested alternatives), and how deep: past either a schema counts as
// "anything", so that a recursive schema cannot make the check exponential or deep.
constexpr int kMaxVisits = 4096;
constexpr int kMaxDepth = 32;

// The JSON types a schema's values can have, a bit each (integer counts as number: 1 is both).
enum TypeBit : uint8_t { kNull = 1, kBoolean = 2, kObject = 4, kArray = 8, kString = 16, kNumber = 32, kAny = 63 };

// What a schema can be, as far as telling alternatives apart needs: its types, its values when they are a finite
// list (const, enum), and for an object-only schema the properties it requires, the finite values of those that
// have them (tags), its listed properties and whether it forbids others.
struct Shape {
    uint8_t types = kAny;
    std::optional<std::vector<json>> values;
    std::set<std::string> required, listed;
    bool closed = false;
    std::map<std::string, std::vector<json>> tags;
};

uint8_t type_bit(const ojson& t) {
    if (!t.is_string()) return kAny;
    const std::string& s = t.get_ref<const std::string&>();
    if (s == "null") return kNull;
    if (s == "boolean") return kBoolean;
    if (s == "object") return kObject;
    if (s == "array") return kArray;
    if (s == "string") return kString;
    if (s == "integer" || s == "number") return kNumber;
    return kAny;
}

uint8_t value_bit(const json& v) {
    if (v.is_null()) return kNull;
    if (v.is_boolean()) return kBoolean;
    if (v.is_object()) return kObject;
    if (v.is_array()) return kArray;
    if (v.is_string()) return kString;
    return kNumber;
}

// Values compare as JSON Schema does (1 equals 1.0, objects whatever their key order): as unordered json.
json plain(const ojson& v) { return json::parse(v.dump()); }

bool share_value(const std::vector<json>& a, const std::vector<json>& b) {
    for (const auto& x : a)
        for (const auto& y : b)
            if (x == y) return true;
    return false;
}

Shape with_null(Shape s) {
    if (s.types & kNull) return s;
    Shape out;
    out.types = s.types | kNull;
    out.values = std::move(s.values);
    if (out.values) out.values->push_back(nullptr);
    return out;
}

// What either a or b can be.
Shape join(const Shape& a, const Shape& b) {
    Shape out;
    out.types = a.types | b.types;
    if (a.values && b.values) {
        out.values = *a.values;
        out.values->insert(out.values->end(), b.values->begin(), b.values->end());
    }
    if (out.types != kObject) return out;
    for (const auto& [name, values] : a.tags) {  // a tag both have: either's values
        auto it = b.tags.find(name);
        if (it == b.tags.end()) continue;
        std::vector<json> both = values;
        both.insert(both.end(), it->second.begin(), it->second.end());
        out.tags.emplace(name, std::move(both));
    }
    for (const std::string& r : a.required)
        if (b.required.contains(r)) out.required.insert(r);
    return out;  // not closed: either may allow what the other forbids
}

class Shaper {
public:
    explicit Shaper(const ojson& root) : root_(root) {}

    Shape shape(const ojson& s, int depth = 0) {
        if (depth > kMaxDepth || ++visits_ > kMaxVisits || !s.is_object()) return {};
        Shape out = bare(s, depth + 1);
        return s.contains("nullable") && s["nullable"] == true ? with_null(std::move(out)) : out;
    }

private:
    Shape bare(const ojson& s, int depth) {
        if (s.contains("$ref")) {
            const ojson& r = s["$ref"];
            if (!r.is_string() || r.get_ref<const std::string&>().empty() || r.get_ref<const std::string&>()[0] != '#')
                return {};
            try {
                return shape(root_.at(ojson::json_pointer(r.get<std::string>().substr(1))), depth);
            } catch (const std::exception&) {
                return {};  // the conversion reports it
            }
        }
        if (s.contains("allOf") && s["allOf"].is_array() && s["allOf"].size() == 1) return shape(s["allOf"][0], depth);
        for (const char* key : {"anyOf", "oneOf"}) {
            if (!s.contains(key) || !s[key].is_array() || s[key].empty()) continue;
            Shape out = shape(s[key][0], depth);
            for (size_t i = 1; i < s[key].size(); ++i) out = join(out, shape(s[key][i], depth));
            return out;
        }
        Shape out;
        if (s.contains("const") || (s.contains("enum") && s["enum"].is_array())) {
            out.values.emplace();
            if (s.contains("const")) out.values->push_back(plain(s["const"]));
            else
                for (const auto& v : s["enum"]) out.values->push_back(plain(v));
            out.types = 0;
            for (const auto& v : *out.values) out.types |= value_bit(v);
            return out;
        }
        if (s.contains("type")) {
            const ojson& t = s["type"];
            out.types = t.is_array() ? 0 : type_bit(t);
            if (t.is_array())
                for (const auto& x : t) out.types |= type_bit(x);
        } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
            out.types = kObject;
        }
        if (out.types == kObject) object_parts(s, out, depth);
        return out;
    }

    void object_parts(const ojson& s, Shape& out, int depth) {
        const bool has_props = s.contains("properties") && s["properties"].is_object();
        if (has_props)
            for (const auto& [name, _] : s["properties"].items()) out.listed.insert(name);
        if (s.contains("required") && s["required"].is_array())
            for (const auto& r : s["required"])
                if (r.is_string()) out.required.insert(r.get<std::string>());
        out.closed = s.contains("additionalProperties") && s["additionalProperties"] == false;
        for (const std::string& r : out.required) {
            if (!out.listed.contains(r)) continue;
            Shape p = shape(s["properties"][r], depth);
            if (p.values) out.tags.emplace(r, std::move(*p.values));
        }
    }

    const ojson& root_;
    int visits_ = 0;
};

// No value matches both.
bool disjoint(const Shape& a, const Shape& b) {
    if ((a.types & b.types) == 0) return true;
    if (a.values && b.values) return !share_value(*a.values, *b.values);
    if (a.types != kObject || b.types != kObject) return false;
    for (const auto& [name, values] : a.tags)
        if (auto it = b.tags.find(name); it != b.tags.end() && !share_value(values, it->second)) return true;
    auto forbids = [](const Shape& x, const Shape& y) {  // y requires a property x forbids
        if (!x.closed) return false;
        for (const std::string& r : y.required)
            if (!x.listed.contains(r)) return true;
        return false;
    };
    return forbids(a, b) || forbids(b, a);
}

}  // namespace

bool alternatives_disjoint(const ojson& root, const ojson& alternatives) {
    Shaper shaper(root);
    std::vector<Shape> shapes;
    for (const auto& alt : alternatives) shapes.push_back(shaper.shape(alt));
    for (size_t i = 0; i < shapes.size(); ++i)
        for (size_t j = i + 1; j < shapes.size(); ++j)
            if (!disjoint(shapes[i], shapes[j])) return false;
    return true;
}

}  // namespace quill::grammar
