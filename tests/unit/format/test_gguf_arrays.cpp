// GGUF arrays kept in the file's encoding (GgufArray): every element reads back, across the every-16th-element
// index of strings and nested arrays, from a written and re-read file as from one built in memory.
#include "engine/error.h"
#include "engine/format/gguf.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace test_gguf_arrays {

using namespace quill;

TEST_CASE("GGUF arrays of strings and arrays read back every element across the offset index", "[gguf]") {
    std::vector<std::string> strings;
    for (int i = 0; i < 70; ++i)
        strings.push_back(std::string(static_cast<size_t>(i % 7), static_cast<char>('a' + i % 26)));
    std::vector<GgufValue> nested;
    for (int i = 0; i < 35; ++i) {
        std::vector<GgufValue> inner;
        for (int k = 0; k < i % 5; ++k) inner.emplace_back(std::string(static_cast<size_t>(k), 'x'));
        nested.push_back(GgufValue::array(GgufType::STRING, inner));
    }
    std::vector<GgufValue> floats;
    for (int i = 0; i < 33; ++i) floats.emplace_back(static_cast<float>(i) * 0.5f);
    GgufWriter w;
    w.set("s", GgufValue::strings(strings));
    w.set("n", GgufValue::array(GgufType::ARRAY, nested));
    w.set("f", GgufValue::array(GgufType::F32, floats));
    const GgufFile file = GgufFile::parse("arrays.gguf", w.to_bytes());
    const GgufArray& s = *file.get_array("s", GgufType::STRING);
    REQUIRE(s.size() == strings.size());
    for (size_t i = 0; i < strings.size(); ++i) {
        INFO(i);
        CHECK(s.string_at(i) == strings[i]);
        CHECK(s.at(i).as_string() == strings[i]);
    }
    const GgufArray& n = *file.get_array("n", GgufType::ARRAY);
    REQUIRE(n.size() == nested.size());
    for (size_t i = 0; i < nested.size(); ++i) {
        const GgufArray inner = n.at(i).as_array();
        CHECK(inner == nested[i].as_array());
        REQUIRE(inner.size() == i % 5);
        for (size_t k = 0; k < inner.size(); ++k) CHECK(inner.string_at(k) == std::string(k, 'x'));
    }
    const GgufArray& f = *file.get_array("f", GgufType::F32);
    for (size_t i = 0; i < floats.size(); ++i) CHECK(f.at(i).as_float() == static_cast<double>(i) * 0.5);
    // An element past the end, or a string read from an array of floats, is a broken invariant, not a crash.
    CHECK_THROWS_AS(s.at(strings.size()), Error);
    CHECK_THROWS_AS(f.string_at(0), Error);
    // Encoded bytes that run short are refused the same way.
    const std::vector<uint8_t> short_bytes{5, 0, 0, 0, 0, 0, 0, 0, 'a'};
    CHECK_THROWS_AS(GgufArray::from_encoded(GgufType::STRING, 1, short_bytes, nullptr), Error);
}

}  // namespace test_gguf_arrays
