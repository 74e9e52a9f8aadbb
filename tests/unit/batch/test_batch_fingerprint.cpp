// The fingerprint of a batch's records (engine/batch/fingerprint.h): each part moves with its own settings only, the
// resume scan reads it from both record shapes, and the check names the part that differs.
#include "engine/batch/fingerprint.h"
#include "engine/error.h"
#include "tests/support/random_model.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace test_batch_fingerprint {

using namespace quill;
using namespace quill::batch;

namespace {

FingerprintInputs base() {
    FingerprintInputs in;
    in.model_name = "m";
    in.model_identity = 1;
    in.template_source = "{{ messages }}";
    in.defaults.sampling.temperature = 0;
    in.defaults.max_tokens = 8;
    return in;
}

// The four 8-digit part hashes of a fingerprint.
std::vector<std::string> parts(const RunFingerprint& f) {
    const std::string s = f.str();
    REQUIRE(s.size() == 6 + 4 * 9);
    std::vector<std::string> out;
    for (size_t i = 0; i < 4; ++i) out.push_back(s.substr(7 + 9 * i, 8));
    return out;
}

// check_resume_fingerprint's refusal.
std::string refusal(const ResumeScan& scan, const RunFingerprint& now) {
    try {
        check_resume_fingerprint(scan, now, "out.jsonl", {});
    } catch (const UsageError& e) {
        return e.what();
    }
    return "not refused";
}

}  // namespace

TEST_CASE("each fingerprint part moves with its own settings and no other's", "[batch]") {
    const std::vector<std::string> was = parts(make_fingerprint(base()));
    auto changed = [&](auto&& edit) {
        FingerprintInputs in = base();
        edit(in);
        const std::vector<std::string> now = parts(make_fingerprint(in));
        std::vector<size_t> which;
        for (size_t i = 0; i < 4; ++i)
            if (now[i] != was[i]) which.push_back(i);
        return which;
    };
    using V = std::vector<size_t>;
    CHECK(changed([](FingerprintInputs& in) { in.model_identity = 2; }) == V{0});
    CHECK(changed([](FingerprintInputs& in) { in.tokenizer_file = "spm"; }) == V{0});
    CHECK(changed([](FingerprintInputs& in) { in.model_name = "other name, same file"; }).empty());
    CHECK(changed([](FingerprintInputs& in) { in.template_source = "{{ x }}"; }) == V{1});
    CHECK(changed([](FingerprintInputs& in) { in.system = "Be brief."; }) == V{1});
    CHECK(changed([](FingerprintInputs& in) { in.raw = true; }) == V{1});
    CHECK(changed([](FingerprintInputs& in) { in.defaults.sampling.temperature = 0.5f; }) == V{2});
    CHECK(changed([](FingerprintInputs& in) { in.defaults.sampling.repeat_penalty = 1.1f; }) == V{2});
    CHECK(changed([](FingerprintInputs& in) { in.defaults.max_tokens = 9; }) == V{3});
    CHECK(changed([](FingerprintInputs& in) { in.defaults.stop = {"a"}; }) == V{3});
    FingerprintInputs two_stops = base(), one_stop = base();
    two_stops.defaults.stop = {"a", "b"};
    one_stop.defaults.stop = {"ab"};
    CHECK(make_fingerprint(two_stops).str() != make_fingerprint(one_stop).str());
    CHECK(changed([](FingerprintInputs& in) { in.defaults.logprobs = 2; }) == V{3});
    CHECK(changed([](FingerprintInputs& in) {
              in.constraint = grammar::ConstraintSpec{grammar::ConstraintSpec::Kind::json_object, "", "--json-object"};
          }) == V{3});
    // Greedy: the seed, the truncation and speculative decoding change no text.
    CHECK(changed([](FingerprintInputs& in) {
              in.seed = 7;
              in.defaults.sampling.top_k = 3;
              in.defaults.lookup = 4;
          }).empty());
    CHECK(changed([](FingerprintInputs& in) {
              in.any_request_samples = true;
              in.seed = 7;
          }) == V{2});
}

