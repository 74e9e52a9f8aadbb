// Bad input to the quill binary: absurd flags, files that are not files, endless input, bytes the tokenizer cannot
// represent, hostile metadata, weights that overflow. Each gets one clear line and the documented exit status
// (2: a usage error, 1: a failure), or a warning where the run goes on.
#include "tests/support/fault_util.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sys/stat.h>

namespace test_bad_input {

using namespace quill;
using namespace quill::test;

namespace {

// A non-zero status, and one error line, the last, that contains `fragment`.
void check_error(const Outcome& r, int status, const std::string& fragment) {
    INFO("stderr: " << r.err);
    CHECK(r.status == status);
    CHECK(last_line(r.err).starts_with("quill: error: "));
    CHECK(last_line(r.err).find(fragment) != std::string::npos);
    CHECK(count_errors(r.err) == 1);
}

Outcome quill_run(const std::vector<std::string>& args, const std::string& in = "") { return run_io(args, in, "", ""); }

void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("absurd flag values are usage errors naming the flag", "[cli]") {
    const std::filesystem::path tiny = tiny_model_file(TinyModel::spm);
    const std::vector<std::string> base{"run", "--raw", "-m", tiny.string(), "-p", "Once upon a time"};
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
        {{"--seed", "-5"}, "'-5' is not a seed"},  // wrapped to 2^64-5
        {{"--seed", "18446744073709551616"}, "is not a seed"},  // saturated
        {{"--seed", "12abc"}, "is not a seed"},
        {{"--temp", ""}, "--temp: expected a value"},  // read as 0
        {{"--top-k", ""}, "--top-k: expected a value"},
        {{"--top-k", "-3"}, "--top-k -3 is out of range"},  // acted as 0
        {{"-c", ""}, "--ctx: expected a value"},
        {{"-n", "-5"}, "-n -5 is out of range"},
        {{"-c", "0"}, "--ctx"},
        {{"-c", "1"}, "the prompt is 5 tokens, longer than the context of 1"},
        {{"--top-p", "7"}, "--top-p 7 is out of range"},
        {{"--temp", "nan"}, "--temp nan is out of range"},
        {{"--temp", "inf"}, "--temp inf is out of range: expected a finite number >= 0"},
        {{"--repeat-penalty", "inf"}, "--repeat-penalty inf is out of range: expected a finite number > 0"},
        {{"-t", "0"}, "--threads"},
        {{"--device", "tpu"}, "--device"},
        {{"-f", ""}, "--file: expected a value"},
        {{"--stop", ""}, "--stop: expected a value"},
        {{"--max-input-bytes", "0"}, "--max-input-bytes"},
    };
    for (const auto& [extra, fragment] : cases) {
        auto args = base;
        args.insert(args.end(), extra.begin(), extra.end());
        INFO(extra[0] << " '" << extra[1] << "'");
        check_error(quill_run(args), 2, fragment);
    }
    // -m '' once fell back to the default model.
    check_error(quill_run({"run", "--raw", "-m", "", "-p", "x"}), 2, "--model: expected a value");
    check_error(quill_run({"info", ""}), 2, "expected a value");
    check_error(quill_run({"frob"}), 2, "unknown subcommand 'frob' (expected info, tokenize, run, template, chat, batch, perplexity, bench, ");
}

TEST_CASE("a FIFO, a directory or a device named as a model or tokenizer is refused without blocking", "[cli]") {
    const std::filesystem::path tiny = tiny_model_file(TinyModel::spm);
    const auto dir = temp_dir("bad-files");
    const std::string fifo = (dir / "fifo").string();
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    for (const std::string& path : {fifo, dir.string(), std::string("/dev/zero")}) {
        INFO(path);
        check_error(quill_run({"run", "--raw", "-m", path, "-p", "x"}), 1, path + ": the GGUF file is not a regular file");
        check_error(quill_run({"info", path}), 1, "not a regular file");
        check_error(quill_run({"run", "--raw", "-m", tiny.string(), "--tokenizer", path, "-p", "x"}), 1,
                    path + ": the tokenizer model is not a regular file");
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("prompt input is capped, and a read error is an error, not an empty prompt", "[cli]") {
    const std::filesystem::path tiny = tiny_model_file(TinyModel::spm);
    const std::string m = tiny.string();
    check_error(quill_run({"run", "--raw", "-m", m, "-f", "/dev/zero"}), 2, "/dev/zero: the input is longer than the limit "
                                                                   "of 64 MiB (--max-input-bytes raises it)");
    check_error(quill_run({"tokenize", "-m", m}, "/dev/zero"), 2,
                "stdin: the input is longer than the limit of 64 MiB");
    const auto dir = temp_dir("bad-prompt");
    check_error(quill_run({"run", "--raw", "-m", m, "-f", dir.string()}), 1, "the prompt file is a directory");
    check_error(quill_run({"run", "--raw", "-m", m}, dir.string()), 1, "stdin: cannot read: Is a directory");
    check_error(quill_run({"tokenize", "-m", m}, dir.string()), 1, "stdin: cannot read: Is a directory");
    // The limit is exact and the flag moves it.
    write_bytes(dir / "p.txt", "Once upon a time");  // 16 bytes
    check_error(quill_run({"run", "--raw", "-m", m, "-f", (dir / "p.txt").string(), "--max-input-bytes", "15"}), 2,
                "longer than the limit of 15 bytes");
    Outcome ok = quill_run({"run", "--raw", "-m", m, "-f", (dir / "p.txt").string(), "--max-input-bytes", "16", "-n", "4",
                            "--temp", "0"});
    CHECK(ok.status == 0);
    CHECK(!ok.out.empty());
    CHECK(ok.out == quill_run({"run", "--raw", "-m", m, "-p", "Once upon a time", "-n", "4", "--temp", "0"}).out);
    // A FIFO with no writer reads as empty instead of blocking.
    const std::string fifo = (dir / "fifo").string();
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    check_error(quill_run({"run", "--raw", "-m", m, "-f", fifo}), 2, "the prompt is empty");
    std::filesystem::remove_all(dir);
}

TEST_CASE("bytes the tokenizer cannot represent get one warning, NUL bytes are tokens", "[cli]") {
    const std::filesystem::path tiny = tiny_model_file(TinyModel::spm);
    const std::string m = tiny.string();
    // SPM with byte fallback: invalid UTF-8 becomes U+FFFD (three byte tokens), said once.
    Outcome r = quill_run({"tokenize", "-m", m, "--no-bos"}, "");
    const auto dir = temp_dir("bad-utf8");
    write_bytes(dir / "in", std::string("a\xff" "b\xfe\xfd", 5));
    r = quill_run({"tokenize", "-m", m, "--no-bos", "--pieces"}, (dir / "in").string());
    CHECK(r.status == 0);
    CHECK(r.err == "quill: warning: the text was changed by tokenizing: 3 bytes of invalid UTF-8 (the first, 0xff, "
                   "at offset 1) became U+FFFD (the tokenizer cannot represent them)\n");
    CHECK(r.out.find("\t\\xef\n") != std::string::npos);  // U+FFFD's first byte, a byte token
    r = quill_run({"run", "--raw", "-m", m, "-f", (dir / "in").string(), "-n", "2"});
    CHECK(r.status == 0);
    CHECK(r.err.find("3 bytes of invalid UTF-8") != std::string::npos);
    // NUL is a byte like any other: the byte token <0x00>, no warning.
    write_bytes(dir / "nul", std::string("a\0b", 3));
    r = quill_run({"tokenize", "-m", m, "--no-bos", "--pieces"}, (dir / "nul").string());
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(r.out.find("\t\\x00\n") != std::string::npos);
    // Without byte fallback (the byte tokens made plain text), characters outside the vocabulary become <unk>.
    const std::string plain = (dir / "no-bytes.gguf").string();
    rewrite_gguf(m, plain, [&](GgufWriter& w) {
        const GgufFile f = GgufFile::open(m);
        std::vector<GgufValue> types;
        const GgufArray* old = f.get_array("tokenizer.ggml.token_type", GgufType::I32);
        for (size_t i = 0; i < old->size(); ++i)
            types.emplace_back(static_cast<int32_t>(old->at(i).as_int() == 6 ? 1 : old->at(i).as_int()));
        w.set("tokenizer.ggml.token_type", GgufValue::array(GgufType::I32, types));
    });
    r = quill_run({"tokenize", "-m", plain, "--no-bos", "-p", "a\u6f22b"});
    CHECK(r.status == 0);
    CHECK(r.err.find("1 piece of text not in the vocabulary became the unknown token <unk>") != std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("control bytes in model metadata are escaped, and info --json survives invalid UTF-8", "[cli]") {
    const std::filesystem::path tiny = tiny_model_file(TinyModel::spm);
    const auto dir = temp_dir("bad-meta");
    const std::string evil = (dir / "evil.gguf").string();
    rewrite_gguf(tiny.string(), evil, [](GgufWriter& w) {
        w.set("general.name", "red\x1b[31mX\x07\xc2\x9b" "2J\xff");
        w.set("llama.evil", "\x1b]0;title\x07");
    });
    Outcome info = quill_run({"info", evil});
    REQUIRE(info.status == 0);
    CHECK(info.out.find('\x1b') == std::string::npos);
    CHECK(info.out.find('\x07') == std::string::npos);
    CHECK(info.out.find("red\\x1b[31mX\\x07\\xc2\\x9b2J\\xff") != std::string::npos);
    Outcome json = quill_run({"info", "--json", evil});
    REQUIRE(json.status == 0);  // it failed: nlohmann refuses to dump invalid UTF-8
    CHECK(nlohmann::json::parse(json.out)["name"] == "red\x1b[31mX\x07\xc2\x9b" "2J\xef\xbf\xbd");
    Outcome run = quill_run({"run", "--raw", "-m", evil, "-p", "Once", "-n", "1"});
    CHECK(run.status == 0);
    CHECK(run.err.find("quill: red\\x1b[31mX") != std::string::npos);  // the load line
    CHECK(run.err.find('\x1b') == std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("info calls a model runnable only when run would load it", "[cli]") {
    const std::filesystem::path tiny = tiny_model_file(TinyModel::spm);
    const auto dir = temp_dir("bad-runnable");
    const std::string broken = (dir / "broken-tokenizer.gguf").string();
    rewrite_gguf(tiny.string(), broken, [](GgufWriter& w) { w.set("tokenizer.ggml.model", "frob"); });
    Outcome run = quill_run({"run", "--raw", "-m", broken, "-p", "x"});
    check_error(run, 1, "tokenizer.ggml.model 'frob' is not supported");
    auto j = nlohmann::json::parse(quill_run({"info", "--json", broken}).out);
    CHECK(j["runnable"] == false);
    CHECK(j["not_runnable"] == last_line(run.err).substr(std::strlen("quill: error: ")));
    CHECK(quill_run({"info", broken}).out.find("not runnable by quill: ") != std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("non-finite activations stop the run with an error naming the layer", "[cli]") {
    const std::filesystem::path tiny = tiny_model_file(TinyModel::spm);
    const auto dir = temp_dir("bad-weights");
    auto poison = [&](const std::string& tensor, float value) {
        const std::string path = (dir / (tensor + ".gguf")).string();
        rewrite_gguf(tiny.string(), path, {}, [&](const std::string& name, std::vector<uint8_t>& bytes) {
            if (name != tensor) return;
            for (size_t i = 0; i + 4 <= bytes.size(); i += 4) std::memcpy(bytes.data() + i, &value, 4);
        });
        return path;
    };
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float huge = std::numeric_limits<float>::max();
    check_error(quill_run({"run", "--raw", "-m", poison("blk.2.ffn_down.weight", nan), "-p", "Once", "-n", "4"}), 1,
                "layer 2 (blk.2.*) produced non-finite values (inf or NaN) in the residual stream");
    check_error(quill_run({"run", "--raw", "-m", poison("blk.1.ffn_up.weight", huge), "-p", "Once", "-n", "4"}), 1,
                "layer 1 (blk.1.*) produced non-finite values");
    check_error(quill_run({"run", "--raw", "-m", poison("blk.4.attn_v.weight", inf), "-p", "Once", "-n", "4"}), 1,
                "layer 4 (blk.4.*) produced non-finite values");
    check_error(quill_run({"run", "--raw", "-m", poison("output.weight", huge), "-p", "Once", "-n", "4"}), 1,
                "the output layer (output_norm, output) produced non-finite logits");
    // Greedy rows are checked where they are picked (CpuBackend::forward_sample).
    check_error(quill_run({"run", "--raw", "-m", poison("output.weight", huge), "-p", "Once", "-n", "4", "--temp", "0"}),
                1, "the output layer (output_norm, output) produced non-finite logits");
    std::filesystem::remove_all(dir);
}

TEST_CASE("a context that cannot fit in memory is refused before allocating, saying what fits", "[cli][slow]") {
    auto model = default_model();
    if (!model) {
        skip("the default model is absent: run models/fetch_default.sh");
        return;
    }
    // 16M positions of SmolLM2-135M's f16 KV cache are 360 GiB.
    Outcome r = quill_run({"run", "--raw", "-m", model->string(), "-p", "x", "-c", "16777216"});
    check_error(r, 2, "-c 16777216: the KV cache would take 360 GiB, but only ");
    CHECK(last_line(r.err).find("at most -c ") != std::string::npos);
}

}  // namespace test_bad_input
