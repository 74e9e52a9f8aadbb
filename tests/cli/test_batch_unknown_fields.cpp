// quill batch and request keys it does not know: a misspelt field of a prompt request ("temprature") would be
// ignored in silence, so it gets one warning naming it; a messages request's other keys reach the template.
#include "tests/support/batch_texts.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

namespace test_batch_unknown_fields {

using namespace quill;

TEST_CASE("the unknown keys of prompt requests get one warning naming each and its first line", "[batch][model]") {
    const std::string input = "{\"id\": \"a\", \"prompt\": \"The sun\", \"temprature\": 0.5}\n"
                              "{\"id\": \"b\", \"prompt\": \"Mom said\", \"max_token\": 2, \"temprature\": 1}\n"
                              "{\"id\": \"c\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"x\": 1}\n";
    const auto r = test::run_quill({"batch", "--chat-template", "chatml", "-m", test::tiny_model_file(test::TinyModel::spm).string(),
                                    "--temp", "0", "-n", "2", "-t", "1", "-q"},
                                   input);
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(test::record_lines(r.out).size() == 3);
    CHECK_THAT(r.err, Catch::Contains("stdin: ignored, not a request field: \"temprature\" (line 1), \"max_token\" "
                                      "(line 2)\n"));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

}  // namespace test_batch_unknown_fields
