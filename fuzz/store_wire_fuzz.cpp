// libFuzzer target: bytes → the rendezvous store's messages as its server reads them (a hello,
// then requests), each request applied to an in-process store. Claimed lengths must never
// be allocated beyond the bytes that arrived, a GET never waits unbounded, and an ADD that
// would overflow is refused rather than wrapping.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "dist/store.h"
#include "dist/store_wire.h"

namespace wire = tessera::dist::store_wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::size_t at = 0;
    const wire::ReadFn read = [&](void* out, std::size_t n) {
        if (n > size - at) return false;
        std::memcpy(out, data + at, n);
        at += n;
        return true;
    };
    // A server with a token reads a hello first; one without goes straight to requests.
    const bool with_hello = size > 0 && (data[0] & 1) != 0;
    if (with_hello) {
        at = 1;
        auto token = wire::read_hello(read);
        if (!token) return 0;
        if (token->size() > wire::kMaxTokenBytes) std::abort();
    }
    auto store = tessera::dist::make_hash_store();
    while (auto request = wire::read_request(read)) {
        if (request->key.size() > wire::kMaxKeyBytes || request->value.size() > size) std::abort();
        switch (request->op) {
            case wire::Op::kSet:
                (void)store->set(request->key, request->value);
                break;
            case wire::Op::kGet:
                if (request->get_wait() > wire::kMaxGetWait) std::abort();
                (void)store->get(request->key, std::chrono::milliseconds(0));
                break;
            case wire::Op::kAdd:
                (void)store->add(request->key, static_cast<std::int64_t>(request->arg));
                break;
            case wire::Op::kCheck:
                (void)store->check(request->key);
                break;
        }
    }
    return 0;
}
