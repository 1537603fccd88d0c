#pragma once
// base/sha256.h — SHA-256 (FIPS 180-4), for checking model files against a manifest of their
// digests (--model-checksum). Streaming: update() any number of times, then hex_digest().

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera {

class Sha256 {
 public:
    Sha256();
    void update(const void* data, std::size_t size);
    // The digest of everything given so far, as 64 lowercase hex digits; ends the stream.
    std::string hex_digest();

 private:
    void compress(const std::uint8_t* block);

    std::array<std::uint32_t, 8> state_;
    std::array<std::uint8_t, 64> buffer_{};
    std::size_t buffered_ = 0;
    std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view data);

// The file's digest and size, read in 4 MiB pieces.
struct FileDigest {
    std::string sha256;
    std::uint64_t size = 0;
};
StatusOr<FileDigest> sha256_file(const std::string& path);

}  // namespace tessera
