#include "engine/runtime/lookup.h"

#include <algorithm>

namespace quill {

std::vector<int32_t> lookup_guesses(std::span<const int32_t> history, int max_guesses, int max_ngram, int min_ngram,
                                    std::span<const int32_t> eog) {
    const auto n_hist = static_cast<int64_t>(history.size());
    if (max_guesses <= 0) return {};
    for (int64_t n = std::min<int64_t>(max_ngram, n_hist - 1); n >= std::max(1, min_ngram); --n) {
        const std::span<const int32_t> suffix = history.subspan(static_cast<size_t>(n_hist - n));
        // Earlier occurrences end before the suffix's last token, the most recent first: it continues the text the
        // sequence is in now.
        for (int64_t start = n_hist - n - 1; start >= 0; --start) {
            if (!std::equal(suffix.begin(), suffix.end(), history.begin() + start)) continue;
            const auto from = history.begin() + start + n;
            auto end = from + std::min<int64_t>(max_guesses, n_hist - start - n);
            const auto is_eog = [&](int32_t t) { return std::binary_search(eog.begin(), eog.end(), t); };
            if (const auto first_eog = std::find_if(from, end, is_eog); first_eog != end) end = first_eog + 1;
            return {from, end};
        }
    }
    return {};
}

}  // namespace quill
