#include "engine/hub/sha256.h"

#include "engine/error.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

namespace quill::hub {

struct Sha256::State {
    EVP_MD_CTX* ctx = nullptr;
    ~State() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
    state_->ctx = EVP_MD_CTX_new();
    QUILL_CHECK(state_->ctx && EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) == 1,
                "OpenSSL could not start a SHA-256");
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(std::span<const uint8_t> bytes) {
    QUILL_CHECK(EVP_DigestUpdate(state_->ctx, bytes.data(), bytes.size()) == 1, "OpenSSL SHA-256 update failed");
}

std::string Sha256::hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    QUILL_CHECK(EVP_DigestFinal_ex(state_->ctx, digest, &n) == 1 && n == 32, "OpenSSL SHA-256 final failed");
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
        out += kHex[digest[i] >> 4];
        out += kHex[digest[i] & 15];
    }
    return out;
}

std::string sha256_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(fmt::format("{}: cannot open to check its SHA-256: {}", path.string(), std::strerror(errno)));
    Sha256 h;
    std::vector<uint8_t> buf(size_t{1} << 20);
    while (in) {
        in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
        h.update({buf.data(), static_cast<size_t>(in.gcount())});
    }
    if (in.bad()) throw FileError(fmt::format("{}: read error while checking its SHA-256", path.string()));
    return h.hex();
}

}  // namespace quill::hub
