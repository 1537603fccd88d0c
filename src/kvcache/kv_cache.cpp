#include "kvcache/kv_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace tessera::kvcache {

KvCache::KvCache(const KvCacheShape& shape, std::int64_t capacity)
    : shape_(shape), capacity_(capacity) {
    const auto bytes = static_cast<std::size_t>(capacity * shape.row_bytes());
    for (std::int64_t l = 0; l < shape.n_layers; ++l) {
        k_.emplace_back(bytes);
        if (shape.has_v()) v_.emplace_back(bytes);
    }
}

KvView KvCache::view() {
    KvView view;
    view.dtype = shape_.dtype;
    view.layer_bytes = k_.empty() ? 0 : k_.front().size();
    for (std::int64_t l = 0; l < shape_.n_layers; ++l) {
        view.k.push_back(k(l));
        view.v.push_back(v(l));
    }
    return view;
}

Status KvCache::check_fits(std::int64_t start, std::int64_t n) const {
    if (start < 0 || n < 0 || start + n > capacity_) {
        return Status::OutOfRange("sequence of " + std::to_string(start + n) +
                                  " tokens does not fit the KV cache of " +
                                  std::to_string(capacity_) + " tokens");
    }
    return Status::Ok();
}

void release_pages(const KvView& kv) {
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto release = [&](void* buffer) {
        if (buffer == nullptr) return;
        // The whole pages inside the buffer only: a small buffer shares its first and last
        // page with other allocations.
        const auto begin = (reinterpret_cast<std::uintptr_t>(buffer) + page - 1) / page * page;
        const auto end = (reinterpret_cast<std::uintptr_t>(buffer) + kv.layer_bytes) / page * page;
        if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    };
    for (void* k : kv.k) release(k);
    for (void* v : kv.v) release(v);
}

}  // namespace tessera::kvcache