TEST_CASE("the resume scan reads the fingerprint of JSONL and OpenAI records, and counts those without", "[batch]") {
    const std::string out =
        R"({"id": "a", "text": "x", "model": "m", "system_fingerprint": "quill1-00000000-11111111-22222222-33333333"})" "\n"
        R"({"id": "b", "text": "y"})" "\n"
        R"({"id": "c", "error": {"message": "bad"}})" "\n"
        R"({"id": "batch_req_3", "custom_id": "d", "response": {"status_code": 200, "body": {"model": "gpt-x", "system_fingerprint": "fp_other"}}, "error": null})" "\n"
        R"({"id": "e", "text": "z", "model": "m", "system_fingerprint": "quill1-00000000-11111111-22222222-33333333"})" "\n";
    const ResumeScan scan = scan_output(out, "out.jsonl");
    CHECK(scan.done.size() == 5);
    CHECK(scan.unfingerprinted == 1);
    REQUIRE(scan.configs.size() == 2);
    CHECK(scan.configs[0].fingerprint == "quill1-00000000-11111111-22222222-33333333");
    CHECK(scan.configs[0].model == "m");
    CHECK(scan.configs[0].first_id == "a");
    CHECK(scan.configs[1].fingerprint == "fp_other");
    CHECK(scan.configs[1].model.empty());
    CHECK(scan.configs[1].first_id == "d");

    const RunFingerprint now = make_fingerprint(base());
    CHECK_THAT(refusal(scan, now), Catch::StartsWith("--resume: out.jsonl (record \"a\") was made with another file "
                                                     "of model m (00000000, this run's is "));
    ResumeScan foreign = scan;
    foreign.configs.erase(foreign.configs.begin());
    CHECK_THAT(refusal(foreign, now), Catch::Contains("(record \"d\") was made with the system_fingerprint "
                                                      "\"fp_other\" (not quill's, or another version's)"));
    ResumeScan mine = scan;
    mine.configs.assign(1, EarlierConfig{now.str(), "m", "a"});
    std::vector<std::string> warnings;
    check_resume_fingerprint(mine, now, "out.jsonl", [&](const std::string& w) { warnings.push_back(w); });
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains("1 result record carries no system_fingerprint"));
}

TEST_CASE("a model's identity tells apart weights of one shape and metadata, and not two copies of one file",
          "[batch]") {
    test::TinySpec spec;
    spec.vocab = "spm";
    const std::vector<uint8_t> one = test::make_tiny_gguf(spec);
    spec.seed = 2;
    const std::vector<uint8_t> other = test::make_tiny_gguf(spec);
    REQUIRE(one.size() == other.size());
    const GgufFile a = GgufFile::parse("one", one), b = GgufFile::parse("other", other);
    REQUIRE(a.metadata() == b.metadata());  // only the weights differ
    const uint64_t id = model_identity(a);
    CHECK(model_identity(GgufFile::parse("copy", one)) == id);
    CHECK(model_identity(b) != id);
}

