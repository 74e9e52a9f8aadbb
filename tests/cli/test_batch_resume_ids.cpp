// quill batch's ids across runs: an integer id comes back an integer (and --resume reads it so), and --resume of an
// output that holds results for ids the input lacks (another input's output) is refused instead of mixing the two.
#include "tests/support/batch_texts.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <vector>

namespace test_batch_resume_ids {

using namespace quill;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> batch_args(const std::string& in, const std::string& out) {
    return {"batch", "--raw", "-m", test::tiny_model_file(test::TinyModel::spm).string(), "-i", in, "-o", out,
            "--temp", "0", "--seed", "1", "-n", "3", "-t", "1", "-q"};
}

}  // namespace

TEST_CASE("an integer id comes back as an integer, and --resume reads it", "[batch][model]") {
    const auto dir = test::temp_dir("batch-integer-ids");
    const std::string in = (dir / "in.jsonl").string(), out = (dir / "out.jsonl").string();
    std::ofstream(in) << "{\"id\": 7, \"prompt\": \"The little dog\"}\n"
                         "{\"id\": \"x\", \"prompt\": \"The sun\"}\n"
                         "{\"id\": 18446744073709551615, \"prompt\": \"Mom said\"}\n"
                         "{\"id\": -3, \"prompt\": \"Lily\", \"max_tokens\": \"two\"}\n";
    auto args = batch_args(in, out);
    REQUIRE(test::run_quill(args).status == 3);  // (-3's max_tokens is an error record)
    const auto first = test::record_lines(test::read_file(out));
    REQUIRE(first.size() == 4);
    std::map<json, std::string> by_id;
    for (const json& r : first) by_id[r["id"]] = r.dump();
    CHECK(by_id.count(json(7)) == 1);
    CHECK(by_id.count(json("x")) == 1);
    CHECK(by_id.count(json(18446744073709551615ull)) == 1);
    CHECK(by_id.count(json(-3)) == 1);
    CHECK(by_id.count(json("7")) == 0);

    // Resumed after the last two records were lost: only they run again, once each.
    std::string kept;
    for (size_t i = 0; i < 2; ++i) kept += first[i].dump() + "\n";
    std::ofstream(out, std::ios::trunc) << kept;
    args.push_back("--resume");
    const auto resumed = test::run_quill(args);
    CHECK(resumed.status == 3);
    const auto second = test::record_lines(test::read_file(out));
    REQUIRE(second.size() == 4);
    std::map<json, std::string> again;
    for (const json& r : second) again[r["id"]] = r.dump();
    CHECK(again == by_id);
}

TEST_CASE("resuming the output of another input is refused, naming an id the input lacks, and error records pass",
          "[batch][model]") {
    const auto dir = test::temp_dir("batch-resume-other-input");
    const std::string in = (dir / "in.jsonl").string(), other = (dir / "other.jsonl").string();
    const std::string out = (dir / "out.jsonl").string();
    std::ofstream(in) << "{\"id\": \"a\", \"prompt\": \"The little dog\"}\n{\"id\": \"b\", \"prompt\": \"The sun\"}\n"
                         "{\"id\": \"c\", \"prompt\": \"Mom said\", \"top_k\": -1}\n";
    REQUIRE(test::run_quill(batch_args(in, out)).status == 3);
    const std::string earlier = test::read_file(out);

    std::ofstream(other) << "{\"id\": \"a\", \"prompt\": \"The little dog\"}\n{\"id\": \"q\", \"prompt\": \"Lily\"}\n";
    auto args = batch_args(other, out);
    args.push_back("--resume");
    const auto refused = test::run_quill(args);
    CHECK(refused.status == 2);
    CHECK_THAT(refused.err, Catch::Contains(out + " holds 1 result for ids the input lacks (\"b\")"));
    CHECK(test::read_file(out) == earlier);

    // The failed request "c" mended under another id: its error record stays, the new id runs.
    std::ofstream(in, std::ios::trunc) << "{\"id\": \"a\", \"prompt\": \"The little dog\"}\n"
                                          "{\"id\": \"b\", \"prompt\": \"The sun\"}\n"
                                          "{\"id\": \"c2\", \"prompt\": \"Mom said\"}\n";
    args = batch_args(in, out);
    args.push_back("--resume");
    const auto mended = test::run_quill(args);
    CHECK(mended.status == 0);
    const auto records = test::record_lines(test::read_file(out));
    REQUIRE(records.size() == 4);
    CHECK(records.back()["id"] == "c2");
}

TEST_CASE("resuming another shard's output is refused, and its own shard or the whole input resumes it",
          "[batch][model]") {
    const auto dir = test::temp_dir("batch-resume-other-shard");
    const std::string in = (dir / "in.jsonl").string(), out = (dir / "out.1.jsonl").string();
    std::ofstream(in) << "{\"id\": \"a\", \"prompt\": \"The little dog\"}\n{\"id\": \"b\", \"prompt\": \"The sun\"}\n"
                         "{\"id\": \"c\", \"prompt\": \"Mom said\"}\n{\"id\": \"d\", \"prompt\": \"Lily\"}\n";
    auto shard = [&](const char* spec) {
        auto args = batch_args(in, out);
        args.insert(args.end(), {"--shard", spec, "--resume"});
        return test::run_quill(args);
    };
    REQUIRE(shard("1/2").status == 0);
    const std::string first = test::read_file(out);
    REQUIRE(test::record_lines(first).size() == 2);
    const auto refused = shard("2/2");
    CHECK(refused.status == 2);
    CHECK_THAT(refused.err, Catch::Contains(out + " holds 2 results of requests outside --shard 2/2 (\"a\", ...): it "
                                                  "is another shard's output"));
    CHECK(test::read_file(out) == first);
    CHECK(shard("1/2").status == 0);
    CHECK(test::read_file(out) == first);
    CHECK(shard("1/1").status == 0);
    CHECK(test::record_lines(test::read_file(out)).size() == 4);
}

}  // namespace test_batch_resume_ids
