// The quill binary end to end: info, tokenize, run and bench on the tiny models the tests write and on real files,
// and bad input getting one clear error line and a non-zero exit.
#include "engine/format/gguf.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace test_cli {

using namespace quill;
using test::run_quill;
using test::TinyModel;

namespace {

std::string tiny_model(TinyModel which = TinyModel::spm) { return test::tiny_model_file(which).string(); }

const char* kStoriesText =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red "
    "ball. She wanted to play with it, but it was too high.\nLily's mom said";

// A non-zero exit and one error line, the last on stderr, naming what it must (progress lines may precede it).
void check_one_error_line(const test::CommandResult& r, const std::string& fragment) {
    INFO("stderr: " << r.err);
    CHECK(r.status != 0);
    REQUIRE(r.err.ends_with("\n"));
    const size_t start = r.err.rfind('\n', r.err.size() - 2);
    const std::string last = r.err.substr(start == std::string::npos ? 0 : start + 1);
    CHECK(last.starts_with("quill: error: "));
    CHECK(last.find(fragment) != std::string::npos);
    size_t errors = 0;
    for (size_t at = r.err.find("error"); at != std::string::npos; at = r.err.find("error", at + 1)) ++errors;
    CHECK(errors == 1);
}

}  // namespace

TEST_CASE("quill info describes every GGUF in the test data", "[cli]") {
    if (!test::require_testdata("vocab") || !test::require_testdata("models")) return;
    const std::filesystem::path root = test::testdata_dir();
    for (const char* sub : {"vocab", "models"}) {
        for (const auto& e : std::filesystem::directory_iterator(root / sub)) {
            if (e.path().extension() != ".gguf") continue;
            INFO(e.path());
            auto r = run_quill({"info", e.path().string()});
            CHECK(r.status == 0);
            CHECK(r.out.find("architecture") != std::string::npos);
            CHECK(r.out.find("tokenizer") != std::string::npos);
            auto j = run_quill({"info", "--json", "--tensors", e.path().string()});
            REQUIRE(j.status == 0);
            auto info = nlohmann::json::parse(j.out);
            CHECK(info["tokenizer"]["vocab_size"].get<int>() > 0);
            CHECK(info["tensors"].size() == info["tensor_count"].get<size_t>());
        }
    }
    auto r = run_quill({"info", "--json", (root / "models/stories260K-Q8_0mix.gguf").string()});
    auto info = nlohmann::json::parse(r.out);
    CHECK(info["architecture"] == "llama");
    CHECK(info["runnable"] == true);
    CHECK(info["model"]["n_head_kv"] == 4);
    CHECK(info["tensor_types"]["q8_0"]["count"] == 32);
    CHECK(info["chat_template"]["present"] == false);
}

TEST_CASE("quill info describes a model's shape, tensor types, tokenizer and chat template", "[cli]") {
    for (TinyModel which : {TinyModel::spm, TinyModel::spm_q8_0, TinyModel::spm_chat, TinyModel::bpe_chat}) {
        const std::string m = tiny_model(which);
        INFO(m);
        auto r = run_quill({"info", m});
        CHECK(r.status == 0);
        CHECK(r.out.find("architecture") != std::string::npos);
        CHECK(r.out.find("tokenizer") != std::string::npos);
        auto j = run_quill({"info", "--json", "--tensors", m});
        REQUIRE(j.status == 0);
        auto info = nlohmann::json::parse(j.out);
        CHECK(info["architecture"] == "llama");
        CHECK(info["runnable"] == true);
        CHECK(info["model"]["n_layer"] == 5);
        CHECK(info["model"]["n_head_kv"] == 4);
        CHECK(info["tensors"].size() == info["tensor_count"].get<size_t>());
        CHECK(info["tensor_count"] == 48);  // 5 layers of 9, the embedding, the output and its norm
        // Every matrix (7 a layer, the embedding, the output) in the file's type, the norms F32; the Q8_0 file's
        // ffn_down in F16.
        if (which == TinyModel::spm_q8_0) {
            CHECK(info["tensor_types"]["q8_0"]["count"] == 32);
            CHECK(info["tensor_types"]["f16"]["count"] == 5);
            CHECK(info["tensor_types"]["f32"]["count"] == 11);
        } else {
            CHECK(info["tensor_types"]["f32"]["count"] == 48);
        }
        const test::TinyVocab vocab = which == TinyModel::bpe_chat   ? test::tiny_bpe_vocab()
                                      : which == TinyModel::spm_chat ? test::tiny_spm_vocab(true)
                                                                     : test::tiny_spm_vocab();
        CHECK(info["tokenizer"]["model"] == vocab.model);
        CHECK(info["tokenizer"]["vocab_size"] == vocab.size());
        CHECK(info["tokenizer"]["bos_token_id"] == vocab.bos);
        const bool chat = which == TinyModel::spm_chat || which == TinyModel::bpe_chat;
        CHECK(info["chat_template"]["present"] == chat);
    }
}

