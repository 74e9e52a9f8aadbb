#include "engine/grammar/json_schema.h"

#include "engine/error.h"
#include "engine/grammar/regex.h"
#include "engine/grammar/schema_shape.h"
#include "engine/io/json_input.h"
#include "engine/io/utf8.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace quill::grammar {

namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxDepth = 200;           // schemas within schemas, $ref included
constexpr int64_t kIntCap = 9999999999999999;  // 16 digits: what an unbounded integer may have
constexpr double kNumberBoundCap = 1e9;  // the largest bound of a "number" (6 decimals stay exact below it)

// The shared rules, each added once when first needed. Values carry no whitespace of their own; containers put
// `ws` between their parts, so that the text ends with its last bracket or character.
const std::map<std::string, std::string>& base_rules() {
    static const std::map<std::string, std::string> rules = {
        {"ws", R"(| " " | "\n" [ \t]{0,20})"},
        // \uXXXX escapes leave out surrogates: each escape is one character, so lengths stay exact
        {"jchar", R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] )"
                  R"([0-9a-fA-F]{2})))"},
        {"kchar", R"([^"\\\x00-\x1F])"},
        {"string", R"("\"" jchar* "\"")"},
        // at most 16 digits and an exponent of 2: every number is a finite double (1e340 is not, and JSON
        // parsers refuse it)
        {"number", R"("-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?)"},
        {"integer", R"("-"? ("0" | [1-9] [0-9]{0,15}))"},
        {"boolean", R"("true" | "false")"},
        {"null", R"("null")"},
        {"value", R"(object | array | string | number | boolean | null)"},
        {"object", R"("{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}")"},
        {"array", R"("[" ws (value ws ("," ws value ws)*)? "]")"},
        {"date", R"([1-9] [0-9]{3} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])))"},
        {"time", R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
        {"date-time", R"(date "T" time)"},
        {"uuid", R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})"},
        {"email", R"([A-Za-z0-9_+-]{1,32} ("." [A-Za-z0-9_+-]{1,32}){0,2} "@" [A-Za-z0-9] [A-Za-z0-9-]{0,30} ("." [A-Za-z]{2,10}){1,3})"},
    };
    return rules;
}

const std::set<std::string>& annotations() {
    static const std::set<std::string> a = {"$schema", "$id", "id", "title", "description", "default", "examples",
                                            "$comment", "readOnly", "writeOnly", "deprecated", "$defs",
                                            "definitions"};
    return a;
}

const std::set<std::string>& keywords() {
    static const std::set<std::string> k = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
        "pattern", "format", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "anyOf", "oneOf", "allOf", "$ref", "nullable", "uniqueItems"};
    return k;
}

std::string alternatives(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

std::string lit(std::string_view s) { return gbnf_literal(s); }

// Numbers of the same count of digits from lo to hi (lo <= hi), as GBNF.
std::string digits_range(const std::string& lo, const std::string& hi) {
    const size_t n = lo.size();
    if (n == 0) return "";
    if (lo.substr(1) == std::string(n - 1, '0') && hi.substr(1) == std::string(n - 1, '9')) {
        std::string first = lo[0] == hi[0] ? lit(lo.substr(0, 1)) : fmt::format("[{}-{}]", lo[0], hi[0]);
        return n == 1 ? first : fmt::format("{} [0-9]{{{}}}", first, n - 1);
    }
    if (lo[0] == hi[0]) return lit(lo.substr(0, 1)) + " " + digits_range(lo.substr(1), hi.substr(1));
    std::vector<std::string> alts;
    alts.push_back(lit(lo.substr(0, 1)) + " " + digits_range(lo.substr(1), std::string(n - 1, '9')));
    if (hi[0] - lo[0] >= 2)
        alts.push_back(fmt::format("[{}-{}] [0-9]{{{}}}", static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1),
                                   n - 1));
    alts.push_back(lit(hi.substr(0, 1)) + " " + digits_range(std::string(n - 1, '0'), hi.substr(1)));
    return alternatives(alts);
}

