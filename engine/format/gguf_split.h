// Split GGUFs, as llama.cpp's gguf-split writes them: one model in files PREFIX-00001-of-0000N.gguf up to
// PREFIX-0000N-of-0000N.gguf, each a whole GGUF (its own header, tensor infos and aligned tensor data). The first
// part holds the model's metadata; every part has split.no (u16: its index, from 0), split.count (u16: N) and
// split.tensors.count (i32: the tensors of all parts together). A part may hold no tensors.
#pragma once

#include "engine/format/gguf.h"

#include <optional>
#include <string>

namespace quill {

// The parts of a split file's name: "dir/m-00002-of-00003.gguf" is {"dir/m", 2, 3}; nullopt for another name.
struct SplitName {
    std::string prefix;
    int no = 0;     // from 1, as in the name
    int count = 0;
};
std::optional<SplitName> parse_split_name(const std::string& path);
// The path of part `no` (from 1) of `count`: PREFIX-0000no-of-0000count.gguf.
std::string split_part_path(const std::string& prefix, int no, int count);

// A model's GGUF: the file at `path` as GgufFile::open reads it, or, when it is any part of a split model, the first
// part with the tensors of every part appended (each part mapped, each tensor's data in its own part). FileError
// naming the file for a missing part, a part of another split (its split.count or split.no not the expected one),
// tensors that do not add up to split.tensors.count, or a tensor in two parts.
GgufFile open_model_file(const std::string& path);

}  // namespace quill
