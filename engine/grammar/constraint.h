// What the output of a request must be, as the user gave it (--json-schema, --format json, --grammar, --regex, or a
// batch request's response_format / grammar), and its compilation into a TokenGrammar for a vocabulary.
#pragma once

#include "engine/grammar/token_mask.h"
#include "engine/io/cancel.h"

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace quill {
class Tokenizer;
}

namespace quill::grammar {

struct ConstraintSpec {
    enum class Kind { json_schema, json_object, gbnf, regex };
    Kind kind = Kind::json_object;
    std::string text;    // the schema's JSON, the GBNF or the pattern ("" for json_object)
    std::string source;  // names the text in messages: a file path, "--json-schema", "response_format"

    bool operator==(const ConstraintSpec& o) const { return kind == o.kind && text == o.text; }
};

// The spec as GBNF (UsageError naming spec.source when the schema or pattern is not supported); warnings, when
// given, gets what the conversion relaxed (json_schema_to_gbnf), each naming spec.source. cancel: polled while a
// schema converts (Interrupted).
std::string constraint_gbnf(const ConstraintSpec& spec, std::vector<std::string>* warnings = nullptr,
                            CancelFlag cancel = nullptr);
// The byte-level grammar of a spec (UsageError naming spec.source), with its warnings (Grammar::warnings).
std::shared_ptr<const Grammar> compile_constraint(const ConstraintSpec& spec, CancelFlag cancel = nullptr);
// The same, bound to a tokenizer's vocabulary; the control tokens in `shown` with their text (TokenGrammar).
std::shared_ptr<TokenGrammar> token_grammar(const ConstraintSpec& spec, const Tokenizer& tok,
                                            std::span<const int32_t> shown = {});

// --json-schema's value: JSON text when it starts with '{' (after spaces) or is "true", else a file to read
// (FileError when it cannot be read).
ConstraintSpec json_schema_option(std::string_view value);
// --grammar FILE.
ConstraintSpec grammar_file_option(const std::string& path);

}  // namespace quill::grammar
