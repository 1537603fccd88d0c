#include "dist/store_wire.h"

#include <algorithm>

namespace tessera::dist::store_wire {

std::chrono::milliseconds Request::get_wait() const {
    const auto cap = std::chrono::duration_cast<std::chrono::milliseconds>(kMaxGetWait);
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(arg, cap.count())));
}

std::optional<std::string> read_hello(const ReadFn& read) {
    std::uint32_t magic = 0;
    std::uint32_t len = 0;
    if (!read(&magic, 4) || magic != kHelloMagic || !read(&len, 4) || len > kMaxTokenBytes) return std::nullopt;
    std::string token(len, '\0');
    if (len > 0 && !read(token.data(), len)) return std::nullopt;
    return token;
}

std::optional<Request> read_request(const ReadFn& read) {
    Request r;
    std::uint8_t op = 0;
    std::uint32_t key_len = 0;
    if (!read(&op, 1) || op < static_cast<std::uint8_t>(Op::kSet) || op > static_cast<std::uint8_t>(Op::kCheck))
        return std::nullopt;
    r.op = static_cast<Op>(op);
    if (!read(&key_len, 4) || key_len > kMaxKeyBytes) return std::nullopt;
    r.key.resize(key_len);
    if (key_len > 0 && !read(r.key.data(), key_len)) return std::nullopt;
    if (!read(&r.arg, 8)) return std::nullopt;
    if (r.op != Op::kSet) return r;
    std::uint64_t n = 0;
    if (!read(&n, 8) || n > kMaxValueBytes) return std::nullopt;
    constexpr std::uint64_t kPiece = 1 << 20;
    while (r.value.size() < n) {
        const std::size_t at = r.value.size();
        const auto piece = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, n - at));
        r.value.resize(at + piece);
        if (!read(r.value.data() + at, piece)) return std::nullopt;
    }
    return r;
}

bool same_token(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

}  // namespace tessera::dist::store_wire
