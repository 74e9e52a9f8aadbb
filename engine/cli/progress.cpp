#include "engine/cli/progress.h"

#include "engine/io/output.h"

#include <fmt/format.h>

#include <cmath>
#include <sys/stat.h>
#include <unistd.h>

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
    const std::string guesses =
        p.guessed_tokens ? fmt::format(" | {} of {} guesses accepted ({:.0f}%)", p.accepted_tokens, p.guessed_tokens,
                                       100.0 * static_cast<double>(p.accepted_tokens) / p.guessed_tokens)
                         : "";
    return fmt::format("quill: batch: {} written ({}){} | {} prompt tokens{}, {} generated | {:.1f} s | {:.1f} "
                       "generated tok/s, {:.0f} prompt tok/s{}\n",
                       plural(p.done, "record"), plural(p.errors, "error"), extra, p.prompt_tokens, reused,
                       p.generated_tokens, p.elapsed_s, rate(p.generated_tokens, p.elapsed_s),
                       rate(p.prompt_tokens, p.elapsed_s), guesses);
}

std::string shard_line(const BatchInput& input, const Shard& shard) {
    std::vector<size_t> taken;  // 0-based entry indices
    for (size_t i = 0; i < input.entries.size(); ++i)
        if (shard.contains(i)) taken.push_back(i);
    std::string head = fmt::format("quill: shard {}/{} takes {} of {}", shard.k, shard.n,
                                   taken.empty() ? std::string("none") : std::to_string(taken.size()),
                                   plural(input.entries.size(), "request"));
    if (taken.empty()) return head + "\n";
    std::string numbers;  // the first three and the last when there are more than six
    const size_t shown = taken.size() > 6 ? 3 : taken.size();
    for (size_t j = 0; j < shown; ++j) numbers += fmt::format("{}{}", j == 0 ? "" : ", ", taken[j] + 1);
    if (shown < taken.size()) numbers += fmt::format(", ..., {}", taken.back() + 1);
    const std::string& first = input.entries[taken.front()].request.id;
    const std::string& last = input.entries[taken.back()].request.id;
    const std::string ids = taken.size() == 1 ? fmt::format("id {}", first) : fmt::format("ids {} to {}", first, last);
    return fmt::format("{}: {} ({})\n", head, numbers, ids);
}

std::string failures_line(size_t failed, size_t total, const std::string& output_name) {
    return fmt::format("quill: {} of {} failed (error records in {})\n", failed, plural(total, "request"),
                       output_name);
}

bool same_terminal(int fd_a, int fd_b) {
    struct stat a {}, b {};
    return isatty(fd_a) && isatty(fd_b) && fstat(fd_a, &a) == 0 && fstat(fd_b, &b) == 0 && a.st_rdev == b.st_rdev;
}

void ProgressReporter::clear() {
    if (!drawn_) return;
    print_stderr_noexcept("\r\033[K");
    drawn_ = false;
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
    clear();
    if (!quiet_) print_stderr_noexcept(summary_line(p));
}

}  // namespace quill::batch
