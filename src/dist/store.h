#pragma once
// dist/store.h — the key-value store ranks rendezvous through (c10d's Store): set, blocking
// get with a timeout, atomic add. TcpStore serves it over TCP at --dist-init-addr (node 0
// hosts the server); HashStore keeps it in process for ranks-as-threads tests.
// Implementations are thread-safe.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::dist {

class Store {
 public:
    static constexpr std::chrono::milliseconds kDefaultTimeout{300'000};
    virtual ~Store() = default;

    virtual Status set(const std::string& key, const std::vector<std::uint8_t>& value) = 0;
    // Blocks until `key` exists or `timeout` passes (DeadlineExceeded naming the key).
    virtual StatusOr<std::vector<std::uint8_t>> get(const std::string& key,
                                                    std::chrono::milliseconds timeout) = 0;
    // Adds `delta` to the integer at `key` (0 when absent) and returns the new value.
    virtual StatusOr<std::int64_t> add(const std::string& key, std::int64_t delta) = 0;
    virtual StatusOr<bool> check(const std::string& key) = 0;
};

struct TcpStoreOptions {
    std::string host = "127.0.0.1";
    int port = 0;            // server: 0 picks a free port (see TcpStore::port())
    bool is_server = false;
    std::chrono::milliseconds connect_timeout{60'000};
    // The job's shared secret: the server serves only clients that present it first (empty:
    // no check, for tests). The launcher makes one per job (app/launcher.h job_token()).
    std::string token;
};

// Creates the server (is_server) or a client connected to it.
StatusOr<std::unique_ptr<Store>> make_tcp_store(const TcpStoreOptions& options, int* bound_port = nullptr);
std::unique_ptr<Store> make_hash_store();

// Keys of `base` prefixed with "<prefix>/", so several groups share one store.
std::unique_ptr<Store> make_prefix_store(std::string prefix, Store& base);

}  // namespace tessera::dist
