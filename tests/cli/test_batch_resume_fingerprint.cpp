// --resume and what the records were made with: every result record carries the model and a "system_fingerprint"
// of the options that change its text (engine/batch/fingerprint.h); --resume of an OUTPUT made with another model,
// template, system prompt or sampling option is refused naming it, while threads, --parallel and -q still resume,
// through a torn last line, of a `cat` of shards, and of an older quill's file (one warning).
#include "tests/support/batch_texts.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <vector>

namespace test_batch_resume_fingerprint {

using namespace quill;
using nlohmann::json;

namespace {

const char* const kInput = "{\"id\": \"a\", \"prompt\": \"The little dog\"}\n"
                           "{\"id\": \"b\", \"prompt\": \"The sun\"}\n"
                           "{\"id\": \"c\", \"prompt\": \"Mom said\"}\n";

std::vector<std::string> batch_args(const std::string& model, const std::string& in, const std::string& out) {
    return {"batch", "-m", model, "-i", in, "-o", out, "--temp", "0", "--seed", "1", "-n", "4", "-t", "1", "-q"};
}

// The file's first record (a result): what a run killed after it leaves.
std::string first_record(const std::string& out) {
    const std::string all = test::read_file(out);
    return all.substr(0, all.find('\n') + 1);
}

struct Fixture {
    std::filesystem::path dir;
    std::string in, out;
    explicit Fixture(const std::string& name)
        : dir(test::temp_dir(name)), in((dir / "in.jsonl").string()), out((dir / "out.jsonl").string()) {
        std::ofstream(in) << kInput;
    }
    // A whole run with these arguments into a fresh OUTPUT, then OUTPUT cut back to its first record.
    std::string killed_after_one(const std::vector<std::string>& args) const {
        std::filesystem::remove(out);
        const auto run = test::run_quill(args);
        REQUIRE(run.status == 0);
        const std::string kept = first_record(out);
        std::ofstream(out, std::ios::trunc) << kept;
        return kept;
    }
};

// args with `more`: a flag args already has gets the value that follows it in `more`; others are added.
std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
    for (size_t i = 0; i < more.size(); ++i) {
        const bool has_value = i + 1 < more.size() && !more[i + 1].starts_with("-");
        const auto at = std::find(args.begin(), args.end(), more[i]);
        if (at != args.end() && has_value) {
            *(at + 1) = more[++i];
            continue;
        }
        args.push_back(more[i]);
        if (has_value) args.push_back(more[++i]);
    }
    return args;
}

// A run that --resume refuses (status 2) with a message that says `says`.
void check_refused(const std::vector<std::string>& args, const std::string& says) {
    const auto run = test::run_quill(args);
    CHECK(run.status == 2);
    CHECK_THAT(run.err, Catch::Contains(says));
}

// The tiny SPM model has no chat template: its prompts go as they are.
std::vector<std::string> raw_args(test::TinyModel which, const std::string& in, const std::string& out) {
    return with(batch_args(test::tiny_model_file(which).string(), in, out), {"--raw"});
}

}  // namespace

TEST_CASE("batch records carry the model and one system_fingerprint per configuration", "[batch]") {
    Fixture f("batch-fingerprint-records");
    const auto args = raw_args(test::TinyModel::spm, f.in, f.out);
    REQUIRE(test::run_quill(args).status == 0);
    const auto records = test::record_lines(test::read_file(f.out));
    REQUIRE(records.size() == 3);
    std::set<std::string> fingerprints;
    for (const json& r : records) {
        CHECK(r["model"] == "tiny-random");
        fingerprints.insert(r["system_fingerprint"].get<std::string>());
    }
    REQUIRE(fingerprints.size() == 1);
    CHECK_THAT(*fingerprints.begin(), Catch::Matches("quill1(-[0-9a-f]{8}){4}"));

    // The same options give the same fingerprint; another temperature another one.
    REQUIRE(test::run_quill(with(args, {"--overwrite", "-t", "2", "--parallel", "1"})).status == 0);
    CHECK(test::record_lines(test::read_file(f.out))[0]["system_fingerprint"] == *fingerprints.begin());
    REQUIRE(test::run_quill(with(args, {"--overwrite", "--temp", "0.5"})).status == 0);
    CHECK(test::record_lines(test::read_file(f.out))[0]["system_fingerprint"] != *fingerprints.begin());
}

TEST_CASE("batch --resume with another model file is refused naming the model, and OUTPUT is left as it was",
          "[batch]") {
    Fixture f("batch-fingerprint-model");
    const std::string kept = f.killed_after_one(raw_args(test::TinyModel::spm, f.in, f.out));
    const auto refused =
        test::run_quill(with(raw_args(test::TinyModel::spm_q8_0, f.in, f.out), {"--resume"}));
    CHECK(refused.status == 2);
    CHECK_THAT(refused.err, Catch::Contains("--resume: " + f.out + " (record \"a\") was made with another file of "
                                            "model tiny-random ("));
    CHECK_THAT(refused.err, Catch::Contains("use --overwrite or another OUTPUT"));
    CHECK(test::read_file(f.out) == kept);
}

