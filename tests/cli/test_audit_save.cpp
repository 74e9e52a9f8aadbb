// /save writes the sampling parameters as they were given: 0.7, not the float's double 0.699999988079071.
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

namespace test_audit_save {

using namespace quill;

TEST_CASE("/save writes the sampling parameters as typed, without float rounding noise", "[chat]") {
    const auto dir = test::temp_dir("audit-save");
    const std::string saved = (dir / "conv.json").string();
    const test::CommandResult r = test::run_quill(
        {"chat", "-q", "-m", test::tiny_model_file(test::TinyModel::spm_chat).string(), "-n", "2", "--temp", "0.7",
         "--top-p", "0.9", "--min-p", "0.05", "--repeat-penalty", "1.1", "-t", "1", "--seed", "3"},
        "Once\n/save " + saved + "\n");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const nlohmann::json sampling = nlohmann::json::parse(test::read_file(saved))["sampling"];
    CHECK(sampling["temperature"].get<double>() == 0.7);
    CHECK(sampling["top_p"].get<double>() == 0.9);
    CHECK(sampling["min_p"].get<double>() == 0.05);
    CHECK(sampling["repeat_penalty"].get<double>() == 1.1);
    CHECK(sampling["top_k"] == 40);
    CHECK(sampling["seed"] == 3);
    CHECK(test::read_file(saved).find("\"temperature\": 0.7,") != std::string::npos);
}

}  // namespace test_audit_save
