// The records `quill batch` wrote (JSONL, one record a line), and the text of each by its id ("error" for an error
// record).
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace quill::test {

// The records of an output, in order; every line must be whole.
inline std::vector<nlohmann::json> record_lines(const std::string& out) {
    std::vector<nlohmann::json> records;
    for (size_t start = 0; start < out.size();) {
        const size_t nl = out.find('\n', start);
        REQUIRE(nl != std::string::npos);
        records.push_back(nlohmann::json::parse(out.substr(start, nl - start)));
        start = nl + 1;
    }
    return records;
}

inline std::map<std::string, std::string> texts_by_id(const std::string& out) {
    std::map<std::string, std::string> m;
    for (const nlohmann::json& r : record_lines(out)) m[r["id"]] = r.value("text", "error");
    return m;
}

}  // namespace quill::test