// Whole numbers from a to b (0 <= a <= b), without leading zeros.
std::string uint_range(int64_t a, int64_t b) {
    const std::string sa = std::to_string(a), sb = std::to_string(b);
    std::vector<std::string> alts;
    for (size_t len = sa.size(); len <= sb.size(); ++len) {
        std::string lo = sa;
        if (len != sa.size()) lo = std::string(1, '1').append(len - 1, '0');
        const std::string hi = len == sb.size() ? sb : std::string(len, '9');
        alts.push_back(digits_range(lo, hi));
    }
    return alternatives(alts);
}

class Converter {
public:
    explicit Converter(const ojson& root, CancelFlag cancel = nullptr) : root_(&root), cancel_(cancel) {
        for (const auto& [name, _] : base_rules()) used_.insert(name);
        used_.insert("root");
    }

    std::string convert() {
        const std::string root = visit(*root_, "root", "#", 0);
        return "root ::= " + root + "\n" + rules_text();
    }

    // Each schema's rule, named as it says, its $refs resolved within its own document.
    std::string convert_rules(const std::vector<SchemaRule>& schemas) {
        for (const SchemaRule& s : schemas) used_.insert(s.rule);
        for (const SchemaRule& s : schemas) {
            root_ = s.document;
            refs_.clear();  // pointers are the document's; the rules made for them stay
            try {
                const ojson& target = s.pointer == "#" ? *root_ : root_->at(ojson::json_pointer(s.pointer.substr(1)));
                rules_.emplace_back(s.rule, visit(target, s.rule, s.pointer, 0));
            } catch (const UsageError& e) {
                throw UsageError(fmt::format("{}: {}", s.where, e.what()));
            } catch (const ojson::exception&) {
                throw UsageError(fmt::format("{}: nothing at {}", s.where, s.pointer));
            }
        }
        return rules_text();
    }

    std::string any_object() {
        need("object");
        return "root ::= object\n" + rules_text();
    }

private:
    std::string rules_text() const {
        std::string out;
        for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
        return out;
    }

    [[noreturn]] static void fail(const std::string& path, const std::string& what) {
        throw UsageError(fmt::format("JSON schema at {}: {}", path, what));
    }

    // A base rule (and the base rules it uses), by name.
    std::string need(const std::string& name) {
        if (have_base_.insert(name).second) {
            const std::string& body = base_rules().at(name);
            rules_.emplace_back(name, body);
            for (const auto& [dep, _] : base_rules())
                if (dep != name && body.find(dep) != std::string::npos) need(dep);
            if (name == "value") {
                need("object");
                need("array");
            }
        }
        return name;
    }

    std::string new_name(const std::string& hint) {
        std::string base;
        for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
        if (base.empty() || base.size() > 40) base = base.substr(0, 40) + "x";
        check_cancel(cancel_, "compiling the JSON schema");  // once a rule: a schema of megabytes makes thousands
        // The first free of base, base-2, base-3...: names are never freed, so the search goes on from where the
        // last one for this base ended (from 2 each time, a thousand properties of one name took seconds).
        std::string name = base;
        int& k = next_suffix_.try_emplace(base, 2).first->second;
        for (; used_.contains(name); ++k) name = fmt::format("{}-{}", base, k);
        used_.insert(name);
        return name;
    }

    std::string add_rule(const std::string& hint, const std::string& body) {
        const std::string name = new_name(hint);
        rules_.emplace_back(name, body);
        return name;
    }

    static bool only_annotations_besides(const ojson& s, std::initializer_list<const char*> keys) {
        for (const auto& [k, _] : s.items()) {
            if (annotations().contains(k)) continue;
            bool listed = false;
            for (const char* key : keys) listed = listed || k == key;
            if (!listed) return false;
        }
        return true;
    }