TEST_CASE("quill info rejects malformed files with one line naming the file and the defect", "[cli]") {
    const std::string model = tiny_model();
    auto dir = test::temp_dir("cli-bad");
    auto write = [&](const std::string& name, const std::string& bytes) {
        auto p = dir / name;
        std::ofstream(p, std::ios::binary) << bytes;
        return p.string();
    };
    auto bad_magic = write("bad_magic.gguf", std::string("GGUX\3\0\0\0", 8) + std::string(16, '\0'));
    check_one_error_line(run_quill({"info", bad_magic}), bad_magic + ": not a GGUF file: bad magic");
    auto empty = write("empty.gguf", "");
    check_one_error_line(run_quill({"info", empty}), "empty.gguf: not a GGUF file");
    std::string bytes = test::read_file(model);
    auto cut = write("cut.gguf", bytes.substr(0, bytes.size() / 2));
    check_one_error_line(run_quill({"info", cut}), "runs past the end");
    // A tensor of the wrong shape: rename the attention output so a required tensor is missing.
    std::string renamed = bytes;
    auto at = renamed.find("blk.0.attn_output.weight");
    REQUIRE(at != std::string::npos);
    renamed[at + 6] = 'X';
    auto missing = write("missing.gguf", renamed);
    check_one_error_line(run_quill({"info", missing}), "missing tensor 'blk.0.attn_output.weight'");
    check_one_error_line(run_quill({"info", (dir / "nope.gguf").string()}), "cannot open");
    std::filesystem::remove_all(dir);
}

TEST_CASE("quill tokenize prints ids, pieces and JSON", "[cli]") {
    const std::string m = tiny_model();
    const test::TinyVocab v = test::tiny_spm_vocab();
    const int32_t once = v.id("▁Once"), upon = v.id("▁upon"), a = v.id("▁a"), time = v.id("▁time");
    auto r = run_quill({"tokenize", "-m", m, "-p", "Once upon a time"});
    CHECK(r.status == 0);
    CHECK(r.out == fmt::format("1 {} {} {} {}\n", once, upon, a, time));
    CHECK(run_quill({"tokenize", "-m", m, "--no-bos", "-p", "Once upon a time"}).out ==
          fmt::format("{} {} {} {}\n", once, upon, a, time));
    // The text as an argument is -p; with -p too it is refused, not one of them dropped.
    CHECK(run_quill({"tokenize", "-m", m, "Once upon a time"}).out == r.out);
    auto both = run_quill({"tokenize", "-m", m, "-p", "Once", "upon"});
    CHECK(both.status == 2);
    CHECK(both.out.empty());
    // stdin is used exactly as read: the trailing newline is a token too.
    auto s = run_quill({"tokenize", "-m", m, "--no-bos"}, "Once upon a time\n");
    CHECK(s.out.starts_with(fmt::format("{} {} {} {} ", once, upon, a, time)));
    auto p = run_quill({"tokenize", "-m", m, "--pieces", "-p", "Once upon"});
    CHECK(p.out == fmt::format("1\t<s>\n{}\t Once\n{}\t upon\n", once, upon));  // the text, not ▁Once
    auto j = nlohmann::json::parse(run_quill({"tokenize", "-m", m, "--json", "-p", "Once"}).out);
    CHECK(j["ids"] == nlohmann::json::array({1, once}));
}

