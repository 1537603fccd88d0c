// dist/store_test.cpp — HashStore, PrefixStore and TcpStore (server + clients on 127.0.0.1).

#include "dist/store.h"
#include "dist/store_wire.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::dist {
namespace {

using std::chrono::milliseconds;
using Bytes = std::vector<std::uint8_t>;

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

struct TcpFixture {
    std::unique_ptr<Store> server;
    int port = 0;
    std::unique_ptr<Store> client() {
        TcpStoreOptions o;
        o.port = port;
        o.connect_timeout = milliseconds(2000);
        auto c = make_tcp_store(o);
        EXPECT_TRUE(c.ok()) << c.status().to_string();
        return std::move(c).value();
    }
};

TcpFixture start_tcp() {
    TcpStoreOptions o;
    o.is_server = true;
    o.port = 0;
    TcpFixture f;
    auto s = make_tcp_store(o, &f.port);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    f.server = std::move(s).value();
    EXPECT_GT(f.port, 0);
    return f;
}

// The same behaviour checks for every Store implementation.
void exercise(Store& a, Store& b) {
    ASSERT_TRUE(a.set("k", bytes("v1")).ok());
    auto got = b.get("k", milliseconds(100));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got.value(), bytes("v1"));
    EXPECT_TRUE(b.check("k").value());
    EXPECT_FALSE(b.check("absent").value());

    // Empty values round-trip.
    ASSERT_TRUE(a.set("empty", {}).ok());
    EXPECT_TRUE(b.get("empty", milliseconds(100)).value().empty());

    // add: starts from 0, is atomic across clients.
    EXPECT_EQ(a.add("ctr", 5).value(), 5);
    EXPECT_EQ(b.add("ctr", -2).value(), 3);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            Store& s = (t % 2) ? a : b;
            for (int i = 0; i < 50; ++i) ASSERT_TRUE(s.add("ctr", 1).ok());
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(a.add("ctr", 0).value(), 203);
    EXPECT_EQ(b.get("ctr", milliseconds(100)).value(), bytes("203"));
    // add on a non-integer value is an error, not a crash.
    EXPECT_FALSE(a.add("k", 1).ok());

    // get blocks until another thread sets the key.
    std::thread setter([&] {
        std::this_thread::sleep_for(milliseconds(50));
        ASSERT_TRUE(a.set("late", bytes("x")).ok());
    });
    auto t0 = std::chrono::steady_clock::now();
    auto late = b.get("late", milliseconds(2000));
    setter.join();
    ASSERT_TRUE(late.ok()) << late.status().to_string();
    EXPECT_EQ(late.value(), bytes("x"));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1500));

    // get timeout names the key.
    t0 = std::chrono::steady_clock::now();
    auto missing = b.get("never", milliseconds(150));
    auto waited = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(missing.status().message().find("never"), std::string::npos)
        << missing.status().message();
    EXPECT_GE(waited, milliseconds(140));
    EXPECT_LT(waited, milliseconds(1500));

    // Large values.
    Bytes big(3 << 20);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 7);
    ASSERT_TRUE(a.set("big", big).ok());
    EXPECT_EQ(b.get("big", milliseconds(1000)).value(), big);
}

TEST(HashStoreTest, Basics) {
    auto s = make_hash_store();
    exercise(*s, *s);
}