TEST_CASE("batch --resume with a model of another name names both", "[batch][model]") {
    const auto model = test::require_default_model();
    if (!model) return;
    Fixture f("batch-fingerprint-model-name");
    f.killed_after_one(raw_args(test::TinyModel::spm, f.in, f.out));
    const auto refused = test::run_quill(with(batch_args(model->string(), f.in, f.out), {"--raw", "--resume"}));
    CHECK(refused.status == 2);
    CHECK_THAT(refused.err, Catch::Contains("was made with model tiny-random ("));
    CHECK_THAT(refused.err, Catch::Contains("this run uses Smollm2 135M"));
}

TEST_CASE("batch --resume with another temperature, penalty or -n is refused naming the options", "[batch]") {
    Fixture f("batch-fingerprint-options");
    const auto args = raw_args(test::TinyModel::spm, f.in, f.out);
    const std::string kept = f.killed_after_one(args);
    check_refused(with(args, {"--resume", "--temp", "0.7"}),
                  "was made with other sampling options; this run uses --temp 0.7 --top-k");
    check_refused(with(args, {"--resume", "--repeat-penalty", "1.3"}), "--repeat-penalty 1.3");
    check_refused(with(args, {"--resume", "-n", "5"}),
                  "was made with other output options; this run uses -n 5, no --stop");
    check_refused(with(args, {"--resume", "--stop", "x"}), "--stop [\"x\"]");
    CHECK(test::read_file(f.out) == kept);

    // Sampled, the seed and the truncation count too.
    const auto sampled = with(args, {"--temp", "0.8"});
    const std::string kept_sampled = f.killed_after_one(sampled);
    check_refused(with(sampled, {"--resume", "--seed", "2"}),
                  "--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05 --repeat-penalty 1 --repeat-last-n 64 "
                  "--frequency-penalty 0 --presence-penalty 0 --seed 2");
    CHECK(test::read_file(f.out) == kept_sampled);
}

TEST_CASE("batch --resume with another chat template or system prompt is refused naming them", "[batch]") {
    Fixture f("batch-fingerprint-template");
    const auto args = batch_args(test::tiny_model_file(test::TinyModel::spm_chat).string(), f.in, f.out);
    const std::string kept = f.killed_after_one(args);
    check_refused(with(args, {"--resume", "--system", "Be brief."}),
                  "was made with another chat template, --system or --raw; this run uses its chat template, --system "
                  "\"Be brief.\"");
    check_refused(with(args, {"--resume", "--chat-template", "zephyr"}), "another chat template");
    check_refused(with(args, {"--resume", "--raw"}), "this run uses --raw");
    CHECK(test::read_file(f.out) == kept);
}

TEST_CASE("batch --resume with other threads or --parallel, or greedy with another seed or top-k, resumes: the "
          "records of one uninterrupted run",
          "[batch]") {
    Fixture f("batch-fingerprint-same");
    const auto args = raw_args(test::TinyModel::spm, f.in, f.out);
    REQUIRE(test::run_quill(args).status == 0);
    const auto whole = test::texts_by_id(test::read_file(f.out));
    f.killed_after_one(args);
    const auto resumed = test::run_quill(with(args, {"--resume", "-t", "2", "--parallel", "2", "--batch-tokens", "7",
                                                     "--seed", "5", "--top-k", "3"}));
    CHECK(resumed.status == 0);
    CHECK(resumed.err.empty());
    CHECK(test::texts_by_id(test::read_file(f.out)) == whole);
}

TEST_CASE("batch --resume through a torn last record checks the whole ones", "[batch]") {
    Fixture f("batch-fingerprint-torn");
    const auto args = raw_args(test::TinyModel::spm, f.in, f.out);
    REQUIRE(test::run_quill(args).status == 0);
    const std::string all = test::read_file(f.out);
    const std::string torn = all.substr(0, all.find('\n') + 1) + all.substr(all.find('\n') + 1, 20);
    std::ofstream(f.out, std::ios::trunc) << torn;
    check_refused(with(args, {"--resume", "--presence-penalty", "0.5"}), "--presence-penalty 0.5");
    const auto resumed = test::run_quill(with(args, {"--resume"}));
    CHECK(resumed.status == 0);
    CHECK(test::texts_by_id(test::read_file(f.out)) == test::texts_by_id(all));
}

TEST_CASE("batch --resume of an older quill's output without fingerprints warns once and resumes", "[batch]") {
    Fixture f("batch-fingerprint-old");
    const auto args = raw_args(test::TinyModel::spm, f.in, f.out);
    REQUIRE(test::run_quill(args).status == 0);
    const auto records = test::record_lines(test::read_file(f.out));
    std::string old;
    for (size_t i = 0; i < 2; ++i) {
        json r = records[i];
        r.erase("model");
        r.erase("system_fingerprint");
        r.erase("request_hash");
        old += r.dump() + "\n";
    }
    std::ofstream(f.out, std::ios::trunc) << old;
    const auto resumed = test::run_quill(with(args, {"--resume", "--temp", "0.9"}));
    CHECK(resumed.status == 0);
    CHECK(resumed.err == "quill: warning: " + f.out + ": 2 result records carry no system_fingerprint (an older "
                         "quill's): resumed without checking the model and options they were made with\n");
    CHECK(test::record_lines(test::read_file(f.out)).size() == 3);
}