    std::string ref(const std::string& pointer, const std::string& path, int depth) {
        if (auto it = refs_.find(pointer); it != refs_.end()) return it->second;
        if (pointer.empty() || pointer[0] != '#')
            fail(path, fmt::format("$ref '{}' is not supported: only references within the document (#...)", pointer));
        const ojson* target = root_;
        if (pointer.size() > 1) {
            try {
                target = &root_->at(ojson::json_pointer(pointer.substr(1)));
            } catch (const std::exception&) {
                fail(path, fmt::format("$ref '{}' does not resolve to anything in the schema", pointer));
            }
        }
        const size_t slash = pointer.rfind('/');
        const std::string name = new_name("ref-" + (slash == std::string::npos ? "root" : pointer.substr(slash + 1)));
        refs_.emplace(pointer, name);
        const size_t at = rules_.size();
        rules_.emplace_back(name, "");
        const std::string body = visit(*target, name, pointer, depth + 1);
        rules_[at].second = body;
        return name;
    }

    std::string visit(const ojson& s, const std::string& hint, const std::string& path, int depth) {
        if (depth > kMaxDepth) fail(path, fmt::format("schemas nest deeper than {} levels", kMaxDepth));
        if (s.is_boolean()) {
            if (!s.get<bool>()) fail(path, "the schema false allows nothing");
            return need("value");
        }
        if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
        for (const auto& [k, _] : s.items())
            if (!annotations().contains(k) && !keywords().contains(k))
                fail(path, fmt::format("keyword '{}' is not supported", k));
        if (s.contains("$ref")) {
            if (!only_annotations_besides(s, {"$ref"}))
                fail(path, "$ref with other keywords beside it is not supported");
            if (!s["$ref"].is_string()) fail(path, "$ref must be a string");
            return ref(s["$ref"].get<std::string>(), path, depth);
        }
        if (s.contains("allOf")) {
            const ojson& all = s["allOf"];
            if (!all.is_array() || all.size() != 1 || !only_annotations_besides(s, {"allOf"}))
                fail(path, "allOf is supported only with one schema and nothing beside it");
            return visit(all[0], hint, path + "/allOf/0", depth + 1);
        }
        std::string out = visit_one(s, hint, path, depth);
        if (s.contains("nullable") && s["nullable"] == true) out = "(" + out + " | " + need("null") + ")";
        return out;
    }