// What the server reads: a value is read in pieces as its bytes arrive (a claimed 4 GiB of
// nothing allocates nothing), a GET's wait is capped, an unknown op ends the connection, and
// an ADD that would overflow is refused (found by store_wire_fuzz's seeds).
TEST(StoreWireTest, ClaimedLengthsAreBoundedByTheBytesThatArrive) {
    auto reader = [](const Bytes& bytes, std::size_t* at) {
        return [&bytes, at](void* out, std::size_t n) {
            if (n > bytes.size() - *at) return false;
            std::memcpy(out, bytes.data() + *at, n);
            *at += n;
            return true;
        };
    };
    auto put = [](Bytes& b, const void* p, std::size_t n) {
        b.insert(b.end(), static_cast<const std::uint8_t*>(p), static_cast<const std::uint8_t*>(p) + n);
    };
    Bytes set;
    const std::uint8_t op_set = 1;
    const std::uint32_t key_len = 1;
    const std::uint64_t arg = 0, claimed = std::uint64_t{1} << 32;
    put(set, &op_set, 1);
    put(set, &key_len, 4);
    set.push_back('k');
    put(set, &arg, 8);
    put(set, &claimed, 8);
    set.resize(set.size() + 100);  // 100 bytes of the 4 GiB claimed
    std::size_t at = 0;
    EXPECT_FALSE(store_wire::read_request(reader(set, &at)).has_value());

    Bytes get;
    const std::uint8_t op_get = 2;
    const std::uint64_t forever = ~std::uint64_t{0};
    put(get, &op_get, 1);
    put(get, &key_len, 4);
    get.push_back('k');
    put(get, &forever, 8);
    at = 0;
    auto request = store_wire::read_request(reader(get, &at));
    ASSERT_TRUE(request.has_value());
    EXPECT_EQ(request->get_wait(), std::chrono::duration_cast<milliseconds>(store_wire::kMaxGetWait));

    get[0] = 9;  // no such op
    at = 0;
    EXPECT_FALSE(store_wire::read_request(reader(get, &at)).has_value());

    auto store = make_hash_store();
    ASSERT_TRUE(store->add("n", std::numeric_limits<std::int64_t>::max()).ok());
    EXPECT_EQ(store->add("n", 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(PrefixStoreTest, IsolatesKeys) {
    auto base = make_hash_store();
    auto p1 = make_prefix_store("g1", *base);
    auto p2 = make_prefix_store("g2", *base);
    ASSERT_TRUE(p1->set("k", bytes("one")).ok());
    ASSERT_TRUE(p2->set("k", bytes("two")).ok());
    EXPECT_EQ(p1->get("k", milliseconds(10)).value(), bytes("one"));
    EXPECT_EQ(p2->get("k", milliseconds(10)).value(), bytes("two"));
    EXPECT_EQ(base->get("g1/k", milliseconds(10)).value(), bytes("one"));
    exercise(*p1, *p1);
}

TEST(TcpStoreTest, ServerAndClient) {
    auto f = start_tcp();
    auto c = f.client();
    exercise(*f.server, *c);
}

// A store with a job token serves only clients that present it; a stranger (no hello, a
// wrong token, junk) is dropped and the job's own clients keep working.
TEST(TcpStoreTest, OnlyClientsWithTheJobTokenGetIn) {
    TcpStoreOptions o;
    o.is_server = true;
    o.token = "job-secret-1";
    int port = 0;
    auto server = make_tcp_store(o, &port);
    ASSERT_TRUE(server.ok());
    auto client = [&](const std::string& token) {
        TcpStoreOptions c;
        c.port = port;
        c.token = token;
        c.connect_timeout = milliseconds(2000);
        return make_tcp_store(c);
    };
    auto member = client("job-secret-1");
    ASSERT_TRUE(member.ok());
    ASSERT_TRUE((*member)->set("k", bytes("v")).ok());

    auto wrong = client("job-secret-2");
    ASSERT_TRUE(wrong.ok()) << "connect succeeds; the first request fails";
    EXPECT_FALSE((*wrong)->set("k", bytes("stolen")).ok());
    auto none = client("");
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE((*none)->get("k", milliseconds(100)).ok());

    // A raw socket speaking the protocol without a hello is closed before it reads anything.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    const std::uint8_t get_k[] = {2, 1, 0, 0, 0, 'k', 0, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ(::send(fd, get_k, sizeof(get_k), 0), static_cast<ssize_t>(sizeof(get_k)));
    char buf[64];
    EXPECT_LE(::recv(fd, buf, sizeof(buf), 0), 0) << "no value for a stranger";
    ::close(fd);

    auto got = (*member)->get("k", milliseconds(100));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got.value(), bytes("v")) << "the job's key is untouched";
}

TEST(TcpStoreTest, TwoClients) {
    auto f = start_tcp();
    auto c1 = f.client();
    auto c2 = f.client();
    exercise(*c1, *c2);
}

TEST(TcpStoreTest, AddCountersFromManyClients) {
    auto f = start_tcp();
    constexpr int kClients = 4, kAdds = 100;
    std::vector<std::thread> threads;
    std::vector<std::int64_t> seen;
    std::mutex mu;
    for (int c = 0; c < kClients; ++c) {
        threads.emplace_back([&] {
            auto client = f.client();
            for (int i = 0; i < kAdds; ++i) {
                auto v = client->add("counter", 1);
                ASSERT_TRUE(v.ok());
                std::lock_guard<std::mutex> lock(mu);
                seen.push_back(v.value());
            }
        });
    }
    for (auto& t : threads) t.join();
    // Every intermediate value was handed out exactly once.
    std::sort(seen.begin(), seen.end());
    ASSERT_EQ(seen.size(), static_cast<size_t>(kClients * kAdds));
    for (int i = 0; i < kClients * kAdds; ++i) EXPECT_EQ(seen[i], i + 1);
}

TEST(TcpStoreTest, GetTimeoutFromClient) {
    auto f = start_tcp();
    auto c = f.client();
    auto t0 = std::chrono::steady_clock::now();
    auto r = c->get("missing/key", milliseconds(200));
    auto waited = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(r.status().message().find("missing/key"), std::string::npos);
    EXPECT_GE(waited, milliseconds(190));
    EXPECT_LT(waited, milliseconds(1000));
    // The connection is still usable afterwards.
    ASSERT_TRUE(c->set("a", bytes("b")).ok());
    EXPECT_EQ(c->get("a", milliseconds(100)).value(), bytes("b"));
}

TEST(TcpStoreTest, ClientSeesServerShutdown) {
    auto f = start_tcp();
    auto c = f.client();
    std::thread stopper([&] {
        std::this_thread::sleep_for(milliseconds(100));
        f.server.reset();  // the hosting rank exits while a client waits
    });
    auto t0 = std::chrono::steady_clock::now();
    auto r = c->get("never", milliseconds(5000));
    stopper.join();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
    EXPECT_FALSE(c->set("x", {}).ok());
}

TEST(TcpStoreTest, ConnectTimeoutWithoutServer) {
    // Bind a server to learn a free port, then close it.
    int port = 0;
    {
        auto f = start_tcp();
        port = f.port;
    }
    TcpStoreOptions o;
    o.port = port;
    o.connect_timeout = milliseconds(200);
    auto t0 = std::chrono::steady_clock::now();
    auto c = make_tcp_store(o);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1500));
}

TEST(TcpStoreTest, ClientStartsBeforeServer) {
    int port = 0;
    {
        auto f = start_tcp();
        port = f.port;
    }
    std::unique_ptr<Store> server;
    std::thread later([&] {
        std::this_thread::sleep_for(milliseconds(100));
        TcpStoreOptions o;
        o.is_server = true;
        o.port = port;
        auto s = make_tcp_store(o);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        server = std::move(s).value();
    });
    TcpStoreOptions o;
    o.port = port;
    o.connect_timeout = milliseconds(3000);
    auto c = make_tcp_store(o);
    later.join();
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_TRUE(c.value()->set("k", bytes("v")).ok());
    EXPECT_EQ(server->get("k", milliseconds(100)).value(), bytes("v"));
}

}  // namespace
}  // namespace tessera::dist
