// Writes a GGUF as a split model the way llama.cpp's gguf-split does (engine/format/gguf_split.h has the format),
// with quill's GGUF writer, for the tests of loading split models.
#pragma once

#include "engine/format/gguf.h"
#include "engine/format/gguf_split.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace quill::test {

// Writes `file` as dir/PREFIX-0000k-of-0000n.gguf, part k+1 holding tensors [starts[k], starts[k+1]) in file order
// (starts ascending from 0; equal neighbours make a part without tensors); the first part has the file's metadata,
// every part split.no, split.count and split.tensors.count. `edit` may change each part's writer (by index from 0)
// before it is written. Returns the parts' paths in order.
inline std::vector<std::filesystem::path> write_split_gguf(
    const GgufFile& file, const std::vector<size_t>& starts, const std::filesystem::path& dir,
    const std::string& prefix, const std::function<void(size_t, GgufWriter&)>& edit = {}) {
    const auto& tensors = file.tensors();
    const auto n_parts = static_cast<int>(starts.size());
    std::vector<std::filesystem::path> paths;
    for (int k = 0; k < n_parts; ++k) {
        GgufWriter w;
        if (k == 0)
            for (const auto& [key, value] : file.metadata()) w.set(key, value);
        w.set("split.no", static_cast<uint16_t>(k));
        w.set("split.count", static_cast<uint16_t>(n_parts));
        w.set("split.tensors.count", static_cast<int32_t>(tensors.size()));
        const size_t end = k + 1 < n_parts ? starts[k + 1] : tensors.size();
        for (size_t i = starts[k]; i < end; ++i)
            w.add_tensor_view(tensors[i].name, tensors[i].type, tensors[i].ne,
                              std::span<const uint8_t>(file.tensor_data(tensors[i]), tensors[i].n_bytes));
        if (edit) edit(static_cast<size_t>(k), w);
        paths.push_back(split_part_path((dir / prefix).string(), k + 1, n_parts));
        w.write(paths.back().string());
    }
    return paths;
}

}  // namespace quill::test
