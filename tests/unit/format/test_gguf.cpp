// GGUF reader and writer: round trips, the real files in the test data, and a generated set of malformed files
// that must each be rejected with a FileError (never a crash, a hang or a huge allocation).
#include "engine/error.h"
#include "engine/format/gguf.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <random>

namespace test_gguf {

using namespace quill;

namespace {

// Every value type, arrays of each, an array of strings and a nested array.
GgufWriter sample_writer() {
    GgufWriter w;
    w.set("general.architecture", "llama");
    w.set("general.alignment", uint32_t(64));
    w.set("t.u8", uint8_t(200));
    w.set("t.i8", int8_t(-100));
    w.set("t.u16", uint16_t(60000));
    w.set("t.i16", int16_t(-30000));
    w.set("t.u32", uint32_t(4000000000u));
    w.set("t.i32", int32_t(-2000000000));
    w.set("t.f32", 3.25f);
    w.set("t.bool", true);
    w.set("t.string", std::string("héllo \0 world", 14));
    w.set("t.u64", uint64_t(18000000000000000000ull));
    w.set("t.i64", int64_t(-9000000000000000000ll));
    w.set("t.f64", -1.5e300);
    w.set("t.empty_string", "");
    w.set("t.strings", GgufValue::strings({"a", "", "<0x0A>", "▁the"}));
    w.set("t.floats", GgufValue::array(GgufType::F32, {1.0f, -2.5f, 1e-30f}));
    w.set("t.bools", GgufValue::array(GgufType::BOOL, {true, false}));
    w.set("t.i64s", GgufValue::array(GgufType::I64, {int64_t(1), int64_t(-1)}));
    w.set("t.empty", GgufValue::array(GgufType::U32, {}));
    w.set("t.nested", GgufValue::array(GgufType::ARRAY, {GgufValue::array(GgufType::U8, {uint8_t(1), uint8_t(2)}),
                                                         GgufValue::array(GgufType::U8, {})}));
    std::vector<uint8_t> f32(4 * 8 * 3), q8(34 * 2), f16(2 * 32);
    for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i * 7);
    for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i * 13 + 1);
    for (size_t i = 0; i < f16.size(); ++i) f16[i] = static_cast<uint8_t>(i);
    w.add_tensor("a.weight", GgmlType::F32, {8, 3}, f32);
    w.add_tensor("b.weight", GgmlType::Q8_0, {64}, q8);
    w.add_tensor("c.weight", GgmlType::F16, {2, 4, 2, 2}, f16);
    return w;
}

// Raw little-endian GGUF pieces, for files the writer would never produce.
struct Raw {
    std::vector<uint8_t> b;
    template <class T>
    Raw& put(T v) {
        const size_t at = b.size();
        b.resize(at + sizeof v);
        std::memcpy(b.data() + at, &v, sizeof v);
        return *this;
    }
    Raw& str(const std::string& s) {
        put<uint64_t>(s.size());
        const size_t at = b.size();
        b.resize(at + s.size());
        if (!s.empty()) std::memcpy(b.data() + at, s.data(), s.size());
        return *this;
    }
    Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
    }
    Raw& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
        str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
        for (auto d : ne) put<uint64_t>(d);
        return put<uint32_t>(type).put<uint64_t>(offset);
    }
    Raw& pad(size_t align = 32) {
        while (b.size() % align) b.push_back(0);
        return *this;
    }
    Raw& zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
};

// Parses the bytes and returns the FileError message, or "" when the file was accepted.
std::string reject_reason(const std::vector<uint8_t>& bytes) {
    try {
        GgufFile::parse("bad.gguf", bytes);
        return "";
    } catch (const FileError& e) {
        return e.what();
    }
}

