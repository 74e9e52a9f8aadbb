#include "cuda/profile.h"

#include "cuda/check.h"
#include "engine/error.h"
#include "engine/io/output.h"

#include <fmt/format.h>

namespace quill::cuda {

Profile::~Profile() {
    for (cudaEvent_t e : marks_) cudaEventDestroy(e);
}

void Profile::begin_call(int64_t n) {
    collect();
    mark_tokens_ = n;
}

void Profile::mark(const char* phase, cudaStream_t s) {
    if (!on_) return;
    if (n_marks_ == marks_.size()) {
        cudaEvent_t e = nullptr;
        check(cudaEventCreate(&e), "cudaEventCreate (profile)");
        marks_.push_back(e);
        mark_names_.emplace_back();
    }
    mark_names_[n_marks_] = phase;
    check(cudaEventRecord(marks_[n_marks_++], s), "cudaEventRecord (profile)");
}

void Profile::collect() {
    if (n_marks_ >= 2) {
        double total = 0.0;
        for (size_t i = 1; i < n_marks_; ++i) {
            float ms = 0.0f;
            check(cudaEventElapsedTime(&ms, marks_[i - 1], marks_[i]), "cudaEventElapsedTime (profile)");
            auto& [sum, times] = ms_[fmt::format("{:>6} tokens: {}", mark_tokens_, mark_names_[i])];
            sum += ms;
            ++times;
            total += ms;
        }
        calls_[mark_tokens_].first += total;
        ++calls_[mark_tokens_].second;
    }
    n_marks_ = 0;
}

void Profile::print(cudaStream_t s) {
    if (!on_) return;
    cudaStreamSynchronize(s);
    try {
        collect();
    } catch (const Error&) {
    }
    print_stderr("quill: CUDA profile (QUILL_CUDA_PROFILE): device ms per forward call, by phase\n");
    for (const auto& [key, v] : ms_) {
        const int64_t tokens = std::stoll(key);
        const auto& [call_ms, calls] = calls_[tokens];
        print_stderr("  {:<40} {:9.3f} ms {:5.1f}%  ({} calls)\n", key, v.first / static_cast<double>(calls),
                     100.0 * v.first / call_ms, calls);
    }
    for (const auto& [tokens, v] : calls_)
        print_stderr("  {:>6} tokens: total {:9.3f} ms a call ({} calls)\n", tokens,
                     v.first / static_cast<double>(v.second), v.second);
}

}  // namespace quill::cuda
