// JSON from the user that quill's readers refuse: one `quill: error:` line of quill's own, never nlohmann's text
// ("[json.exception...") nor an exception that escapes its reader.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace test_json_input_errors {

using namespace quill;
namespace fs = std::filesystem;

TEST_CASE("a --json-schema that is not JSON, or holds a number past a double's range, is one clear error", "[cli]") {
    const fs::path dir = test::temp_dir("json-schema-errors");
    const fs::path file = dir / "schema.json";
    std::ofstream(file) << "{\"type\": \"object\",\n \"properties\": {\"n\": {\"maximum\": 1e400}}}\n";
    for (const auto& [schema, message] : std::vector<std::pair<std::string, std::string>>{
             // (nlohmann's out_of_range.406 escaped the schema's parser: exit 1 with the library's text)
             {R"({"const": 1e400})", "--json-schema: JSON schema: not valid JSON: number overflow parsing '1e400'"},
             {file.string(), file.string() + ": JSON schema: not valid JSON: number overflow parsing '1e400'"},
             // (the message was "JSON schema: not valid JSON: [json.exception.parse_error.101] parse error at ...")
             {R"({"type":)", "--json-schema: JSON schema: not valid JSON at column 9: syntax error while parsing"},
         }) {
        INFO(schema);
        // the schema is refused before the model is read (the model path does not exist)
        const auto r = test::run_quill({"run", "-m", (dir / "missing.gguf").string(), "-p", "x", "--json-schema", schema});
        INFO(r.err);
        CHECK(r.status == 2);
        CHECK_THAT(r.err, Catch::StartsWith("quill: error: " + message));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.err.find("json.exception") == std::string::npos);
    }
}

TEST_CASE("a messages file with a number past a double's range is one clear error", "[cli]") {
    const fs::path file = test::temp_dir("messages-number-range") / "m.json";
    std::ofstream(file) << R"([{"role": "user", "content": "Hi", "n": 1e400}])";
    // (the message ended "not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'")
    const auto r = test::run_quill({"template", "--chat-template", "chatml", "--messages", file.string()});
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.err == "quill: error: " + file.string() + ": not valid JSON: number overflow parsing '1e400'\n");
}

}  // namespace test_json_input_errors
