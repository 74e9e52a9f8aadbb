// The command line against hostile files and careless use: text from a model file on stderr (escape sequences,
// megabyte strings), a GGUF of millions of strings, failed writes of --help, exit statuses, thread counts far above
// the CPUs, bytes a BPE vocabulary drops, `-f -`, `quill run` at a terminal, prompts' final newlines, --version,
// -q, -v and -c above the trained context.
#include "tests/fault_util.h"
#include "tests/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace quill;
using test::run_quill;

namespace {

// Peak resident memory of one run of quill (KiB), from wait4 of that child alone; output discarded.
long peak_rss_kib(const std::vector<std::string>& args) {
    const int null = open("/dev/null", O_RDWR);
    REQUIRE(null >= 0);
    const pid_t pid = test::spawn_quill(args, {null, null, null});
    close(null);
    int status = 0;
    rusage usage{};
    REQUIRE(wait4(pid, &status, 0, &usage) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    return usage.ru_maxrss;
}

// A GGUF holding one array of n empty strings (8 bytes each in the file: their lengths).
void write_empty_strings_gguf(const std::filesystem::path& path, uint64_t n) {
    std::ofstream f(path, std::ios::binary);
    auto put = [&](auto v) { f.write(reinterpret_cast<const char*>(&v), sizeof v); };
    f.write("GGUF", 4);
    put(uint32_t{3});
    put(uint64_t{0});  // tensors
    put(uint64_t{1});  // metadata
    const std::string key = "tokenizer.ggml.tokens";
    put(uint64_t{key.size()});
    f.write(key.data(), static_cast<std::streamsize>(key.size()));
    put(uint32_t{9});  // array
    put(uint32_t{8});  // of strings
    put(n);
    const std::vector<char> zeros(size_t{1} << 20, 0);
    for (uint64_t left = 8 * n; left > 0;) {
        const auto k = static_cast<std::streamsize>(std::min<uint64_t>(left, zeros.size()));
        f.write(zeros.data(), k);
        left -= static_cast<uint64_t>(k);
    }
}

}  // namespace

TEST_CASE("quill info holds a GGUF's array of millions of strings in about the file's size", "[cli]") {
    const auto dir = test::temp_dir("hostile-strings");
    const auto big = dir / "strings.gguf", small = dir / "small.gguf";
    write_empty_strings_gguf(big, 5'000'000);  // 40 MB
    write_empty_strings_gguf(small, 1);
    const double file_kib = static_cast<double>(std::filesystem::file_size(big)) / 1024;
    const long base = peak_rss_kib({"info", small.string()});
    const long peak = peak_rss_kib({"info", big.string()});
    INFO("peak " << peak << " KiB, base " << base << " KiB, file " << file_kib << " KiB");
    // The file's pages (mapped and read once) and an index of every 16th string: a std::string-sized value per
    // element made it 6x the file.
    CHECK(static_cast<double>(peak - base) < 1.5 * file_kib);
    auto j = nlohmann::json::parse(run_quill({"info", "--json", big.string()}).out);
    CHECK(j["tokenizer"]["vocab_size"] == 5'000'000);
    std::filesystem::remove_all(dir);
}