    std::string visit_one(const ojson& s, const std::string& hint, const std::string& path, int depth) {
        for (const char* key : {"anyOf", "oneOf"}) {
            if (!s.contains(key)) continue;
            const ojson& list = s[key];
            if (!list.is_array() || list.empty()) fail(path, fmt::format("{} must be a non-empty array", key));
            if (!only_annotations_besides(s, {key, "nullable"}))
                fail(path, fmt::format("{} with other keywords beside it is not supported", key));
            std::vector<std::string> alts;
            for (size_t i = 0; i < list.size(); ++i)
                alts.push_back(visit(list[i], fmt::format("{}-{}", hint, i), fmt::format("{}/{}/{}", path, key, i),
                                     depth + 1));
            if (std::string_view(key) == "oneOf" && !alternatives_disjoint(*root_, list))
                warnings_.push_back(fmt::format(
                    "JSON schema at {}: oneOf's alternatives may overlap (neither their types, nor a required "
                    "property's const or enum values, nor a property one requires and another forbids tell them "
                    "apart): it is generated as anyOf, so an output may match more than one",
                    path));
            return alternatives(alts);
        }
        if (s.contains("const")) return lit(s["const"].dump());
        if (s.contains("enum")) {
            const ojson& e = s["enum"];
            if (!e.is_array() || e.empty()) fail(path, "enum must be a non-empty array");
            std::vector<std::string> alts;
            for (const auto& v : e) alts.push_back(lit(v.dump()));
            return alternatives(alts);
        }
        std::vector<std::string> types;
        if (s.contains("type")) {
            const ojson& t = s["type"];
            if (t.is_string()) {
                types.push_back(t.get<std::string>());
            } else if (t.is_array() && !t.empty()) {
                for (const auto& x : t) {
                    if (!x.is_string()) fail(path, "type must be a string or an array of strings");
                    types.push_back(x.get<std::string>());
                }
            } else {
                fail(path, "type must be a string or an array of strings");
            }
        } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
            types.push_back("object");
        } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
            types.push_back("array");
        } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") ||
                   s.contains("maxLength")) {
            types.push_back("string");
        } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                   s.contains("exclusiveMaximum")) {
            types.push_back("number");
        } else {
            return need("value");
        }
        std::vector<std::string> alts;
        for (const std::string& t : types) alts.push_back(typed(s, t, hint, path, depth));
        return alternatives(alts);
    }

    std::string typed(const ojson& s, const std::string& t, const std::string& hint, const std::string& path,
                      int depth) {
        if (t == "string") return string_schema(s, path);
        if (t == "integer") return integer_schema(s, path);
        if (t == "number") return number_schema(s, path);
        if (t == "boolean") return need("boolean");
        if (t == "null") return need("null");
        if (t == "object") return object_schema(s, hint, path, depth);
        if (t == "array") return array_schema(s, hint, path, depth);
        fail(path, fmt::format("type '{}' is not a JSON Schema type", t));
    }

    static std::optional<int64_t> count(const ojson& s, const char* key, const std::string& path) {
        if (!s.contains(key)) return std::nullopt;
        const ojson& v = s[key];
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
            fail(path, fmt::format("{} must be a non-negative integer", key));
        if (v.get<int64_t>() > 100000) fail(path, fmt::format("{} {} is too large (at most 100000)", key, v.dump()));
        return v.get<int64_t>();
    }

    std::string string_schema(const ojson& s, const std::string& path) {
        const auto min = count(s, "minLength", path), max = count(s, "maxLength", path);
        const bool lengths = min || max;
        if (s.contains("pattern")) {
            if (lengths || s.contains("format"))
                fail(path, "pattern together with format, minLength or maxLength is not supported");
            if (!s["pattern"].is_string()) fail(path, "pattern must be a string");
            need("jchar");
            return "\"\\\"\" " + regex_to_gbnf(s["pattern"].get<std::string>(), RegexMode::json_string) + " \"\\\"\"";
        }
        if (s.contains("format")) {
            if (lengths) fail(path, "format together with minLength or maxLength is not supported");
            const ojson& f = s["format"];
            const std::string name = f.is_string() ? f.get<std::string>() : f.dump();
            if (name != "date" && name != "time" && name != "date-time" && name != "uuid" && name != "email")
                fail(path, fmt::format("format '{}' is not supported (date, time, date-time, uuid, email are)", name));
            return "\"\\\"\" " + need(name) + " \"\\\"\"";
        }
        if (!lengths) return need("string");
        if (min && max && *max < *min) fail(path, "maxLength is below minLength");
        need("jchar");
        const std::string rep = max ? fmt::format("{{{},{}}}", min.value_or(0), *max)
                                    : fmt::format("{{{},}}", min.value_or(0));
        return "\"\\\"\" jchar" + rep + " \"\\\"\"";
    }

    struct Bound {
        double value;
        bool exclusive;
    };
    static std::optional<Bound> bound(const ojson& s, const char* inclusive, const char* exclusive,
                                      const std::string& path) {
        std::optional<Bound> b;
        if (s.contains(inclusive)) {
            if (!s[inclusive].is_number()) fail(path, fmt::format("{} must be a number", inclusive));
            b = Bound{s[inclusive].get<double>(), false};
        }
        if (s.contains(exclusive)) {
            if (!s[exclusive].is_number())
                fail(path,
                     fmt::format("{} must be a number (the boolean form of draft 4 is not supported)", exclusive));
            const double v = s[exclusive].get<double>();
            const bool lower = std::string_view(inclusive) == "minimum";
            if (!b || (lower ? v >= b->value : v <= b->value)) b = Bound{v, true};
        }
        return b;
    }

    std::string integer_schema(const ojson& s, const std::string& path) {
        const auto lo_b = bound(s, "minimum", "exclusiveMinimum", path);
        const auto hi_b = bound(s, "maximum", "exclusiveMaximum", path);
        if (!lo_b && !hi_b) return need("integer");
        auto whole = [&](double v) {
            if (!(std::fabs(v) <= static_cast<double>(kIntCap)))
                fail(path, fmt::format("integer bound {} is beyond the supported +-{}", v, kIntCap));
            return static_cast<int64_t>(v);
        };
        int64_t lo = -kIntCap, hi = kIntCap;
        if (lo_b) lo = whole(lo_b->exclusive ? std::floor(lo_b->value) + 1 : std::ceil(lo_b->value));
        if (hi_b) hi = whole(hi_b->exclusive ? std::ceil(hi_b->value) - 1 : std::floor(hi_b->value));
        if (lo > hi) fail(path, "no integer lies within the bounds");
        std::vector<std::string> alts;
        if (lo < 0) alts.push_back("\"-\" " + uint_range(hi < 0 ? -hi : 1, -lo));
        if (hi >= 0) alts.push_back(uint_range(std::max<int64_t>(lo, 0), hi));
        return alternatives(alts);
    }

    // Magnitudes m = whole.fraction with a < m (or <=) and, when bounded, m < b (or <=); a, b whole numbers.
    static std::string magnitude_range(int64_t a, bool a_excl, bool bounded, int64_t b, bool b_excl) {
        const std::string frac = R"(("." [0-9]{1,6})?)";
        std::vector<std::string> alts;
        if (a_excl && (!bounded || b > a)) alts.push_back(lit(std::to_string(a)) + R"( "." [0-9]{0,5} [1-9])");
        const int64_t lo = a_excl ? a + 1 : a, hi = bounded ? b - 1 : kIntCap;
        if (lo <= hi) alts.push_back(uint_range(lo, hi) + " " + frac);
        if (bounded && !b_excl && (b > a || !a_excl)) alts.push_back(lit(std::to_string(b)) + R"( ("." "0"{1,6})?)");
        return alts.empty() ? "" : alternatives(alts);
    }

    std::string number_schema(const ojson& s, const std::string& path) {
        const auto lo = bound(s, "minimum", "exclusiveMinimum", path);
        const auto hi = bound(s, "maximum", "exclusiveMaximum", path);
        if (!lo && !hi) return need("number");
        for (const auto& b : {lo, hi})
            if (b && (b->value != std::floor(b->value) || std::fabs(b->value) > kNumberBoundCap))
                fail(path, fmt::format("number bound {} is not supported: bounds of a number must be whole and "
                                       "within +-{}",
                                       b->value, kNumberBoundCap));
        const int64_t L = lo ? static_cast<int64_t>(lo->value) : 0, H = hi ? static_cast<int64_t>(hi->value) : 0;
        const bool lx = lo && lo->exclusive, hx = hi && hi->exclusive;
        if (lo && hi && (L > H || (L == H && (lx || hx)))) fail(path, "no number lies within the bounds");
        std::string out;
        if (lo && L >= 0) {
            out = magnitude_range(L, lx, hi.has_value(), H, hx);
        } else if (hi && H <= 0) {  // -m with -H <= m <= -L
            out = "\"-\" " + magnitude_range(-H, hx || H == 0, lo.has_value(), -L, lx);
            if (H == 0 && !hx) out = "(\"0\" | " + out + ")";
        } else {
            out = alternatives({magnitude_range(0, false, hi.has_value(), H, hx),
                                "\"-\" " + magnitude_range(0, true, lo.has_value(), -L, lx)});
        }
        if (out.empty()) fail(path, "no number lies within the bounds");
        return out;
    }

    // A JSON string key other than any of `names`, written without escapes (so that it cannot spell one of them):
    // a rule per prefix of the names, the rest free once the key leaves them.
    std::string other_key(const std::vector<std::string>& names) {
        need("kchar");
        if (names.empty()) return "\"\\\"\" kchar* \"\\\"\"";
        struct Node {
            std::map<uint32_t, size_t> next;
            bool name = false;
        };
        std::vector<Node> trie(1);
        for (const std::string& n : names) {
            size_t at = 0;
            for (size_t i = 0; i < n.size();) {
                const uint32_t cp = utf8::next(n, i);
                auto it = trie[at].next.find(cp);
                if (it == trie[at].next.end()) {
                    trie.emplace_back();
                    it = trie[at].next.emplace(cp, trie.size() - 1).first;
                }
                at = it->second;
            }
            trie[at].name = true;
        }
        const std::string tail = add_rule("key-tail", "kchar* \"\\\"\"");
        std::vector<std::string> rule_of(trie.size());
        for (size_t i = 0; i < trie.size(); ++i) rule_of[i] = new_name("key");
        for (size_t i = 0; i < trie.size(); ++i) {
            std::vector<std::string> alts;
            if (!trie[i].name) alts.push_back("\"\\\"\"");
            std::string cls = R"([^"\\\x00-\x1F)";
            for (const auto& [cp, child] : trie[i].next) {
                cls += fmt::format("\\U{:08X}", cp);
                std::string ch;
                utf8::append(ch, cp);
                alts.push_back(lit(ch) + " " + rule_of[child]);
            }
            alts.push_back(cls + "] " + tail);
            std::string body;
            for (size_t k = 0; k < alts.size(); ++k) body += (k ? " | " : "") + alts[k];
            rules_.emplace_back(rule_of[i], body);
        }
        return "\"\\\"\" " + rule_of[0];
    }

    std::string object_schema(const ojson& s, const std::string& hint, const std::string& path, int depth) {
        need("ws");
        struct Prop {
            std::string name;
            const ojson* schema;
            bool required;
        };
        static const ojson kAny = true;
        std::vector<Prop> props;
        std::set<std::string> required;
        if (s.contains("required")) {
            if (!s["required"].is_array()) fail(path, "required must be an array of strings");
            for (const auto& r : s["required"]) {
                if (!r.is_string()) fail(path, "required must be an array of strings");
                required.insert(r.get<std::string>());
            }
        }
        if (s.contains("properties")) {
            if (!s["properties"].is_object()) fail(path, "properties must be an object");
            for (const auto& [name, sub] : s["properties"].items())
                props.push_back({name, &sub, required.contains(name)});
        }
        // a required property that properties does not list is an additional one
        const ojson* additional = s.contains("additionalProperties") ? &s["additionalProperties"] : &kAny;
        for (const std::string& r : required) {
            bool listed = false;
            for (const Prop& p : props) listed = listed || p.name == r;
            if (listed) continue;
            if (additional->is_boolean() && !additional->get<bool>())
                fail(path, fmt::format("required property '{}' is not in properties and additionalProperties is "
                                       "false: the schema allows nothing",
                                       r));
            props.push_back({r, additional, true});
        }
        std::optional<std::string> extra;  // the value of an additional property
        if (s.contains("additionalProperties")) {
            const ojson& ap = s["additionalProperties"];
            if (!(ap.is_boolean() && !ap.get<bool>()))
                extra = visit(ap, hint + "-additional", path + "/additionalProperties", depth + 1);
        } else if (props.empty()) {
            extra = need("value");
        }
        std::vector<std::string> kv;
        for (const Prop& p : props) {
            const std::string value = visit(*p.schema, hint + "-" + p.name, path + "/properties/" + p.name, depth + 1);
            kv.push_back(add_rule(hint + "-" + p.name + "-kv", lit(ojson(p.name).dump()) + " ws \":\" ws " + value));
        }
        std::string xkv;
        if (extra) {
            std::vector<std::string> names;
            for (const Prop& p : props) names.push_back(p.name);
            xkv = add_rule(hint + "-extra-kv", other_key(names) + " ws \":\" ws " + *extra);
        }
        // rest[i]: the properties from i on after one was written; first[i]: the same before any was
        std::string rest = extra ? add_rule(hint + "-rest", "(\",\" ws " + xkv + " ws)*") : "\"\"";
        std::string first = extra ? add_rule(hint + "-first", "(" + xkv + " ws (\",\" ws " + xkv + " ws)*)?") : "\"\"";
        for (size_t i = props.size(); i-- > 0;) {
            const std::string after = rest;
            if (props[i].required) {
                rest = add_rule(hint + "-rest", "\",\" ws " + kv[i] + " ws " + after);
                first = add_rule(hint + "-first", kv[i] + " ws " + after);
            } else {
                rest = add_rule(hint + "-rest", "(\",\" ws " + kv[i] + " ws)? " + after);
                first = add_rule(hint + "-first", kv[i] + " ws " + after + " | " + first);
            }
        }
        return "\"{\" ws " + first + " \"}\"";
    }

    std::string array_schema(const ojson& s, const std::string& hint, const std::string& path, int depth) {
        need("ws");
        if (s.contains("prefixItems")) fail(path, "keyword 'prefixItems' is not supported");
        if (s.contains("uniqueItems") && s["uniqueItems"] != false) fail(path, "uniqueItems true is not supported");
        std::string item = need("value");
        if (s.contains("items")) {
            if (s["items"].is_array()) fail(path, "items as an array (tuples) is not supported");
            item = add_rule(hint + "-item", visit(s["items"], hint + "-item", path + "/items", depth + 1));
        }
        const int64_t min = count(s, "minItems", path).value_or(0);
        const std::optional<int64_t> max = count(s, "maxItems", path);
        if (max && *max < min) fail(path, "maxItems is below minItems");
        if (max && *max == 0) return R"("[" ws "]")";
        const std::string more = "(\",\" ws " + item + " ws)";
        const std::string reps = max ? fmt::format("{{{},{}}}", std::max<int64_t>(min - 1, 0), *max - 1)
                                     : fmt::format("{{{},}}", std::max<int64_t>(min - 1, 0));
        const std::string list = item + " ws " + more + reps;
        return min == 0 ? "\"[\" ws (" + list + ")? \"]\"" : "\"[\" ws " + list + " \"]\"";
    }

