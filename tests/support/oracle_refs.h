// Reading /work/oracle/dump_logits's outputs that tests commit under tests/data/: --top K logit files.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace quill::test {

// A `--logits FILE --top K` file: per prompt position, the K largest logits (id, value), largest first.
inline std::vector<std::vector<std::pair<int32_t, float>>> read_top_logits(const std::filesystem::path& path) {
    std::ifstream in(path);
    INFO(path.string());
    REQUIRE(in.good());
    std::vector<std::vector<std::pair<int32_t, float>>> top;
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#' || line.rfind("pos ", 0) == 0) continue;
        std::istringstream ss(line);
        auto& row = top.emplace_back();
        for (std::string item; ss >> item;) {
            const size_t eq = item.find('=');
            row.emplace_back(std::stoi(item.substr(0, eq)), std::stof(item.substr(eq + 1)));
        }
    }
    return top;
}

}  // namespace quill::test
