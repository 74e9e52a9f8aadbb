#include "engine/hub/download.h"

#include "engine/hub/quant_choice.h"
#include "engine/hub/sha256.h"
#include "engine/io/output.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

namespace quill::hub {

namespace fs = std::filesystem;

namespace {

// A file descriptor closed when it goes out of scope.
class Fd {
public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }

private:
    int fd_;
};

[[noreturn]] void fail_io(const fs::path& path, const char* what) {
    throw FileError(fmt::format("{}: cannot {}: {}", path.string(), what, std::strerror(errno)));
}

// Holds an exclusive flock on the lock file (the lock huggingface_hub's filelock takes on the same path).
Fd lock_exclusively(const fs::path& path, const std::string& label, bool quiet) {
    fs::create_directories(path.parent_path());
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail_io(path, "open the lock");
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK) fail_io(path, "lock");
    if (!quiet) print_stderr_noexcept(fmt::format("quill: waiting for another download of {}\n", label));
    while (::flock(fd.get(), LOCK_EX) != 0)
        if (errno != EINTR) fail_io(path, "lock");
    return fd;
}

// The progress of one download on stderr: a bar redrawn at most ten times a second on a terminal.
class Progress {
public:
    Progress(std::string label, uint64_t total, uint64_t start, bool bar, bool quiet)
        : label_(std::move(label)), total_(total), start_bytes_(start), bar_(bar), quiet_(quiet),
          t0_(std::chrono::steady_clock::now()) {
        if (!bar_ && !quiet_)
            print_stderr_noexcept(fmt::format("quill: downloading {} ({}{})\n", label_, human_size(total_),
                                              start ? fmt::format(", resuming at {}", human_size(start)) : ""));
    }
    void update(uint64_t done, bool force = false) {
        if (!bar_) return;
        const auto now = std::chrono::steady_clock::now();
        if (!force && now - last_ < std::chrono::milliseconds(100)) return;
        last_ = now;
        const double s = std::chrono::duration<double>(now - t0_).count();
        const double rate = s > 0 ? static_cast<double>(done - start_bytes_) / s : 0;
        const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
        const int width = 24, filled = static_cast<int>(frac * width);
        std::string eta = "--:--";
        if (rate > 0 && done < total_) {
            const auto left = static_cast<int64_t>(static_cast<double>(total_ - done) / rate);
            eta = fmt::format("{}:{:02}", left / 60, left % 60);
        }
        print_stderr_noexcept(fmt::format("\r\033[K{} [{}{}] {:3.0f}% {}/{} {}/s ETA {}", label_,
                                          std::string(filled, '#'), std::string(width - filled, '.'), frac * 100,
                                          human_size(done), human_size(total_),
                                          human_size(static_cast<uint64_t>(rate)), eta));
    }
    void finish(uint64_t done) {
        update(done, true);
        if (bar_) print_stderr_noexcept("\n");
    }

private:
    std::string label_;
    uint64_t total_, start_bytes_;
    bool bar_, quiet_;
    std::chrono::steady_clock::time_point t0_, last_{};
};

// Hashes the bytes already in the partial file (a resumed download is checked whole).
void hash_existing(int fd, uint64_t n, Sha256& hash, const fs::path& path) {
    std::vector<uint8_t> buf(size_t{1} << 20);
    for (uint64_t at = 0; at < n;) {
        const ssize_t got = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), n - at), static_cast<off_t>(at));
        if (got <= 0) fail_io(path, "read the partial download");
        hash.update({buf.data(), static_cast<size_t>(got)});
        at += static_cast<uint64_t>(got);
    }
}

}  // namespace

void download_blob(const Http& http, const BlobRequest& r, bool progress_bar, bool quiet) {
    std::error_code ec;
    if (fs::exists(r.blob, ec) && fs::file_size(r.blob, ec) == r.size) return;
    const Fd lock = lock_exclusively(r.lock, r.label, quiet);
    if (fs::exists(r.blob, ec) && fs::file_size(r.blob, ec) == r.size) return;  // another process fetched it

    const fs::path partial = r.blob.string() + ".incomplete";
    fs::create_directories(r.blob.parent_path());
    Fd fd(::open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail_io(partial, "open");
    uint64_t have = fs::file_size(partial);
    if (have > r.size) {
        if (::ftruncate(fd.get(), 0) != 0) fail_io(partial, "truncate");
        have = 0;
    }
    Sha256 hash;
    hash_existing(fd.get(), have, hash, partial);
    Progress progress(r.label, r.size, have, progress_bar, quiet);

    http.with_retries([&] {
        if (have == r.size) return;
        const HttpResponse resp = http.stream(r.url, have, 0, [&](std::span<const uint8_t> bytes) {
            if (have + bytes.size() > r.size) bytes = bytes.first(r.size - have);  // a server sending too much
            for (size_t off = 0; off < bytes.size();) {
                const ssize_t n = ::pwrite(fd.get(), bytes.data() + off, bytes.size() - off,
                                           static_cast<off_t>(have + off));
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) fail_io(partial, "write");
                off += static_cast<size_t>(n);
            }
            hash.update(bytes);
            have += bytes.size();
            progress.update(have);
        });
        if (resp.status >= 400) throw_status(resp, r.url);
        if (have < r.size)
            throw NetworkError(fmt::format("{}: the transfer ended at byte {} of {}", r.url, have, r.size), false);
    });
    progress.finish(have);

    if (!r.sha256.empty()) {
        const std::string got = hash.hex();
        if (got != r.sha256) {
            fs::remove(partial, ec);
            throw FileError(fmt::format("{}: SHA-256 mismatch (expected {}, got {}): the download was corrupted and "
                                        "was removed; nothing was added to the cache",
                                        r.label, r.sha256, got));
        }
    }
    if (::fsync(fd.get()) != 0) fail_io(partial, "fsync");
    fs::rename(partial, r.blob);
    const Fd dir(::open(r.blob.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.get() >= 0) ::fsync(dir.get());  // the rename itself survives a crash
}

}  // namespace quill::hub
