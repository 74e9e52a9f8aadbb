// --resume cuts off only what a cut write of a record leaves, never a last line of someone's text.
#include "engine/batch/records.h"
#include "engine/error.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

namespace test_audit_resume {

using namespace quill;
using namespace quill::batch;

TEST_CASE("the resume scan refuses a last line that no cut record write leaves, and keeps the file", "[batch]") {
    const std::string good = "{\"id\":\"a\",\"text\":\"x\"}\n";
    // A record's first bytes, the zeros a crash leaves, a trailing empty line: torn.
    CHECK(scan_output(good + "{\"id\":\"b\",\"te", "out").torn);
    CHECK(scan_output(good + std::string(16, '\0'), "out").torn);
    CHECK(scan_output(good + "\n", "out").torn);
    // A line of text, with or without its newline, as the only line or after records: not a batch output.
    for (const std::string& text : {std::string("Name a colour."), std::string("Name a colour.\n"),
                                    good + "notes", good + "[1,2]\n"}) {
        INFO(text);
        CHECK_THROWS_WITH(scan_output(text, "out.jsonl"), Catch::Contains("is not a batch record; cannot resume"));
    }
    const auto path = (test::temp_dir("audit-resume") / "notes.txt").string();
    std::ofstream(path, std::ios::binary) << "Name a colour.";
    CHECK_THROWS_AS(prepare_resume(path), FileError);
    CHECK(test::read_file(path) == "Name a colour.");  // nothing cut off
}

}  // namespace test_audit_resume
