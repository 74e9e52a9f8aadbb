// Per-call memo of word -> token ids: text repeats words, and each distinct word is tokenized once.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace quill {

class WordCache {
public:
    // Appends the ids cached for `word` to `out`; false when the word is not cached.
    bool append_to(std::string_view word, std::vector<int32_t>& out) const {
        auto it = index_.find(word);
        if (it == index_.end()) return false;
        const auto [offset, count] = it->second;
        const auto first = ids_.begin() + static_cast<std::ptrdiff_t>(offset);
        out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(count));
        return true;
    }

    // Caches out[from..] as the ids of `word`, which must outlive the cache.
    void insert(std::string_view word, const std::vector<int32_t>& out, size_t from) {
        index_.emplace(word, std::pair{ids_.size(), out.size() - from});
        ids_.insert(ids_.end(), out.begin() + static_cast<std::ptrdiff_t>(from), out.end());
    }

private:
    std::unordered_map<std::string_view, std::pair<size_t, size_t>> index_;  // word -> (offset, count) in ids_
    std::vector<int32_t> ids_;
};

}  // namespace quill
