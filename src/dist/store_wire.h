#pragma once
// dist/store_wire.h — the rendezvous store's messages as the server reads them (see
// store.cpp for the layout), through a byte source: the server reads a socket, the fuzzer a
// buffer, with the same code. Lengths a client claims are bounded before anything is
// allocated, and values are read in pieces, so memory follows the bytes that arrive.
// Pure functions; thread-safe.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tessera::dist::store_wire {

enum class Op : std::uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4 };

inline constexpr std::uint32_t kHelloMagic = 0x4A525354;  // "TSRJ"
inline constexpr std::uint32_t kMaxTokenBytes = 1024;
inline constexpr std::uint32_t kMaxKeyBytes = 1u << 20;
inline constexpr std::uint64_t kMaxValueBytes = 1ull << 32;
// A GET waits at most this long whatever the client asks (a u64 of milliseconds would
// overflow the clock).
inline constexpr std::chrono::hours kMaxGetWait{24};

// Fills exactly `n` bytes at `data`; false when the source ends, fails or times out.
using ReadFn = std::function<bool(void* data, std::size_t n)>;

struct Request {
    Op op = Op::kCheck;
    std::string key;
    std::uint64_t arg = 0;            // GET: wait in ms; ADD: the delta (two's complement)
    std::vector<std::uint8_t> value;  // SET only

    std::chrono::milliseconds get_wait() const;
};

// The token of a hello message; nullopt when the bytes are not one (wrong magic, a token
// longer than kMaxTokenBytes, cut short).
std::optional<std::string> read_hello(const ReadFn& read);

// One request; nullopt when the source ended or the request is malformed (unknown op, key or
// value over its bound): the server then drops the connection.
std::optional<Request> read_request(const ReadFn& read);

// Equal strings, in time that depends only on the lengths.
bool same_token(const std::string& a, const std::string& b);

}  // namespace tessera::dist::store_wire