TEST_CASE("quill run on stories260K prints exactly the reference text", "[cli][model]") {
    auto stories = test::require_testdata("models/stories260K.gguf");
    if (!stories) return;
    auto r = run_quill({"run", "-m", stories->string(), "-p", "Once upon a time", "-n", "64", "--temp", "0", "--raw"});
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out == kStoriesText);
    CHECK(r.err.find("prefill") != std::string::npos);  // timings go to stderr only
    // The Q8_0 mix gives the same text.
    auto q = run_quill({"run", "--raw", "-m", (stories->parent_path() / "stories260K-Q8_0mix.gguf").string(), "-p",
                        "Once upon a time", "-n", "64", "--temp", "0", "--raw"});
    CHECK(q.out == kStoriesText);
}

TEST_CASE("quill run --json prints one record", "[cli][model]") {
    const std::string m = tiny_model();
    auto r = run_quill({"run", "--raw", "-m", m, "-p", "Once upon a time", "-n", "16", "--json", "--seed", "9"});
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["finish_reason"] == "length");
    CHECK(j["prompt_tokens"] == 5);
    CHECK(j["completion_tokens"] == 16);
    CHECK(j["seed"] == 9);
    CHECK(j["timings"]["decode_tokens_per_s"].get<double>() > 0);
    CHECK(j["timings"]["ttft_ms"].get<double>() > 0);
    auto again = nlohmann::json::parse(
        run_quill({"run", "--raw", "-m", m, "-p", "Once upon a time", "-n", "16", "--json", "--seed", "9"}).out);
    CHECK(again["text"] == j["text"]);
    // --stop cuts the text and gives finish reason "stop": a stop string from the middle of the greedy text.
    const std::vector<std::string> greedy{"run", "--raw", "-m", m, "-p", "Once upon a time", "-n", "64", "--temp", "0",
                                          "--json"};
    const std::string text = nlohmann::json::parse(run_quill(greedy).out)["text"];
    REQUIRE(text.size() > 40);
    const std::string stop = text.substr(text.size() / 2, 4);
    const size_t cut = text.find(stop);
    auto with_stop = greedy;
    with_stop.insert(with_stop.end(), {"--stop", stop});
    auto s = nlohmann::json::parse(run_quill(with_stop).out);
    CHECK(s["text"] == text.substr(0, cut));
    CHECK(s["finish_reason"] == "stop");
}

TEST_CASE("quill run reports bad input with one line and a non-zero exit", "[cli]") {
    const std::string m = tiny_model();
    check_one_error_line(run_quill({"run", "--raw", "-m", m, "-c", "4", "-p", "Once upon a time"}),
                         "the prompt is 5 tokens, longer than the context of 4");
    check_one_error_line(run_quill({"run", "--raw", "-m", m, "-p", "x", "--top-p", "2"}), "--top-p");
    check_one_error_line(run_quill({"run", "-m", "/nonexistent/model.gguf", "-p", "x"}), "/nonexistent/model.gguf");
    check_one_error_line(run_quill({"run", "--raw", "-m", m, "-f", "/nonexistent/prompt.txt"}), "/nonexistent/prompt.txt");
    check_one_error_line(run_quill({"run", "--no-such-flag"}), "--no-such-flag");
    check_one_error_line(run_quill({"run", "--raw", "-m", m, "-p", "x", "--temp", "abc"}), "--temp");
    check_one_error_line(run_quill({"run", "--raw", "-m", m, "-f", "/dev/null"}), "the prompt is empty");
    auto full = run_quill({"run", "--raw", "-m", m, "-c", "12", "-p", "Once upon a time", "--temp", "0"});
    CHECK(full.status == 0);  // a full context is a normal finish
    CHECK(full.err.find("context of 12 tokens is full") != std::string::npos);
}

TEST_CASE("without a GPU, quill -v says so in one line and runs on the CPU", "[cli]") {
    const std::string m = tiny_model();
    auto r = run_quill({"run", "--raw", "-v", "-m", m, "-p", "Once", "-n", "2"});
    CHECK(r.status == 0);
    size_t lines = 0;
    for (size_t at = r.err.find("using the CPU"); at != std::string::npos; at = r.err.find("using the CPU", at + 1))
        ++lines;
    CHECK(lines == 1);
    CHECK(run_quill({"run", "--raw", "-m", m, "-p", "Once", "-n", "2", "--device", "cpu"}).err.find("using the CPU") ==
          std::string::npos);
    auto cuda = run_quill({"run", "--raw", "-m", m, "-p", "Once", "-n", "2", "--device", "cuda"});
    CHECK(cuda.status != 0);  // no GPU here, or no CUDA backend yet: an error, never a silent CPU run
}

