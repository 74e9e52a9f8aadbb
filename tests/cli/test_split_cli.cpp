// Every command that opens a model takes a split GGUF (engine/format/gguf_split.h) by any of its parts and answers
// as it does for the unsplit file; a broken set of parts is one error line.
#include "engine/format/gguf.h"
#include "tests/support/random_model.h"
#include "tests/support/split_gguf.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace test_split_cli {

using namespace quill;
using test::run_quill;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The tiny chat model and that model split into three parts (the middle one of a single tensor), in a directory
// removed after the test.
struct SplitModel {
    fs::path whole = test::tiny_model_file(test::TinyModel::spm_chat);
    fs::path dir = test::temp_dir("split-cli");
    std::vector<fs::path> parts;

    SplitModel() { parts = test::write_split_gguf(GgufFile::open(whole.string()), {0, 5, 6}, dir, "tiny"); }
    ~SplitModel() { fs::remove_all(dir); }
    SplitModel(const SplitModel&) = delete;
    SplitModel& operator=(const SplitModel&) = delete;
};

// Everything after the first line.
std::string after_first_line(const std::string& s) { return s.substr(s.find('\n') + 1); }

}  // namespace

TEST_CASE("run, chat, batch, tokenize, template and perplexity answer for a split model as for the whole file",
          "[split][cli]") {
    SplitModel m;
    std::ofstream(m.dir / "text.txt") << std::string(40, ' ') + "the cat sat on the mat and the dog ran to the "
                                                               "park where the birds sang all day long\n";
    struct Command {
        std::vector<std::string> args;
        std::string input;
    };
    const std::vector<Command> commands{
        {{"run", "-p", "Once upon a time", "-n", "16", "--temp", "0", "-t", "1"}, ""},
        {{"chat", "-n", "8", "--temp", "0", "-t", "1"}, "hello\nand then?\n"},
        {{"batch", "--raw", "-n", "8", "--temp", "0", "--seed", "1", "--quiet", "-t", "1"}, "the cat\nthe dog\n"},
        {{"tokenize", "-p", "the cat sat"}, ""},
        {{"template", "--tokens"}, ""},
        {{"perplexity", "-f", (m.dir / "text.txt").string(), "-c", "16", "-q", "-t", "1"}, ""},
    };
    for (const Command& c : commands) {
        INFO(c.args.front());
        auto with = [&](const fs::path& model) {
            std::vector<std::string> args = c.args;
            args.insert(args.begin() + 1, {"-m", model.string()});
            return run_quill(args, c.input);
        };
        const auto want = with(m.whole);
        INFO(want.err);
        REQUIRE(want.status == 0);
        REQUIRE(!want.out.empty());
        for (const fs::path& given : {m.parts[0], m.parts[2]}) {
            INFO(given);
            const auto got = with(given);
            INFO(got.err);
            CHECK(got.status == 0);
            CHECK(got.out == want.out);
        }
    }
}

TEST_CASE("quill info and bench describe a split model as the whole file, with its parts", "[split][cli]") {
    SplitModel m;
    const auto whole = run_quill({"info", "-m", m.whole.string()});
    REQUIRE(whole.status == 0);
    const auto split = run_quill({"info", "-m", m.parts[1].string()});
    INFO(split.err);
    REQUIRE(split.status == 0);
    CHECK(after_first_line(split.out) == after_first_line(whole.out));
    CHECK(split.out.starts_with(fmt::format("file            {} (", m.parts[0].string())));
    CHECK(split.out.find(" in 3 parts, GGUF v3)\n") != std::string::npos);

    auto wj = json::parse(run_quill({"info", "-m", m.whole.string(), "--json", "--tensors"}).out);
    auto sj = json::parse(run_quill({"info", "-m", m.parts[2].string(), "--json", "--tensors"}).out);
    CHECK(sj["parts"] == json({m.parts[0].string(), m.parts[1].string(), m.parts[2].string()}));
    uint64_t size = 0;
    for (const auto& p : m.parts) size += fs::file_size(p);
    CHECK(sj["file_size"] == size);
    CHECK(sj["runnable"] == true);
    // Each tensor's offset is in the part that holds it; the part's bytes there are the tensor's.
    const GgufFile whole_file = GgufFile::open(m.whole.string());
    REQUIRE(sj["tensors"].size() == whole_file.tensors().size());
    for (const auto& t : sj["tensors"]) {
        const GgufTensorInfo* w = whole_file.find_tensor(t["name"].get<std::string>());
        REQUIRE(w != nullptr);
        std::ifstream in(m.parts[t["part"].get<size_t>() - 1], std::ios::binary);
        in.seekg(t["offset"].get<std::streamoff>());
        std::string bytes(w->n_bytes, '\0');
        in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        CHECK(bytes == std::string(reinterpret_cast<const char*>(whole_file.tensor_data(*w)), w->n_bytes));
    }
    for (auto* j : {&wj, &sj}) {
        for (const char* k : {"file", "file_size", "parts", "tensors"}) j->erase(k);
    }
    CHECK(sj == wj);

    const auto bench = run_quill({"bench", "-m", m.parts[0].string(), "-p", "8", "-n", "4", "-r", "1", "-t", "1"});
    INFO(bench.err);
    CHECK(bench.status == 0);
}

TEST_CASE("a split model with a part missing or from another split is one error line", "[split][cli]") {
    SplitModel m;
    fs::rename(m.parts[1], m.dir / "aside.gguf");
    auto r = run_quill({"run", "-m", m.parts[0].string(), "-p", "x"});
    CHECK(r.status == 1);
    CHECK(r.out.empty());
    CHECK(r.err == fmt::format("quill: error: {}: missing part 2 of 3 of the split model {}\n", m.parts[1].string(),
                               m.parts[0].string()));
    const auto other = test::write_split_gguf(GgufFile::open(m.whole.string()), {0, 5}, m.dir, "other");
    fs::copy_file(other[1], m.parts[1]);
    r = run_quill({"info", "-m", m.parts[2].string()});
    CHECK(r.status == 1);
    CHECK(r.err.starts_with(fmt::format("quill: error: {}: split.count is 2", m.parts[1].string())));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

}  // namespace test_split_cli
