#include "base/sha256.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tessera {
namespace {

// FIPS 180-4's examples, and a million 'a' fed in uneven pieces (the buffering across blocks).
TEST(Sha256Test, KnownDigests) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    Sha256 h;
    const std::string piece(1024, 'a');  // pieces of 1 to 1009 bytes
    std::size_t fed = 0;
    for (std::size_t n = 1; fed < 1'000'000; n = n % 997 + 13) {
        const std::size_t take = std::min(n, 1'000'000 - fed);
        h.update(piece.data(), take);
        fed += take;
    }
    EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, FilesAreReadWhole) {
    const auto path = std::filesystem::temp_directory_path() / ("tessera_sha256_" + std::to_string(getpid()));
    std::string data(9'000'001, '\0');  // more than two of the 4 MiB reads
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 % 251);
    std::ofstream(path, std::ios::binary) << data;
    auto digest = sha256_file(path.string());
    std::filesystem::remove(path);
    ASSERT_TRUE(digest.ok()) << digest.status().message();
    EXPECT_EQ(digest->size, data.size());
    EXPECT_EQ(digest->sha256, sha256_hex(data));
    EXPECT_EQ(sha256_file("/nonexistent/file").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