TEST_CASE("OpenAI batch output: the fingerprint is in the body, and a cat of shards resumes as one output",
          "[batch]") {
    const auto dir = test::temp_dir("batch-fingerprint-openai");
    const std::string in = (dir / "in.jsonl").string();
    std::ofstream(in) << R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "gpt-x", "prompt": "The little dog"}})" "\n"
                         R"({"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {"model": "gpt-x", "prompt": "The sun"}})" "\n"
                         R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Mom said"}})" "\n";
    std::string joined;
    for (const char* shard : {"1/2", "2/2"}) {
        const std::string out = (dir / fmt::format("out.{}.jsonl", shard[0])).string();
        REQUIRE(test::run_quill(with(raw_args(test::TinyModel::spm, in, out), {"--shard", shard})).status == 0);
        joined += test::read_file(out);
    }
    const std::string all = (dir / "all.jsonl").string();
    std::ofstream(all) << joined;
    const auto records = test::record_lines(joined);
    REQUIRE(records.size() == 3);
    const json fp = records[0]["response"]["body"]["system_fingerprint"];
    for (const json& r : records) CHECK(r["response"]["body"]["system_fingerprint"] == fp);

    const auto resumed = test::run_quill(with(raw_args(test::TinyModel::spm, in, all), {"--resume"}));
    CHECK(resumed.status == 0);
    CHECK(test::read_file(all) == joined);
    const auto refused =
        test::run_quill(with(raw_args(test::TinyModel::spm_q8_0, in, all), {"--resume"}));
    CHECK(refused.status == 2);
    CHECK_THAT(refused.err, Catch::Contains("was made with another model ("));
    CHECK_THAT(refused.err, Catch::Contains("this run uses tiny-random ("));
}

TEST_CASE("batch --resume refuses an input line changed under the id of its result, and OUTPUT is left as it was",
          "[batch]") {
    Fixture f("batch-resume-edited");
    const auto args = raw_args(test::TinyModel::spm, f.in, f.out);
    const std::string kept = f.killed_after_one(args);
    CHECK(test::record_lines(kept)[0]["request_hash"].get<std::string>().size() == 16);

    // The same requests spaced otherwise resume.
    std::ofstream(f.in, std::ios::trunc) << "{\"prompt\":\"The little dog\",\"id\":\"a\"}\n"
                                            "{\"id\":\"b\",\"prompt\":\"The sun\"}\n"
                                            "{\"id\":\"c\",\"prompt\":\"Mom said\"}\n";
    std::filesystem::copy_file(f.out, f.dir / "kept.jsonl");
    const std::string kept_out = (f.dir / "kept.jsonl").string();
    CHECK(test::run_quill(with(raw_args(test::TinyModel::spm, f.in, kept_out), {"--resume"})).status == 0);
    CHECK(test::record_lines(test::read_file(kept_out)).size() == 3);

    // The first line's prompt, or its -n, changed: its result is another request's.
    for (const char* edited : {"{\"id\": \"a\", \"prompt\": \"The big dog\"}\n",
                               "{\"id\": \"a\", \"prompt\": \"The little dog\", \"max_tokens\": 2}\n"}) {
        std::ofstream(f.in, std::ios::trunc) << edited << "{\"id\": \"b\", \"prompt\": \"The sun\"}\n"
                                             << "{\"id\": \"c\", \"prompt\": \"Mom said\"}\n";
        check_refused(with(args, {"--resume"}), "--resume: " + f.out + " holds the result of another request for id "
                                                "\"a\" (line 1 has changed since it ran); give the changed lines new "
                                                "ids, another -o, or --overwrite");
        CHECK(test::read_file(f.out) == kept);
    }

    // A plain-text input with a line put in before the done ones: their ids (line-N) now name other prompts.
    const std::string txt = (f.dir / "in.txt").string(), txt_out = (f.dir / "txt.jsonl").string();
    std::ofstream(txt) << "The little dog\nThe sun\nMom said\n";
    REQUIRE(test::run_quill(raw_args(test::TinyModel::spm, txt, txt_out)).status == 0);
    std::ofstream(txt, std::ios::trunc) << "Once upon a time\nThe little dog\nThe sun\nMom said\n";
    check_refused(with(raw_args(test::TinyModel::spm, txt, txt_out), {"--resume"}),
                  "holds the result of another request for id \"line-1\" (line 1 has changed since it ran), and 2 "
                  "more ids");
}

}  // namespace test_batch_resume_fingerprint
