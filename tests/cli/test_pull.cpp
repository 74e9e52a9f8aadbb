// quill pull, -m hf:, quill list and quill rm against a local Hugging Face hub (tests/support/hub_server.py on 127.0.0.1,
// started and stopped by each test): the choice of quantization, the cache layout, resumed and verified downloads,
// concurrent pulls, split models, offline use, gated repositories, refusing an unsupported model before its
// download, and a cache shared with the huggingface_hub Python package.
#include "engine/format/gguf.h"
#include "tests/support/pty_process.h"
#include "tests/support/random_model.h"
#include "tests/support/split_gguf.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

extern char** environ;

namespace test_pull {

using namespace quill;
using test::run_quill;
namespace fs = std::filesystem;

namespace {

// True when python3 runs; else skips (a failure under CI, where python3 must be there).
bool require_python3() {
    if (std::system("python3 -c 'import http.server' >/dev/null 2>&1") == 0) return true;
    test::skip("python3 is absent: the pull tests serve a local hub with it");
    return false;
}

// tests/support/hub_server.py serving the repositories under root (root/owner/repo/files), with its extra flags.
class HubServer {
public:
    explicit HubServer(const fs::path& root, const std::vector<std::string>& flags = {}) {
        const fs::path port_file = root.parent_path() / "hub.port";
        log_ = root.parent_path() / "hub.log";
        fs::remove(port_file);
        std::ofstream(log_, std::ios::trunc).close();
        std::vector<std::string> args{"python3", std::string(QUILL_SOURCE_DIR) + "/tests/support/hub_server.py", "--root",
                                      root.string(), "--port-file", port_file.string(), "--log", log_.string()};
        args.insert(args.end(), flags.begin(), flags.end());
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        REQUIRE(posix_spawnp(&pid_, "python3", nullptr, nullptr, argv.data(), environ) == 0);
        for (int i = 0; i < 200 && port_ == 0; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            std::ifstream(port_file) >> port_;
        }
        if (port_ == 0) stop();
        REQUIRE(port_ != 0);
    }
    ~HubServer() { stop(); }
    HubServer(const HubServer&) = delete;
    HubServer& operator=(const HubServer&) = delete;

    std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
    }
    // Every request served so far (method, path, range, status, bytes, auth), in order.
    std::vector<nlohmann::json> requests() const {
        std::vector<nlohmann::json> out;
        std::ifstream in(log_);
        for (std::string line; std::getline(in, line);)
            if (!line.empty()) out.push_back(nlohmann::json::parse(line));
        return out;
    }
    // The GETs of blobs (/cas/SHA256): all, or those that were not header probes (a Range bytes=0-N).
    std::vector<nlohmann::json> blob_gets(bool probes_too = false) const {
        std::vector<nlohmann::json> out;
        for (const auto& r : requests()) {
            if (r["method"] != "GET" || !r["path"].get<std::string>().starts_with("/cas/")) continue;
            const std::string range = r["range"];
            if (!probes_too && range.starts_with("bytes=0-") && range.size() > 8) continue;
            out.push_back(r);
        }
        return out;
    }
    uint64_t blob_bytes(bool probes_too = false) const {
        uint64_t total = 0;
        for (const auto& r : blob_gets(probes_too)) total += r["bytes"].get<uint64_t>();
        return total;
    }

private:
    fs::path log_;
    pid_t pid_ = -1;
    int port_ = 0;
};

// Sets environment variables for the scope of a test and puts the old values back after.
class ScopedEnv {
public:
    ScopedEnv() = default;
    ~ScopedEnv() {
        for (const auto& [name, value] : saved_) put(name, value);
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
    void set(const std::string& name, const std::optional<std::string>& value) {  // nullopt unsets
        if (!saved_.count(name)) {
            const char* old = std::getenv(name.c_str());
            saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
        }
        put(name, value);
    }

private:
    static void put(const std::string& name, const std::optional<std::string>& value) {
        if (value) {
            ::setenv(name.c_str(), value->c_str(), 1);
        } else {
            ::unsetenv(name.c_str());
        }
    }
    std::map<std::string, std::optional<std::string>> saved_;
};

// One test's world: repositories to serve under dir/repos, the cache in dir/hf, the environment pointing at both.
struct Hub {
    fs::path dir = test::temp_dir("pull");
    fs::path repos = dir / "repos";
    fs::path hf_home = dir / "hf";
    ScopedEnv env;
    std::optional<HubServer> server;

