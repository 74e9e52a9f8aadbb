#include "engine/grammar/constraint.h"

#include "engine/error.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"
#include "engine/io/input.h"
#include "tokenizer/tokenizer.h"

namespace quill::grammar {

namespace {
constexpr size_t kMaxSpecBytes = size_t{16} << 20;  // a schema or grammar file

std::string read_spec_file(const std::string& path, const char* what) {
    const FileDescriptor fd = open_regular_file(path, what);
    return read_capped(fd.get(), path, kMaxSpecBytes, "a schema or grammar is at most 16 MiB");
}
}  // namespace

std::string constraint_gbnf(const ConstraintSpec& spec, std::vector<std::string>* warnings, CancelFlag cancel) {
    try {
        switch (spec.kind) {
            case ConstraintSpec::Kind::json_schema: {
                std::vector<std::string> relaxed;
                std::string gbnf = json_schema_to_gbnf(spec.text, &relaxed, cancel);
                if (warnings)
                    for (const std::string& w : relaxed) warnings->push_back(fmt::format("{}: {}", spec.source, w));
                return gbnf;
            }
            case ConstraintSpec::Kind::json_object: return json_object_gbnf();
            case ConstraintSpec::Kind::regex:
                return "root ::= " + regex_to_gbnf(spec.text, RegexMode::whole_text) + "\n";
            case ConstraintSpec::Kind::gbnf: return spec.text;
        }
    } catch (const UsageError& e) {
        throw UsageError(fmt::format("{}: {}", spec.source, e.what()));
    }
    return spec.text;
}

std::shared_ptr<const Grammar> compile_constraint(const ConstraintSpec& spec, CancelFlag cancel) {
    std::vector<std::string> warnings;
    const std::string gbnf = constraint_gbnf(spec, &warnings, cancel);
    // a GBNF file's errors name it with line and column; the others come from quill's own GBNF
    const std::string source = spec.kind == ConstraintSpec::Kind::gbnf ? spec.source : spec.source + " (as GBNF)";
    Grammar g = parse_gbnf(gbnf, source);
    g.warnings = std::move(warnings);
    return std::make_shared<const Grammar>(std::move(g));
}

std::shared_ptr<TokenGrammar> token_grammar(const ConstraintSpec& spec, const Tokenizer& tok,
                                            std::span<const int32_t> shown) {
    return std::make_shared<TokenGrammar>(compile_constraint(spec), tok, shown);
}

ConstraintSpec json_schema_option(std::string_view value) {
    const size_t at = value.find_first_not_of(" \t\r\n");
    if (at != std::string_view::npos && (value[at] == '{' || value.substr(at) == "true"))
        return {ConstraintSpec::Kind::json_schema, std::string(value), "--json-schema"};
    const std::string path(value);
    return {ConstraintSpec::Kind::json_schema, read_spec_file(path, "JSON schema file"), path};
}

ConstraintSpec grammar_file_option(const std::string& path) {
    return {ConstraintSpec::Kind::gbnf, read_spec_file(path, "grammar file"), path};
}

}  // namespace quill::grammar
