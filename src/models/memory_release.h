#pragma once
// models/memory_release.h — what /release_memory_occupation gives back on every rank (SGLang's
// constants.py GPU_MEMORY_TYPE_WEIGHTS and GPU_MEMORY_TYPE_KV_CACHE): the served weights, and
// the pages of the KV pool. Plain data.

namespace tessera::models {

struct MemoryRelease {
    bool weights = false;
    bool kv_cache = false;
    bool any() const { return weights || kv_cache; }
};

}  // namespace tessera::models