    Hub() {
        env.set("HF_HOME", hf_home.string());
        for (const char* name : {"HF_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "XDG_CACHE_HOME"})
            env.set(name, std::nullopt);
        env.set("NO_PROXY", "127.0.0.1,localhost");
        env.set("no_proxy", "127.0.0.1,localhost");
        env.set("HF_HUB_DISABLE_XET", "1");
        env.set("HF_HUB_DISABLE_TELEMETRY", "1");
    }
    ~Hub() {
        server.reset();
        fs::remove_all(dir);
    }
    void start(const std::vector<std::string>& flags = {}) {
        server.emplace(repos, flags);
        env.set("HF_ENDPOINT", server->endpoint());
    }
    // Writes a repository file: a tiny random llama GGUF (seed: its content) unless `bytes` are given.
    std::vector<uint8_t> add(const std::string& repo, const std::string& file, uint64_t seed = 1) {
        test::TinySpec spec;
        spec.seed = seed;
        return add_bytes(repo, file, test::make_tiny_gguf(spec));
    }
    std::vector<uint8_t> add_bytes(const std::string& repo, const std::string& file, std::vector<uint8_t> bytes) {
        const fs::path p = repos / repo / file;
        fs::create_directories(p.parent_path());
        std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                 static_cast<std::streamsize>(bytes.size()));
        return bytes;
    }
    fs::path repo_cache(const std::string& repo) const {
        std::string name = "models--" + repo;
        name.replace(name.find('/'), 1, "--");
        return hf_home / "hub" / name;
    }
    // Regular files (not links) under the repository's blobs/.
    std::vector<std::string> blobs(const std::string& repo) const {
        std::vector<std::string> out;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(repo_cache(repo) / "blobs", ec)) out.push_back(e.path().filename());
        std::sort(out.begin(), out.end());
        return out;
    }
};

std::vector<uint8_t> file_bytes(const fs::path& p) {
    const std::string s = test::read_file(p);
    return {s.begin(), s.end()};
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

}  // namespace

TEST_CASE("quill pull fetches a model by name and quantization into the Hugging Face cache layout", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    const auto q4 = hub.add("test/tiny-GGUF", "tiny-Q4_K_M.gguf", 1);
    const auto q8 = hub.add("test/tiny-GGUF", "tiny-Q8_0.gguf", 2);
    hub.add("test/tiny-GGUF", "tiny-F16.gguf", 3);
    hub.add_bytes("test/tiny-GGUF", "README.md", {'h', 'i', '\n'});
    hub.start();

    auto r = run_quill({"pull", "test/tiny-GGUF:q8_0"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const fs::path path = first_line(r.out);
    const std::string commit = test::read_file(hub.repo_cache("test/tiny-GGUF") / "refs" / "main");
    CHECK(commit.size() == 40);
    CHECK(path == hub.repo_cache("test/tiny-GGUF") / "snapshots" / commit / "tiny-Q8_0.gguf");
    REQUIRE(fs::is_symlink(path));
    CHECK(fs::read_symlink(path).string().starts_with("../../blobs/"));
    CHECK(file_bytes(path) == q8);
    CHECK(r.err.find("test/tiny-GGUF:Q8_0 is ready") != std::string::npos);

    // Without a quantization: Q4_K_M.
    r = run_quill({"pull", "test/tiny-GGUF"});
    REQUIRE(r.status == 0);
    CHECK(file_bytes(first_line(r.out)) == q4);
    CHECK(hub.blobs("test/tiny-GGUF").size() == 2);

    // -m hf: on another command uses the cached file without asking the hub.
    const size_t before = hub.server->requests().size();
    r = run_quill({"info", "-m", "hf:test/tiny-GGUF:Q8_0", "--json"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(nlohmann::json::parse(r.out)["architecture"] == "llama");
    CHECK(hub.server->requests().size() == before);
    // and pulls on first use: F16 was not in the cache.
    r = run_quill({"info", "-m", "hf:test/tiny-GGUF:F16"});
    CHECK(r.status == 0);
    CHECK(hub.blobs("test/tiny-GGUF").size() == 3);
}

TEST_CASE("quill pull lists the choices when the quantization is absent or ambiguous", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    hub.add("test/two-GGUF", "alpha-Q4_K_M.gguf", 1);
    const auto beta = hub.add("test/two-GGUF", "beta-Q4_K_M.gguf", 2);
    hub.add("test/two-GGUF", "alpha-Q8_0.gguf", 3);
    hub.add("test/closest-GGUF", "m-Q3_K_S.gguf", 4);
    const auto q5 = hub.add("test/closest-GGUF", "m-Q5_0.gguf", 5);
    hub.start();

    auto r = run_quill({"pull", "test/two-GGUF"});
    CHECK(r.status == 2);
    CHECK(r.err.find("alpha-Q4_K_M.gguf") != std::string::npos);
    CHECK(r.err.find("beta-Q4_K_M.gguf") != std::string::npos);
    CHECK(r.err.find("alpha-Q8_0.gguf") == std::string::npos);

    r = run_quill({"pull", "test/two-GGUF:Q6_K"});
    CHECK(r.status == 2);
    CHECK(r.err.find("no GGUF file for Q6_K") != std::string::npos);
    CHECK(r.err.find("alpha-Q8_0.gguf") != std::string::npos);
    CHECK(!fs::exists(hub.repo_cache("test/two-GGUF")));

    r = run_quill({"pull", "test/two-GGUF:beta-Q4_K_M.gguf"});
    REQUIRE(r.status == 0);
    CHECK(file_bytes(first_line(r.out)) == beta);

    // No Q4_K_M: the nearest quantization (Q5_0 is one step above, Q3_K_S further below).
    r = run_quill({"pull", "test/closest-GGUF"});
    REQUIRE(r.status == 0);
    CHECK(file_bytes(first_line(r.out)) == q5);

    r = run_quill({"pull", "not-a-repo"});
    CHECK(r.status == 2);
    CHECK(r.err.find("expected a Hugging Face repository as owner/repo[:QUANT]") != std::string::npos);
    r = run_quill({"pull", "test/missing-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("not found") != std::string::npos);
}

TEST_CASE("quill pull passes over listing entries whose members have unexpected types", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    const auto q8 = hub.add("test/odd-GGUF", "tiny-Q8_0.gguf", 2);
    hub.start({"--odd-listing"});
    // (nlohmann's type error escaped from the listing's reader: "[json.exception.type_error.302] type must be ...")
    const auto r = run_quill({"pull", "test/odd-GGUF:Q8_0"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(file_bytes(first_line(r.out)) == q8);
    CHECK(r.err.find("json.exception") == std::string::npos);
}

TEST_CASE("quill pull refuses a file listing that is not JSON in one line of its own", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    hub.add("test/bad-GGUF", "tiny-Q8_0.gguf", 2);
    hub.start({"--bad-listing"});
    // (the message was nlohmann's: "... is not JSON: [json.exception.parse_error.101] parse error at line 1, ...")
    const auto r = run_quill({"pull", "test/bad-GGUF:Q8_0"});
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(count(r.err, "quill: error: ") == 1);
    CHECK_THAT(r.err, Catch::Contains("the file listing: not valid JSON at column 1: "));
    CHECK(r.err.find("json.exception") == std::string::npos);
}

TEST_CASE("quill pull resumes after the server drops the connection, keeping the bytes already there", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    const auto bytes = hub.add("test/drop-GGUF", "m-Q4_K_M.gguf", 1);
    const auto second = hub.add("test/drop-GGUF", "m-Q8_0.gguf", 2);
    hub.start({"--drop-once"});

    auto r = run_quill({"pull", "test/drop-GGUF"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(file_bytes(first_line(r.out)) == bytes);
    const auto gets = hub.server->blob_gets();
    REQUIRE(gets.size() == 2);
    CHECK(gets[0]["range"] == "");
    const uint64_t first = gets[0]["bytes"];
    CHECK(first == bytes.size() / 2);
    CHECK(gets[1]["range"] == fmt::format("bytes={}-", first));
    CHECK(hub.server->blob_bytes() == bytes.size());  // nothing fetched twice

    // A partial download left by an earlier run (under huggingface_hub's name for it, BLOB.incomplete) is resumed.
    hub.server.reset();
    hub.start();  // no drops now
    r = run_quill({"pull", "test/drop-GGUF:Q8_0", "--quiet"});
    REQUIRE(r.status == 0);
    const fs::path blob = fs::canonical(first_line(r.out));
    REQUIRE(run_quill({"rm", "test/drop-GGUF:Q8_0"}).status == 0);
    REQUIRE(!fs::exists(blob));
    const size_t half = second.size() / 3;
    {
        std::ofstream out(blob.string() + ".incomplete", std::ios::binary);
        out.write(reinterpret_cast<const char*>(second.data()), static_cast<std::streamsize>(half));
    }
    const size_t seen = hub.server->requests().size();
    r = run_quill({"pull", "test/drop-GGUF:Q8_0"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(file_bytes(first_line(r.out)) == second);
    CHECK(r.err.find("resuming") != std::string::npos);
    const auto all = hub.server->requests();
    bool ranged = false;
    for (size_t i = seen; i < all.size(); ++i)
        if (all[i]["range"] == fmt::format("bytes={}-", half)) ranged = true;
    CHECK(ranged);
}

TEST_CASE("quill pull catches a corrupted byte by its SHA-256 and moves nothing into the cache", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    hub.add("test/bad-GGUF", "m-Q4_K_M.gguf");
    hub.start({"--corrupt"});
    const auto r = run_quill({"pull", "test/bad-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("SHA-256 mismatch") != std::string::npos);
    CHECK(hub.blobs("test/bad-GGUF").empty());  // neither the blob nor its .incomplete
    CHECK(!fs::exists(hub.repo_cache("test/bad-GGUF") / "snapshots"));
    CHECK(run_quill({"info", "-m", "hf:test/bad-GGUF"}).status != 0);
}

TEST_CASE("concurrent pulls of the same file download it once", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    const auto bytes = hub.add("test/busy-GGUF", "m-Q4_K_M.gguf");
    hub.start({"--rate", "400000"});  // about a second a download, so that the pulls overlap
    const fs::path out = hub.dir / "out";
    const std::string pull = fmt::format("'{}' pull test/busy-GGUF", QUILL_BIN);
    const std::string script = fmt::format("{0} >'{1}.1' 2>'{1}.e1' & a=$!; {0} >'{1}.2' 2>'{1}.e2' & b=$!; "
                                           "wait $a; echo $? >'{1}.rc1'; wait $b; echo $? >'{1}.rc2'",
                                           pull, out.string());
    REQUIRE(std::system(("bash -c \"" + script + "\"").c_str()) == 0);
    std::string log;
    for (const auto& q : hub.server->requests()) log += q.dump() + "\n";
    INFO(log);
    INFO(test::read_file(out.string() + ".e1") << test::read_file(out.string() + ".e2"));
    CHECK(test::read_file(out.string() + ".rc1") == "0\n");
    CHECK(test::read_file(out.string() + ".rc2") == "0\n");
    const std::string path = test::read_file(out.string() + ".1");
    CHECK(path == test::read_file(out.string() + ".2"));
    CHECK(file_bytes(first_line(path)) == bytes);
    CHECK(hub.server->blob_bytes() == bytes.size());  // one download; the other pull waited and reused it
    // The pulls overlap unless the machine is very busy; then the second finds the blob and neither waits.
    CHECK(count(test::read_file(out.string() + ".e1") + test::read_file(out.string() + ".e2"),
                "waiting for another download") <= 1);
}

TEST_CASE("quill pull fetches every part of a split GGUF, in order, and -m hf: runs it", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    // A tiny model with a vocabulary, whole, and split in two as llama.cpp's gguf-split would.
    test::TinySpec spec;
    spec.vocab = "spm";
    const fs::path whole = hub.dir / "whole.gguf";
    const auto bytes = test::make_tiny_gguf(spec);
    std::ofstream(whole, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    fs::create_directories(hub.repos / "test/split-GGUF/Q8_0");
    const auto parts =
        test::write_split_gguf(GgufFile::open(whole.string()), {0, 7}, hub.repos / "test/split-GGUF/Q8_0", "m-Q8_0");
    hub.add("test/split-GGUF", "Q4_0/m-Q4_0-00001-of-00002.gguf", 3);  // its second part is missing
    hub.start();
    auto r = run_quill({"pull", "test/split-GGUF:Q8_0"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const std::string first = first_line(r.out);
    const std::string second = first_line(r.out.substr(first.size() + 1));
    CHECK(first.ends_with("/Q8_0/m-Q8_0-00001-of-00002.gguf"));
    CHECK(file_bytes(first) == file_bytes(parts[0]));
    CHECK(file_bytes(second) == file_bytes(parts[1]));
    r = run_quill({"pull", "test/split-GGUF:Q4_0"});
    CHECK(r.status == 2);
    CHECK(r.err.find("lacks parts") != std::string::npos);
    // -m hf: and QUILL_MODEL=hf: load both parts, and generate what the whole file does.
    const std::vector<std::string> run{"run", "--raw", "-p", "the cat", "-n", "12", "--temp", "0", "-t", "1"};
    auto with = [&](const std::vector<std::string>& model) {
        std::vector<std::string> args = run;
        args.insert(args.begin() + 1, model.begin(), model.end());
        return run_quill(args);
    };
    const auto want = with({"-m", whole.string()});
    REQUIRE(want.status == 0);
    r = with({"-m", "hf:test/split-GGUF:Q8_0"});
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out == want.out);
    hub.env.set("QUILL_MODEL", "hf:test/split-GGUF:Q8_0");
    r = with({});
    CHECK(r.status == 0);
    CHECK(r.out == want.out);
    r = run_quill({"list"});
    const size_t row = r.out.find("\ntest/split-GGUF:Q8_0 ");
    REQUIRE(row != std::string::npos);
    CHECK(first_line(r.out.substr(row + 1)).ends_with(" yes"));
    hub.env.set("QUILL_MODEL", std::nullopt);
    // rm takes both parts, their blobs, and the folder they were in.
    REQUIRE(run_quill({"rm", "test/split-GGUF:Q8_0"}).status == 0);
    CHECK(hub.blobs("test/split-GGUF").empty());
    CHECK(!fs::exists(fs::path(first).parent_path()));
}

TEST_CASE("quill pull refuses a split model from the headers of all its parts, before downloading any", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    const GgufFile whole = GgufFile::parse("whole.gguf", test::make_tiny_gguf({}));
    fs::create_directories(hub.repos / "test/iq2-GGUF");
    // The second part holds a matrix of a type quill cannot multiply; the first part's header alone looks runnable.
    const std::vector<uint8_t> tq1(row_size(GgmlType::TQ1_0, 256 * 4), 0);
    test::write_split_gguf(whole, {0, 5}, hub.repos / "test/iq2-GGUF", "m-Q8_0", [&](size_t k, GgufWriter& w) {
        if (k == 1) w.add_tensor("blk.9.ffn_up.weight", GgmlType::TQ1_0, {256, 4}, tq1);
        if (k == 0) w.set("split.tensors.count", static_cast<int32_t>(whole.tensors().size() + 1));
    });
    hub.start();
    const auto r = run_quill({"pull", "test/iq2-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("tensor 'blk.9.ffn_up.weight' has weight type tq1_0") != std::string::npos);
    CHECK(r.err.find("nothing was downloaded") != std::string::npos);
    CHECK(hub.server->blob_bytes() == 0);
    CHECK(hub.blobs("test/iq2-GGUF").empty());
}

TEST_CASE("quill pull reaches the hub through the proxy the environment names", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    const auto bytes = hub.add("test/proxy-GGUF", "m-Q4_K_M.gguf");
    hub.start();
    // A hub whose name does not resolve: only the proxy (the local server, which takes the whole URL) reaches it.
    hub.env.set("HF_ENDPOINT", "http://hub.quill-test.invalid");
    for (const char* name : {"NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"})
        hub.env.set(name, std::nullopt);
    hub.env.set("http_proxy", hub.server->endpoint());
    auto r = run_quill({"pull", "test/proxy-GGUF"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(file_bytes(first_line(r.out)) == bytes);
    const auto requests = hub.server->requests();
    CHECK(requests.size() >= 3);  // the listing, the resolve, the blob
    for (const auto& q : requests)  // a request line with the whole URL: what a proxy is sent
        CHECK(q["path"].get<std::string>().starts_with("http://"));
    hub.env.set("http_proxy", std::nullopt);
    r = run_quill({"pull", "test/other-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("cannot reach the hub") != std::string::npos);
}

TEST_CASE("offline, quill uses the cache and says so", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    const auto bytes = hub.add("test/net-GGUF", "m-Q4_K_M.gguf");
    hub.start();
    REQUIRE(run_quill({"pull", "test/net-GGUF"}).status == 0);
    const size_t seen = hub.server->requests().size();

    hub.env.set("HF_HUB_OFFLINE", "1");
    auto r = run_quill({"pull", "test/net-GGUF:Q4_K_M"});
    CHECK(r.status == 0);
    CHECK(r.err.find("offline (HF_HUB_OFFLINE)") != std::string::npos);
    CHECK(file_bytes(first_line(r.out)) == bytes);
    CHECK(hub.server->requests().size() == seen);
    r = run_quill({"pull", "test/other-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("not in the cache") != std::string::npos);

    hub.env.set("HF_HUB_OFFLINE", std::nullopt);
    hub.server->stop();  // the hub is unreachable now
    r = run_quill({"pull", "test/net-GGUF"});
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.err.find("offline: cannot reach") != std::string::npos);
    CHECK(file_bytes(first_line(r.out)) == bytes);
    r = run_quill({"pull", "test/other-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("cannot reach the hub") != std::string::npos);
}

TEST_CASE("a gated repository needs HF_TOKEN", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    const auto bytes = hub.add("test/gated-GGUF", "m-Q4_K_M.gguf");
    hub.start({"--gated", "test/gated-GGUF", "--token", "right-token"});
    auto r = run_quill({"pull", "test/gated-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("set HF_TOKEN") != std::string::npos);
    hub.env.set("HF_TOKEN", "wrong-token");
    r = run_quill({"pull", "test/gated-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("does not grant access") != std::string::npos);
    // The token `huggingface-cli login` saves in $HF_HOME/token counts when HF_TOKEN is unset.
    hub.env.set("HF_TOKEN", std::nullopt);
    fs::create_directories(hub.hf_home);
    std::ofstream(hub.hf_home / "token") << "right-token\n";
    r = run_quill({"pull", "test/gated-GGUF"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(file_bytes(first_line(r.out)) == bytes);
    CHECK(hub.server->requests().back()["auth"] == false);  // the token goes to the hub, not to the blob URL
}

TEST_CASE("quill list describes the cached models and quill rm removes them", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    hub.add("test/list-GGUF", "m-Q4_K_M.gguf", 1);
    hub.add("test/list-GGUF", "m-Q8_0.gguf", 2);
    hub.start();
    auto r = run_quill({"list"});
    CHECK(r.status == 0);
    CHECK(r.out.find("no models in the cache") != std::string::npos);
    REQUIRE(run_quill({"pull", "test/list-GGUF:Q4_K_M"}).status == 0);
    REQUIRE(run_quill({"pull", "test/list-GGUF:Q8_0"}).status == 0);
    r = run_quill({"list"});
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.starts_with("NAME"));
    CHECK(r.out.find("test/list-GGUF:Q4_K_M  m-Q4_K_M.gguf") != std::string::npos);
    CHECK(r.out.find("test/list-GGUF:Q8_0") != std::string::npos);
    CHECK(count(r.out, "llama") == 2);
    CHECK(count(r.out, " yes\n") == 2);

    r = run_quill({"rm", "test/list-GGUF:Q8_0"});
    CHECK(r.status == 0);
    CHECK(r.out.starts_with("removed test/list-GGUF:Q8_0"));
    CHECK(hub.blobs("test/list-GGUF").size() == 1);
    r = run_quill({"list"});
    CHECK(r.out.find("Q8_0") == std::string::npos);
    CHECK(r.out.find("test/list-GGUF:Q4_K_M") != std::string::npos);
    REQUIRE(run_quill({"rm", "test/list-GGUF"}).status == 0);
    CHECK(!fs::exists(hub.repo_cache("test/list-GGUF")));
    // A model that is not there: a failure (1, as ollama rm's), not a usage error; the name was well-formed.
    r = run_quill({"rm", "test/list-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("test/list-GGUF: no such model in the cache") != std::string::npos);
    CHECK(r.err.find("quill list") != std::string::npos);
}

TEST_CASE("quill pull refuses an unsupported architecture from the GGUF header, before the download", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    GgufWriter w;
    w.set("general.architecture", "rwkv6");
    std::vector<uint8_t> big(size_t{4} << 20, 0);
    w.add_tensor("blk.0.time_mix_key.weight", GgmlType::F32, {1024, 1024}, big);
    const auto bytes = hub.add_bytes("test/rwkv6-GGUF", "m-Q4_K_M.gguf", w.to_bytes());
    hub.start();
    const auto r = run_quill({"pull", "test/rwkv6-GGUF"});
    CHECK(r.status == 1);
    CHECK(r.err.find("architecture 'rwkv6' is not supported") != std::string::npos);
    CHECK(r.err.find("nothing was downloaded") != std::string::npos);
    CHECK(hub.server->blob_bytes(true) < bytes.size() / 8);  // the header probe only
    CHECK(hub.blobs("test/rwkv6-GGUF").empty());
}

TEST_CASE("quill pull retries after 429 Too Many Requests, waiting as Retry-After says", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    hub.add("test/busy-GGUF", "m-Q4_K_M.gguf");
    hub.start({"--status-once", "429"});
    const auto r = run_quill({"pull", "test/busy-GGUF"});
    INFO(r.err);
    CHECK(r.status == 0);
    const auto reqs = hub.server->requests();
    REQUIRE(reqs.size() >= 2);
    CHECK(reqs[0]["status"] == 429);
    CHECK(reqs[1]["status"] == 200);
}

namespace {

// True when python3 can import huggingface_hub, after a pip install --user when it could not; else skips with the
// reason (also under CI: the package comes from PyPI, which a machine may not reach).
bool require_huggingface_hub() {
    const char* probe = "python3 -c 'import huggingface_hub' >/dev/null 2>&1";
    if (std::system(probe) == 0) return true;
    std::system("timeout 300 python3 -m pip install --user --quiet huggingface_hub >/dev/null 2>&1");
    if (std::system(probe) == 0) return true;
    test::skip_no_device("the huggingface_hub Python package cannot be imported, nor installed with pip install --user");
    return false;
}

// Runs a Python script (with the test's environment) and returns its stdout; FAILs on a non-zero exit.
std::string run_python(const fs::path& dir, const std::string& script) {
    const fs::path file = dir / "script.py", out = dir / "script.out", err = dir / "script.err";
    std::ofstream(file) << script;
    const int rc = std::system(fmt::format("python3 '{}' >'{}' 2>'{}'", file.string(), out.string(), err.string()).c_str());
    INFO(test::read_file(err));
    REQUIRE(rc == 0);
    return test::read_file(out);
}

}  // namespace

TEST_CASE("a cache written by huggingface_hub is read by quill, and quill's by huggingface_hub", "[hub][cli]") {
    if (!require_python3() || !require_huggingface_hub()) return;
    Hub hub;
    const auto q8 = hub.add("test/shared-GGUF", "m-Q8_0.gguf", 1);
    const auto q4 = hub.add("test/shared-GGUF", "m-Q4_K_M.gguf", 2);
    hub.start();

    // huggingface_hub downloads; quill finds the file offline.
    const std::string hf_path = run_python(hub.dir, R"(
from huggingface_hub import hf_hub_download
print(hf_hub_download(repo_id="test/shared-GGUF", filename="m-Q8_0.gguf"))
)");
    CHECK(file_bytes(first_line(hf_path)) == q8);
    hub.env.set("HF_HUB_OFFLINE", "1");
    auto r = run_quill({"pull", "test/shared-GGUF:Q8_0"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(first_line(r.out) == first_line(hf_path));
    CHECK(run_quill({"info", "-m", "hf:test/shared-GGUF:Q8_0"}).status == 0);
    CHECK(run_quill({"list"}).out.find("test/shared-GGUF:Q8_0") != std::string::npos);

    // quill downloads; huggingface_hub finds the file in its cache and scans the cache without a warning.
    hub.env.set("HF_HUB_OFFLINE", std::nullopt);
    r = run_quill({"pull", "test/shared-GGUF:Q4_K_M"});
    REQUIRE(r.status == 0);
    const std::string seen = run_python(hub.dir, R"(
from huggingface_hub import scan_cache_dir, try_to_load_from_cache
print(try_to_load_from_cache("test/shared-GGUF", "m-Q4_K_M.gguf"))
info = scan_cache_dir()
print(len(info.warnings), [(r.repo_id, r.nb_files) for r in info.repos])
)");
    const std::string found = first_line(seen);
    CHECK(found == first_line(r.out));
    CHECK(file_bytes(found) == q4);
    CHECK(seen.find("0 [('test/shared-GGUF', 2)]") != std::string::npos);
}

TEST_CASE("quill pull draws a progress bar with rate and ETA on a terminal, and none in a pipe", "[hub][cli]") {
    if (!require_python3()) return;
    Hub hub;
    hub.add("test/bar-GGUF", "m-Q4_K_M.gguf", 1);
    hub.add("test/bar-GGUF", "m-Q8_0.gguf", 2);
    hub.start({"--rate", "400000"});
    test::PtyProcess pty({"pull", "test/bar-GGUF"}, hub.dir.string());
    REQUIRE(pty.wait_exit() == 0);
    const std::string& shown = pty.output();
    INFO(shown);
    CHECK(count(shown, "\033[K") >= 3);  // redrawn as it goes (PtyProcess drops the \r before it)
    CHECK(shown.find("test/bar-GGUF/m-Q4_K_M.gguf [") != std::string::npos);
    CHECK(shown.find("100% 402 kB/402 kB") != std::string::npos);
    CHECK(shown.find("kB/s ETA ") != std::string::npos);

    const auto r = run_quill({"pull", "test/bar-GGUF:Q8_0"});
    CHECK(r.status == 0);
    CHECK(r.err.find('\r') == std::string::npos);
    CHECK(r.err.find("quill: downloading test/bar-GGUF/m-Q8_0.gguf (402 kB)") != std::string::npos);
}

}  // namespace test_pull
