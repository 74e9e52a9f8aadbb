#include "engine/format/gguf_split.h"

#include "engine/error.h"

#include <cstdint>
#include <filesystem>
#include <regex>
#include <vector>

namespace quill {

namespace {

constexpr int kMaxParts = 99999;  // the name has five digits for the part and the count

// A split key as an integer; FileError naming the file when it is not an integer in [lo, hi].
std::optional<int64_t> split_key(const GgufFile& f, const char* key, int64_t lo, int64_t hi) {
    const std::optional<int64_t> v = f.get_int(key);
    if (v && (*v < lo || *v > hi))
        throw FileError(fmt::format("{}: {} is {}, expected {} to {}", f.path(), key, *v, lo, hi));
    return v;
}

// Checks that `part` is part `no` (from 0) of a split into `count` files; FileError naming it otherwise.
void check_part(const GgufFile& part, int64_t no, int64_t count, const std::string& first) {
    const std::optional<int64_t> c = split_key(part, "split.count", 0, kMaxParts);
    const std::optional<int64_t> n = split_key(part, "split.no", 0, kMaxParts);
    if (!c || !n)
        throw FileError(fmt::format("{}: no split.count or split.no: it is not a part of the split model {}",
                                    part.path(), first));
    if (*c != count)
        throw FileError(fmt::format("{}: split.count is {}, but {} is part of a split into {} files: the parts come "
                                    "from different splits",
                                    part.path(), *c, first, count));
    if (*n != no)
        throw FileError(fmt::format("{}: split.no is {}, expected {} for this part of {}", part.path(), *n, no,
                                    first));
}

}  // namespace

std::optional<SplitName> parse_split_name(const std::string& path) {
    static const std::regex form(R"((.+)-(\d{5})-of-(\d{5})\.gguf)");
    std::smatch m;
    if (!std::regex_match(path, m, form)) return std::nullopt;
    return SplitName{m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str())};
}

std::string split_part_path(const std::string& prefix, int no, int count) {
    return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, no, count);
}

GgufFile open_model_file(const std::string& path) {
    GgufFile given = GgufFile::open(path);
    const std::optional<int64_t> count = split_key(given, "split.count", 0, kMaxParts);
    if (!count || *count <= 1) return given;
    const std::optional<int64_t> no = split_key(given, "split.no", 0, *count - 1);
    if (!no) throw FileError(fmt::format("{}: split.count is {} but split.no is missing", path, *count));
    const std::optional<SplitName> name = parse_split_name(path);
    if (!name || name->no != *no + 1 || name->count != *count)
        throw FileError(fmt::format("{}: part {} of a split into {} files, but its name does not end in {}, so the "
                                    "other parts cannot be found",
                                    path, *no + 1, *count, split_part_path("", static_cast<int>(*no) + 1,
                                                                           static_cast<int>(*count))));
    const auto n_parts = static_cast<int>(*count);
    const std::string first_path = split_part_path(name->prefix, 1, n_parts);
    std::vector<GgufFile> parts;
    for (int i = 0; i < n_parts; ++i) {
        if (i == *no) {
            parts.push_back(std::move(given));
            continue;
        }
        const std::string p = split_part_path(name->prefix, i + 1, n_parts);
        std::error_code ec;
        if (!std::filesystem::exists(p, ec))
            throw FileError(fmt::format("{}: missing part {} of {} of the split model {}", p, i + 1, n_parts,
                                        first_path));
        parts.push_back(GgufFile::open(p));
        check_part(parts.back(), i, n_parts, first_path);
    }
    GgufFile model = std::move(parts.front());
    const std::optional<int64_t> expected = split_key(model, "split.tensors.count", 0, INT32_MAX);
    if (!expected)
        throw FileError(fmt::format("{}: the first part of a split model has no split.tensors.count", first_path));
    for (size_t i = 1; i < parts.size(); ++i) {
        if (split_key(parts[i], "split.tensors.count", 0, INT32_MAX) != expected)
            throw FileError(fmt::format("{}: split.tensors.count differs from {}'s: the parts come from different "
                                        "splits",
                                        parts[i].path(), first_path));
        model.append_part(std::move(parts[i]));
    }
    if (static_cast<size_t>(*expected) != model.tensors().size())
        throw FileError(fmt::format("{}: split.tensors.count is {}, but its {} parts hold {} tensors", first_path,
                                    *expected, n_parts, model.tensors().size()));
    return model;
}

}  // namespace quill
