// A number past a double's range is nlohmann's out_of_range error, not a parse error: its message gets quill's
// "not valid JSON" without the library's "[json.exception.out_of_range.406]" tag, wherever JSON input is read.
#include "engine/batch/input.h"
#include "engine/error.h"
#include "engine/io/json_input.h"

#include <catch2/catch.hpp>

#include <string>

namespace test_json_number_range {

using namespace quill;

TEST_CASE("a number too large for a double is refused in quill's words", "[json]") {
    CHECK_THROWS_WITH(parse_untrusted_json(R"({"n": 1e400})", "in.json"),
                      "in.json: not valid JSON: number overflow parsing '1e400'");
    // a long number is cut, as every reason is, to 200 bytes
    CHECK_THROWS_WITH(parse_untrusted_ordered_json("[-" + std::string(400, '9') + "]", "m.json"),
                      "m.json: not valid JSON: number overflow parsing '-" + std::string(174, '9') + "...");
    CHECK_FALSE(try_parse_untrusted_json("1e400"));
}

TEST_CASE("a batch line with a number too large for a double is an error entry in quill's words", "[json][batch]") {
    const batch::BatchInput in =
        batch::parse_batch_input("{\"prompt\": \"a\", \"max_tokens\": 1e999}\n{\"prompt\": \"b\"}\n", batch::FormatHint::json);
    REQUIRE(in.entries.size() == 2);
    REQUIRE(in.entries[0].error);
    CHECK(*in.entries[0].error == "input line 1: not valid JSON: number overflow parsing '1e999'");
    CHECK_FALSE(in.entries[1].error);
}

}  // namespace test_json_number_range
