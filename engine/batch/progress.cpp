#include "engine/batch/progress.h"

#include "engine/io/output.h"

#include <fmt/format.h>

#include <cmath>

namespace quill::batch {

namespace {

double rate(int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; }

std::string duration(double s) {
    const auto t = static_cast<int64_t>(std::llround(std::max(0.0, s)));
    if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
    if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
    return fmt::format("{}s", t);
}

std::string plural(size_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

}  // namespace

std::string progress_line(const BatchProgress& p) {
    std::string eta = "--";
    if (p.done > 0 && p.done < p.total) {
        eta = duration(p.elapsed_s / static_cast<double>(p.done) * static_cast<double>(p.total - p.done));
    } else if (p.done >= p.total) {
        eta = "0s";
    }
    return fmt::format("{}/{} done, {} | prompt {:.0f} tok/s | generated {:.1f} tok/s | ETA {}", p.done, p.total,
                       plural(p.errors, "error"), rate(p.prompt_tokens, p.elapsed_s),
                       rate(p.generated_tokens, p.elapsed_s), eta);
}

std::string summary_line(const BatchProgress& p) {
    std::string extra;
    if (p.abandoned) extra += fmt::format(", {} abandoned (not written; --resume runs them)", p.abandoned);
    if (p.done + p.abandoned < p.total)
        extra += fmt::format(", {} not started (--resume runs them)", p.total - p.done - p.abandoned);
    if (p.skipped) extra += fmt::format(", {} already in the output", p.skipped);
    const std::string reused = p.reused_tokens ? fmt::format(" ({} more reused from the cache)", p.reused_tokens) : "";
    return fmt::format("quill: batch: {} written ({}){} | {} prompt tokens{}, {} generated | {:.1f} s | {:.1f} "
                       "generated tok/s, {:.0f} prompt tok/s\n",
                       plural(p.done, "record"), plural(p.errors, "error"), extra, p.prompt_tokens, reused,
                       p.generated_tokens, p.elapsed_s, rate(p.generated_tokens, p.elapsed_s),
                       rate(p.prompt_tokens, p.elapsed_s));
}

void ProgressReporter::update(const BatchProgress& p) {
    if (!live_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    drawn_ = true;
    print_stderr_noexcept("\r\033[K" + progress_line(p));
}

void ProgressReporter::finish(const BatchProgress& p) {
    if (drawn_) print_stderr_noexcept("\r\033[K");
    if (!quiet_) print_stderr_noexcept(summary_line(p));
}

}  // namespace quill::batch