void require_rejected(const std::vector<uint8_t>& bytes, const std::string& fragment) {
    std::string why = reject_reason(bytes);
    INFO("expected a rejection mentioning '" << fragment << "'");
    REQUIRE(!why.empty());
    CHECK(why.starts_with("bad.gguf: "));
    CHECK(why.find(fragment) != std::string::npos);
    CHECK(why.find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("writer output reads back with every value and tensor intact", "[gguf]") {
    GgufWriter w = sample_writer();
    std::vector<uint8_t> bytes = w.to_bytes();
    GgufFile f = GgufFile::parse("sample.gguf", bytes);
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 64);
    REQUIRE(f.metadata().size() == 21);
    CHECK(f.find("t.u8")->v == GgufValue::Storage(uint8_t(200)));
    CHECK(f.find("t.i8")->v == GgufValue::Storage(int8_t(-100)));
    CHECK(f.find("t.u16")->v == GgufValue::Storage(uint16_t(60000)));
    CHECK(f.find("t.i16")->v == GgufValue::Storage(int16_t(-30000)));
    CHECK(f.get_int("t.u32") == 4000000000ll);
    CHECK(f.get_int("t.i32") == -2000000000ll);
    CHECK(f.get_float("t.f32") == 3.25);
    CHECK(f.get_bool("t.bool") == true);
    CHECK(f.get_string("t.string") == std::string("héllo \0 world", 14));
    CHECK(f.find("t.u64")->v == GgufValue::Storage(uint64_t(18000000000000000000ull)));
    CHECK(f.get_int("t.i64") == -9000000000000000000ll);
    CHECK(f.get_float("t.f64") == -1.5e300);
    CHECK(f.get_string("t.empty_string") == "");
    const GgufArray* strings = f.get_array("t.strings", GgufType::STRING);
    REQUIRE(strings);
    REQUIRE(strings->size() == 4);
    CHECK(strings->string_at(3) == "▁the");
    CHECK(strings->at(1).as_string().empty());
    CHECK(f.get_array("t.empty", GgufType::U32)->empty());
    const GgufArray* nested = f.get_array("t.nested", GgufType::ARRAY);
    REQUIRE(nested);
    CHECK(nested->at(0).as_array().at(1).v == GgufValue::Storage(uint8_t(2)));
    CHECK(nested->at(1).as_array().empty());
    // Metadata in file order, equal to what was written.
    GgufWriter again;
    for (const auto& [k, v] : f.metadata()) again.set(k, v);
    // Typed lookups of the wrong type name the key.
    CHECK_THROWS_WITH(f.get_string("t.u8"), Catch::Contains("'t.u8'") && Catch::Contains("expected a string"));
    CHECK(!f.get_int("missing"));

    REQUIRE(f.tensors().size() == 3);
    const GgufTensorInfo* c = f.find_tensor("c.weight");
    REQUIRE(c);
    CHECK(c->ne == std::vector<int64_t>{2, 4, 2, 2});
    CHECK(c->type == GgmlType::F16);
    CHECK(c->n_bytes == 64);
    for (const auto& t : f.tensors()) {
        CHECK((f.data_offset() + t.offset) % 64 == 0);
        CHECK(reinterpret_cast<uintptr_t>(f.tensor_data(t)) % 64 == 0);
    }
    const GgufTensorInfo* b = f.find_tensor("b.weight");
    CHECK(f.tensor_data(*b)[0] == 1);
    CHECK(f.tensor_data(*b)[67] == static_cast<uint8_t>(67 * 13 + 1));
    // Re-writing what was read gives the same bytes.
    for (const auto& t : f.tensors())
        again.add_tensor_view(t.name, t.type, t.ne, {f.tensor_data(t), t.n_bytes});
    CHECK(again.to_bytes() == bytes);
}

TEST_CASE("writer writes a file that open() maps back", "[gguf]") {
    auto dir = test::temp_dir("gguf-write");
    std::string path = (dir / "x.gguf").string();
    sample_writer().write(path);
    GgufFile f = GgufFile::open(path);
    CHECK(f.tensors().size() == 3);
    CHECK(f.bytes().size() == std::filesystem::file_size(path));
    CHECK_THROWS_AS(GgufFile::open((dir / "missing.gguf").string()), FileError);
    CHECK_THROWS_WITH(GgufFile::open(dir.string()), Catch::Contains("not a regular file"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("every GGUF in the test data parses and re-writes to the same bytes", "[gguf]") {
    if (!test::require_testdata("vocab") || !test::require_testdata("models")) return;
    const std::filesystem::path root = test::testdata_dir();
    int n = 0;
    for (const char* sub : {"vocab", "models"}) {
        for (const auto& e : std::filesystem::directory_iterator(root / sub)) {
            if (e.path().extension() != ".gguf") continue;
            INFO(e.path());
            GgufFile f = GgufFile::open(e.path().string());
            CHECK(f.find("general.architecture"));
            CHECK(f.get_array("tokenizer.ggml.tokens", GgufType::STRING));
            GgufWriter w(f.version());
            for (const auto& [k, v] : f.metadata()) w.set(k, v);
            for (const auto& t : f.tensors()) w.add_tensor_view(t.name, t.type, t.ne, {f.tensor_data(t), t.n_bytes});
            std::vector<uint8_t> again = w.to_bytes();
            CHECK(std::equal(again.begin(), again.end(), f.bytes().begin(), f.bytes().end()));
            ++n;
        }
    }
    CHECK(n == 8);
}

TEST_CASE("every truncation of a valid file is rejected", "[gguf][malformed]") {
    std::vector<uint8_t> bytes = sample_writer().to_bytes();
    GgufFile f = GgufFile::parse("ok.gguf", bytes);
    size_t data_end = 0;
    for (const auto& t : f.tensors()) data_end = std::max<size_t>(data_end, f.data_offset() + t.offset + t.n_bytes);
    for (size_t len = 0; len < data_end; ++len) {
        std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
        INFO("truncated to " << len << " of " << bytes.size() << " bytes");
        CHECK(!reject_reason(cut).empty());
    }
    // Only the padding after the last tensor may go.
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(data_end));
    CHECK(reject_reason(cut).empty());
}

TEST_CASE("malformed headers, counts, lengths and types are rejected", "[gguf][malformed]") {
    auto kv_u32 = [](Raw& r, const std::string& k, uint32_t v) { r.str(k).put<uint32_t>(4).put<uint32_t>(v); };

    SECTION("magic and version") {
        require_rejected({}, "too short");
        require_rejected({'G', 'G'}, "too short");
        require_rejected(Raw().put<uint32_t>(0x46554746).put<uint32_t>(3).zeros(16).b, "bad magic");
        for (uint32_t v : {0u, 1u, 4u, 0xFFFFFFFFu})
            require_rejected(Raw().header(0, 0, v).b, fmt::format("unsupported GGUF version {}", v));
        require_rejected(Raw().put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint32_t>(0).b, "truncated");
    }
    SECTION("huge counts") {
        require_rejected(Raw().header(uint64_t(1) << 62, 0).b, "tensor count");
        require_rejected(Raw().header(0, ~uint64_t(0)).b, "metadata count");
        require_rejected(Raw().header(0, 1000).zeros(100).b, "metadata count");
    }
    SECTION("string and array lengths") {
        require_rejected(Raw().header(0, 1).put<uint64_t>(~uint64_t(0)).zeros(8).b, "metadata key 0");
        Raw r;
        r.header(0, 1).str("k").put<uint32_t>(8).put<uint64_t>(uint64_t(1) << 40);
        require_rejected(r.b, "key 'k': string");
        Raw a;
        a.header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(uint64_t(1) << 59);
        require_rejected(a.b, "array length");
        Raw a2;  // an array of u64 whose count fits the file only as bytes, not as u64s
        a2.header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(10).put<uint64_t>(100).zeros(100);
        require_rejected(a2.b, "array length");
        Raw deep;
        deep.header(0, 1).str("k").put<uint32_t>(9);
        for (int i = 0; i < 10; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
        deep.zeros(64);
        require_rejected(deep.b, "nested deeper");
        require_rejected(Raw().header(0, 1).str("").put<uint32_t>(4).put<uint32_t>(1).b, "empty");
    }
    SECTION("unknown value types and bad values") {
        require_rejected(Raw().header(0, 1).str("k").put<uint32_t>(13).put<uint32_t>(0).b, "unknown value type 13");
        require_rejected(Raw().header(0, 1).str("k").put<uint32_t>(0xFFFFFFFF).b, "unknown value type");
        require_rejected(Raw().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(77).put<uint64_t>(0).b,
                         "unknown array element type 77");
        require_rejected(Raw().header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2).b, "bool");
        Raw dup;
        dup.header(0, 2);
        kv_u32(dup, "k", 1);
        kv_u32(dup, "k", 2);
        require_rejected(dup.b, "duplicate metadata key 'k'");
        for (uint32_t align : {0u, 3u, 48u}) {
            Raw r;
            r.header(0, 1);
            kv_u32(r, "general.alignment", align);
            require_rejected(r.b, "general.alignment");
        }
        Raw fa;
        fa.header(0, 1).str("general.alignment").put<uint32_t>(6).put<float>(32.0f);
        require_rejected(fa.b, "general.alignment");
    }
    SECTION("tensor infos") {
        auto one = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                      size_t data) {
            Raw r;
            r.header(1, 0).tensor(name, std::move(ne), type, offset).pad().zeros(data);
            return r.b;
        };
        CHECK(reject_reason(one("t", {8, 2}, 0, 0, 64)).empty());  // the valid baseline
        require_rejected(one("t", {8, 2}, 0, 0, 63), "runs past the end");
        require_rejected(one("t", {8, 2}, 0, 32, 64), "runs past the end");
        require_rejected(one("t", {8, 2}, 0, ~uint64_t(0) - 31, 64), "runs past the end");
        require_rejected(one("t", {8, 2}, 0, 4, 64), "not aligned");
        require_rejected(one("t", {8, 2}, 4, 0, 64), "unknown tensor type 4");
        require_rejected(one("t", {8, 2}, 1000, 0, 64), "unknown tensor type 1000");
        require_rejected(one("t", {8, 0}, 0, 0, 64), "dimension 1 is 0");
        require_rejected(one("t", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0, 64), "overflows");
        require_rejected(one("t", {~uint64_t(0)}, 0, 0, 64), "dimension 0");
        require_rejected(one("t", {uint64_t(1) << 62}, 0, 0, 64), "byte size overflows");
        require_rejected(one("t", {33}, 8, 0, 64), "not a multiple of the q8_0 block size 32");
        require_rejected(one("", {8}, 0, 0, 64), "empty name");
        Raw r0;
        r0.header(1, 0).str("t").put<uint32_t>(0).put<uint32_t>(0).put<uint64_t>(0).pad().zeros(64);
        require_rejected(r0.b, "n_dims 0");
        Raw r5;
        r5.header(1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).pad().zeros(64);
        require_rejected(r5.b, "n_dims 5");
        Raw dup;
        dup.header(2, 0).tensor("t", {8}, 0, 0).tensor("t", {8}, 0, 32).pad().zeros(64);
        require_rejected(dup.b, "duplicate tensor name 't'");
        Raw overlap;
        overlap.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad().zeros(96);
        require_rejected(overlap.b, "overlap");
        Raw nodata;
        nodata.header(1, 0).tensor("t", {8}, 0, 0);
        require_rejected(nodata.b, "truncated");
    }
}

TEST_CASE("random byte flips of the header never crash the reader", "[gguf][malformed]") {
    std::vector<uint8_t> bytes = sample_writer().to_bytes();
    const size_t header_end = GgufFile::parse("ok.gguf", bytes).data_offset();
    std::mt19937 rng(1234);
    int rejected = 0, accepted = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        std::vector<uint8_t> b = bytes;
        int flips = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < flips; ++i) {
            size_t pos = rng() % header_end;
            b[pos] = (rng() % 2) ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(b[pos] ^ (1u << (rng() % 8)));
        }
        try {
            GgufFile f = GgufFile::parse("flipped.gguf", b);
            ++accepted;  // a flip inside a string or a value can leave a valid file; it must still be consistent
            for (const auto& t : f.tensors())
                CHECK(f.data_offset() + t.offset + t.n_bytes <= b.size());
        } catch (const FileError&) {
            ++rejected;
        }
    }
    CHECK(rejected > 1000);
    CHECK(rejected + accepted == 3000);
}

}  // namespace test_gguf
