// Split GGUFs (engine/format/gguf_split.h): a model written in parts (tests/support/split_gguf.h) opens from any of
// its parts with every tensor's bytes as the unsplit file has them, and each defect of a set of parts is one
// FileError naming the file.
#include "engine/error.h"
#include "engine/format/gguf_split.h"
#include "engine/model/model.h"
#include "tests/support/random_model.h"
#include "tests/support/split_gguf.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

namespace test_gguf_split {

using namespace quill;
namespace fs = std::filesystem;

namespace {

// A tiny model with a vocabulary (metadata arrays too) written whole into a directory of its own, removed after.
struct Whole {
    fs::path dir;
    fs::path path;
    GgufFile file;

    explicit Whole(const std::string& name)
        : dir(test::temp_dir(name)), path(dir / "whole.gguf"), file(write(path)) {}
    ~Whole() { fs::remove_all(dir); }
    Whole(const Whole&) = delete;
    Whole& operator=(const Whole&) = delete;

    static GgufFile write(const fs::path& path) {
        test::TinySpec spec;
        spec.vocab = "spm";
        spec.type = GgmlType::Q8_0;
        const std::vector<uint8_t> bytes = test::make_tiny_gguf(spec);
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        return GgufFile::open(path.string());
    }
};

// Checks that `split` holds the metadata and the tensors (names, types, shapes and bytes) of `whole`.
void check_same_model(const GgufFile& whole, const GgufFile& split) {
    for (const auto& [key, value] : whole.metadata()) {
        INFO(key);
        const GgufValue* v = split.find(key);
        REQUIRE(v != nullptr);
        CHECK(*v == value);
    }
    REQUIRE(split.tensors().size() == whole.tensors().size());
    for (const GgufTensorInfo& t : whole.tensors()) {
        INFO(t.name);
        const GgufTensorInfo* s = split.find_tensor(t.name);
        REQUIRE(s != nullptr);
        CHECK(s->type == t.type);
        CHECK(s->ne == t.ne);
        REQUIRE(s->n_bytes == t.n_bytes);
        CHECK(std::memcmp(split.tensor_data(*s), whole.tensor_data(t), t.n_bytes) == 0);
    }
}

// The message of the FileError that opening `path` as a model throws ("" when it opens).
std::string open_error(const fs::path& path) {
    try {
        open_model_file(path.string());
    } catch (const FileError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("split file names: their prefix, part and count, and the path of each part", "[gguf][split]") {
    const auto n = parse_split_name("dir/Qwen-Q4_K_M-00002-of-00003.gguf");
    REQUIRE(n);
    CHECK(n->prefix == "dir/Qwen-Q4_K_M");
    CHECK(n->no == 2);
    CHECK(n->count == 3);
    CHECK(split_part_path(n->prefix, 1, 3) == "dir/Qwen-Q4_K_M-00001-of-00003.gguf");
    CHECK(!parse_split_name("model.gguf"));
    CHECK(!parse_split_name("m-2-of-3.gguf"));
    CHECK(!parse_split_name("-00001-of-00002.gguf"));
    CHECK(!parse_split_name("m-00001-of-00002.gguf.part"));
}

TEST_CASE("a split model opens from any of its parts with the metadata and tensors of the unsplit file",
          "[gguf][split]") {
    Whole whole("split-open");
    const size_t n = whole.file.tensors().size();
    REQUIRE(n > 6);
    std::vector<size_t> each(n);
    for (size_t i = 0; i < n; ++i) each[i] = i;
    // Two parts; three uneven ones; a first part of metadata only (gguf-split --no-tensor-first-split); a part
    // for every tensor.
    for (const std::vector<size_t>& starts : {std::vector<size_t>{0, 1}, {0, 4, n - 1}, {0, 0, n / 2}, each}) {
        INFO(fmt::format("parts from {}", fmt::join(starts, ", ")));
        const fs::path dir = whole.dir / fmt::format("split{}", starts.size());
        fs::create_directories(dir);
        const auto parts = test::write_split_gguf(whole.file, starts, dir, "m");
        for (const fs::path& given : {parts.front(), parts.back(), parts[parts.size() / 2]}) {
            INFO(given);
            const GgufFile model = open_model_file(given.string());
            CHECK(model.path() == parts.front().string());
            REQUIRE(model.parts().size() == parts.size());
            for (size_t k = 0; k < parts.size(); ++k) {
                CHECK(model.parts()[k].path == parts[k].string());
                CHECK(model.parts()[k].size == fs::file_size(parts[k]));
            }
            check_same_model(whole.file, model);
        }
        fs::remove_all(dir);
    }
}

TEST_CASE("a split model loads as the unsplit one does, its weights viewing each part's mapping", "[gguf][split]") {
    Whole whole("split-load");
    const auto parts = test::write_split_gguf(whole.file, {0, 3, 9}, whole.dir, "m");
    const auto a = Model::load(whole.path.string());
    const auto b = Model::load(parts[1].string());
    CHECK(b->config.n_layer == a->config.n_layer);
    CHECK(b->weight_bytes() == a->weight_bytes());
    const TensorView& last_a = a->weights.layers.back().ffn_down;
    const TensorView& last_b = b->weights.layers.back().ffn_down;
    REQUIRE(last_b.n_bytes == last_a.n_bytes);
    CHECK(std::memcmp(last_b.data, last_a.data, last_a.n_bytes) == 0);
    // The last layer's tensors are in the last part, and its view points into that part's mapping.
    const GgufTensorInfo* t = b->file.find_tensor(fmt::format("blk.{}.ffn_down.weight", b->config.n_layer - 1));
    REQUIRE(t != nullptr);
    CHECK(t->part == 2);
    CHECK(b->file.parts()[t->part].path == parts[2].string());
    CHECK(last_b.data == b->file.tensor_data(*t));
    CHECK(last_b.data != a->file.tensor_data(*a->file.find_tensor(t->name)));
}

TEST_CASE("each defect of a split model's parts is one error naming the file", "[gguf][split]") {
    Whole whole("split-bad");
    const size_t n = whole.file.tensors().size();
    const std::vector<size_t> starts{0, 4, 8};
    auto write = [&](const std::string& sub, const std::function<void(size_t, GgufWriter&)>& edit = {}) {
        fs::create_directories(whole.dir / sub);
        return test::write_split_gguf(whole.file, starts, whole.dir / sub, "m", edit);
    };

    SECTION("a missing part") {
        const auto parts = write("missing");
        fs::remove(parts[1]);
        const std::string e = open_error(parts[0]);
        CHECK(e.starts_with(parts[1].string() + ": missing part 2 of 3 of the split model " + parts[0].string()));
        CHECK(open_error(parts[2]).find("missing part 2 of 3") != std::string::npos);
    }
    SECTION("a part of another split") {
        const auto parts = write("mixed");
        const auto other = test::write_split_gguf(whole.file, {0, 5}, whole.dir / "mixed", "other");
        fs::copy_file(other[1], parts[2], fs::copy_options::overwrite_existing);
        const std::string e = open_error(parts[0]);
        CHECK(e.starts_with(parts[2].string() + ": split.count is 2"));
        CHECK(e.find("different splits") != std::string::npos);
    }
    SECTION("a part whose split.tensors.count is not the first part's") {
        const auto parts = write("counts", [&](size_t k, GgufWriter& w) {
            if (k == 2) w.set("split.tensors.count", static_cast<int32_t>(n + 1));
        });
        CHECK(open_error(parts[0]) == fmt::format("{}: split.tensors.count differs from {}'s: the parts come from "
                                                  "different splits",
                                                  parts[2].string(), parts[0].string()));
    }
    SECTION("a part whose split.no is not its place") {
        const auto parts = write("order", [](size_t k, GgufWriter& w) {
            if (k == 1) w.set("split.no", uint16_t{2});
        });
        CHECK(open_error(parts[0]).starts_with(parts[1].string() + ": split.no is 2, expected 1"));
    }
    SECTION("tensors that do not add up to split.tensors.count") {
        const auto parts = write("count", [&](size_t, GgufWriter& w) {
            w.set("split.tensors.count", static_cast<int32_t>(n + 1));
        });
        CHECK(open_error(parts[2]) == fmt::format("{}: split.tensors.count is {}, but its 3 parts hold {} tensors",
                                                  parts[0].string(), n + 1, n));
    }
    SECTION("a tensor in two parts") {
        const GgufTensorInfo& t = whole.file.tensors().front();
        const auto parts = write("twice", [&](size_t k, GgufWriter& w) {
            if (k == 2)
                w.add_tensor_view(t.name, t.type, t.ne,
                                  std::span<const uint8_t>(whole.file.tensor_data(t), t.n_bytes));
        });
        CHECK(open_error(parts[0]) ==
              fmt::format("{}: tensor '{}' is also in {}: a tensor is named twice in the split model",
                          parts[2].string(), t.name, parts[0].string()));
    }
    SECTION("a part renamed, so that the others cannot be found") {
        const auto parts = write("renamed");
        const fs::path renamed = whole.dir / "renamed" / "model.gguf";
        fs::rename(parts[0], renamed);
        CHECK(open_error(renamed) ==
              renamed.string() + ": part 1 of a split into 3 files, but its name does not end in "
                                 "-00001-of-00003.gguf, so the other parts cannot be found");
    }
}

}  // namespace test_gguf_split