public:
    const std::vector<std::string>& warnings() const { return warnings_; }

private:
    const ojson* root_;  // the document $refs point into
    std::vector<std::string> warnings_;
    std::vector<std::pair<std::string, std::string>> rules_;  // name, body; in order of creation
    std::set<std::string> used_, have_base_;
    std::map<std::string, int> next_suffix_;  // base name -> the suffix new_name tries first
    CancelFlag cancel_ = nullptr;
    std::map<std::string, std::string> refs_;  // JSON pointer -> rule
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_text, std::vector<std::string>* warnings, CancelFlag cancel) {
    const ojson schema = parse_untrusted_ordered_json(schema_text, "JSON schema");
    Converter c(schema, cancel);
    std::string gbnf = c.convert();
    if (warnings) warnings->insert(warnings->end(), c.warnings().begin(), c.warnings().end());
    return gbnf;
}

std::string json_schema_rules(const std::vector<SchemaRule>& schemas, std::vector<std::string>* warnings) {
    if (schemas.empty()) return "";
    Converter c(*schemas.front().document);
    std::string gbnf = c.convert_rules(schemas);
    if (warnings) warnings->insert(warnings->end(), c.warnings().begin(), c.warnings().end());
    return gbnf;
}

std::string json_object_gbnf() {
    static const ojson empty = ojson::object();
    return Converter(empty).any_object();
}

}  // namespace quill::grammar
