// SHA-256 of a stream of bytes, through OpenSSL's libcrypto (its SHA extensions and AVX2 code hash a multi-gigabyte
// download at disk speed), for checking downloads against the hashes the Hugging Face API gives.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace quill::hub {

class Sha256 {
public:
    Sha256();
    ~Sha256();
    Sha256(Sha256&&) noexcept;
    Sha256& operator=(Sha256&&) noexcept;

    void update(std::span<const uint8_t> bytes);
    // The digest as 64 lowercase hex digits; the hasher cannot be updated after.
    std::string hex();

private:
    struct State;
    std::unique_ptr<State> state_;
};

// The SHA-256 of a whole file, 64 lowercase hex digits; FileError when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace quill::hub