TEST_CASE("a request's hash moves with what it asks and not with its id, line or the line's spacing", "[batch]") {
    const std::string line =
        R"({"id": "a", "prompt": "Hi", "max_tokens": 4, "temperature": 0.5, "stop": ["x"], "logit_bias": {"7": -100}})";
    const BatchInput base_input = parse_batch_input(line + "\n");
    REQUIRE(base_input.entries.size() == 1);
    REQUIRE_FALSE(base_input.entries[0].error);
    const std::string h = request_hash(base_input.entries[0].request);
    CHECK(h.size() == 16);
    auto hash_of = [](const std::string& text) {
        const BatchInput in = parse_batch_input(text + "\n");
        REQUIRE(in.entries.size() == 1);
        REQUIRE_FALSE(in.entries[0].error);
        return request_hash(in.entries[0].request);
    };
    // The same request under another id, on another line, spaced and ordered otherwise.
    CHECK(hash_of("\n" R"({"temperature":0.5,"max_tokens":4,"prompt":"Hi","id":"zz","stop":["x"],"logit_bias":{"7":-100}})") == h);
    // Each thing it asks, changed.
    for (const char* other : {
             R"({"id": "a", "prompt": "Hi!", "max_tokens": 4, "temperature": 0.5, "stop": ["x"], "logit_bias": {"7": -100}})",
             R"({"id": "a", "prompt": "Hi", "max_tokens": 5, "temperature": 0.5, "stop": ["x"], "logit_bias": {"7": -100}})",
             R"({"id": "a", "prompt": "Hi", "max_tokens": 4, "temperature": 0.6, "stop": ["x"], "logit_bias": {"7": -100}})",
             R"({"id": "a", "prompt": "Hi", "max_tokens": 4, "temperature": 0.5, "stop": ["y"], "logit_bias": {"7": -100}})",
             R"({"id": "a", "prompt": "Hi", "max_tokens": 4, "temperature": 0.5, "stop": ["x"], "logit_bias": {"8": -100}})",
             R"({"id": "a", "prompt": "Hi", "max_tokens": 4, "temperature": 0.5, "stop": ["x"], "logit_bias": {"7": -100}, "seed": 3})",
             R"({"id": "a", "prompt": "Hi", "max_tokens": 4, "temperature": 0.5, "stop": ["x"], "logit_bias": {"7": -100}, "top_k": 3})",
             R"({"id": "a", "prompt": "Hi", "max_tokens": 4, "temperature": 0.5, "stop": ["x"], "logit_bias": {"7": -100}, "grammar": "root ::= \"a\""})",
             R"({"id": "a", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0.5, "stop": ["x"], "logit_bias": {"7": -100}})",
         })
        CHECK(hash_of(other) != h);
    // An option set to what the flags would give is still an option the request sets.
    CHECK(hash_of(R"({"id": "a", "prompt": "Hi"})") != hash_of(R"({"id": "a", "prompt": "Hi", "top_p": 1.0})"));
}

TEST_CASE("the resume check refuses a result whose request has changed under its id, and lets the rest pass", "[batch]") {
    const BatchInput was = parse_batch_input("{\"id\": \"a\", \"prompt\": \"Hi\"}\n{\"id\": \"b\", \"prompt\": \"Yo\"}\n");
    ResumeScan scan;
    for (const InputEntry& e : was.entries) {
        scan.done.insert(e.request.id);
        scan.request_hashes[e.request.id] = request_hash(e.request);
    }
    auto refusal_of = [&scan](const std::string& text) -> std::string {
        try {
            check_resume_requests(scan, parse_batch_input(text), "out.jsonl");
        } catch (const UsageError& e) {
            return e.what();
        }
        return "not refused";
    };
    CHECK(refusal_of("{\"id\": \"b\", \"prompt\": \"Yo\"}\n{\"id\": \"a\", \"prompt\": \"Hi\"}\n{\"id\": \"c\", "
                     "\"prompt\": \"new\"}\n") == "not refused");
    CHECK(refusal_of("{\"id\": \"a\", \"prompt\": \"Hi\"}\n{\"id\": \"b\", \"prompt\": \"Yo!\"}\n") ==
          "--resume: out.jsonl holds the result of another request for id \"b\" (line 2 has changed since it ran); "
          "give the changed lines new ids, another -o, or --overwrite");
    CHECK(refusal_of("{\"id\": \"a\", \"prompt\": \"Hi?\"}\n{\"id\": \"b\", \"prompt\": \"Yo!\"}\n") ==
          "--resume: out.jsonl holds the result of another request for id \"a\" (line 1 has changed since it ran), "
          "and 1 more id; give the changed lines new ids, another -o, or --overwrite");
    // A record without a hash (an older quill's) is not checked.
    scan.request_hashes.erase("a");
    CHECK(refusal_of("{\"id\": \"a\", \"prompt\": \"Hi?\"}\n{\"id\": \"b\", \"prompt\": \"Yo\"}\n") == "not refused");
}

}  // namespace test_batch_fingerprint