TEST_CASE("quill bench times a synthetic model and saves it as a loadable GGUF", "[cli]") {
    auto dir = test::temp_dir("cli-bench");
    const std::string saved = (dir / "s15m.gguf").string();
    auto r = run_quill({"bench", "--synthetic", "stories15m", "--dtype", "q8_0", "-p", "16,8", "-n", "8", "-r", "2",
                        "--json", "--save", saved});
    INFO(r.err);
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.out);
    REQUIRE(j["tests"].size() == 3);  // llama-bench's tests: pp16, pp8, tg8
    CHECK(j["tests"][0]["test"] == "pp16");
    CHECK(j["tests"][1]["test"] == "pp8");
    CHECK(j["tests"][2]["test"] == "tg8");
    for (const auto& t : j["tests"]) {
        CHECK(t["tokens_per_s"].get<double>() > 0);
        CHECK(t["runs"].size() == 2);
    }
    CHECK(j["tests"][2]["gb_per_s"].get<double>() > 0);
    // pp16's arithmetic, counted by hand for stories15m (6 layers of 288 wide, FFN 768, 6 heads of 48, vocabulary
    // 32000): per token 6 x 2 x (4 x 288 x 288 + 3 x 288 x 768) = 11,943,936; causal attention 6 x 4 x 288 x
    // (1 + ... + 16) = 940,032; the output row once, 2 x 288 x 32000 = 18,432,000. tflops is that over each run's
    // time (the median of two runs: their mean, as tokens_per_s's).
    const auto& pp16 = j["tests"][0];
    CHECK(pp16["tflops"].get<double>() * 1e12 / pp16["tokens_per_s"].get<double>() ==
          Approx((16 * 11943936.0 + 940032.0 + 18432000.0) / 16).epsilon(1e-9));
    CHECK_FALSE(j["tests"][2].contains("tflops"));
    // Batched decode: 3 sequences per step, every token counted; a batch above the slots is refused.
    auto b3 = run_quill({"bench", "--synthetic", "stories15m", "-p", "0", "-n", "4", "-r", "1", "--batch-decode", "3",
                         "--json"});
    REQUIRE(b3.status == 0);
    auto j3 = nlohmann::json::parse(b3.out);
    REQUIRE(j3["tests"].size() == 1);
    CHECK(j3["tests"][0]["test"] == "tg4x3");
    CHECK(j3["tests"][0]["n_seq"] == 3);
    auto info = nlohmann::json::parse(run_quill({"info", "--json", saved}).out);
    CHECK(info["runnable"] == true);
    CHECK(info["model"]["n_embd"] == 288);
    auto run = run_quill({"run", "--raw", "-m", saved, "-p", "hello", "-n", "4", "--temp", "0"});
    CHECK(run.status == 0);
    auto b = run_quill({"bench", "-m", saved, "-p", "8", "-n", "4", "-r", "1"});
    CHECK(b.status == 0);
    CHECK(b.out.find("| model | backend | threads | test | t/s |") == 0);  // llama-bench's markdown table
    CHECK(b.out.find("| pp8 | ") != std::string::npos);
    CHECK(b.out.find("| tg4 | ") != std::string::npos);
    std::filesystem::remove_all(dir);
}

// ---- the default model (fetched by models/fetch_default.sh); few and short, they are the slow ones ----

TEST_CASE("default model: greedy answer is coherent and identical across runs and thread counts", "[cli][slow]") {
    auto model = test::require_default_model();
    if (!model) return;
    const std::vector<std::string> args{"run", "-m", model->string(), "-p", "The capital of France is", "-n", "12",
                                        "--temp", "0", "--raw"};
    auto one = args, two = args;
    one.insert(one.end(), {"-t", "1"});
    two.insert(two.end(), {"-t", "2"});
    auto a = run_quill(one), b = run_quill(two), c = run_quill(two);
    INFO(a.err);
    REQUIRE(a.status == 0);
    CHECK(a.out.find("Paris") != std::string::npos);
    CHECK(a.out == b.out);
    CHECK(b.out == c.out);
}

}  // namespace test_cli
