// Prompt lookup: guesses of the next tokens of a sequence, copied from what followed an earlier occurrence of its
// last few tokens in its own prompt or output. Text that quotes or edits its prompt (extraction, code edits,
// summaries with quotes) repeats long runs of it; the scheduler checks the guesses in the same forward pass as the
// sequence's next token and keeps those the model itself would have picked (engine/runtime/scheduler.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace quill {

// Up to max_guesses tokens that followed the most recent earlier occurrence of the longest suffix of `history` of
// max_ngram down to min_ngram tokens, ending with the first of them that is in `eog` (sorted end-of-generation ids:
// the sequence ends there if the model takes it); empty when no such suffix occurs earlier.
std::vector<int32_t> lookup_guesses(std::span<const int32_t> history, int max_guesses, int max_ngram = 4,
                                    int min_ngram = 1, std::span<const int32_t> eog = {});

}  // namespace quill
