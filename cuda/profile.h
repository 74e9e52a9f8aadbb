// The device time of each phase of the forward pass (Tuning::profile, QUILL_CUDA_PROFILE=1): events recorded on the
// backend's stream between the phases, summed by the call's token count and phase, printed to stderr when the
// backend goes. The backend runs without graphs then, so that every kernel is launched and timed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace quill::cuda {

class Profile {
public:
    explicit Profile(bool on) : on_(on) {}
    ~Profile();
    Profile(const Profile&) = delete;
    Profile& operator=(const Profile&) = delete;

    bool on() const { return on_; }
    // The start of a forward call of n tokens: the previous call's marks are collected first (it synchronized
    // before returning).
    void begin_call(int64_t n);
    // The work enqueued on s since the previous mark is `phase` (nothing when off).
    void mark(const char* phase, cudaStream_t s);
    // The table, to stderr, once s has passed every mark (nothing when off; never throws).
    void print(cudaStream_t s);

private:
    void collect();  // after the stream has passed every mark

    bool on_ = false;
    std::vector<cudaEvent_t> marks_;
    std::vector<std::string> mark_names_;
    size_t n_marks_ = 0;
    int64_t mark_tokens_ = 0;
    std::map<std::string, std::pair<double, int64_t>> ms_;   // by "<tokens> tokens: <phase>": ms, times
    std::map<int64_t, std::pair<double, int64_t>> calls_;    // by token count: ms, calls
};

}  // namespace quill::cuda
