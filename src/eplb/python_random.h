#pragma once
// eplb/python_random.h — the draws of CPython's `random.Random(seed)` (MT19937 seeded by
// init_by_array, getrandbits, _randbelow, sample, shuffle) for small integer seeds, so the
// static dispatch table equals the one SGLang computes with `random.Random(42)`. Not
// thread-safe (one generator per table).

#include <cstdint>
#include <vector>

namespace tessera::eplb {

class PythonRandom {
 public:
    explicit PythonRandom(std::uint32_t seed);

    std::uint32_t getrandbits(int k);  // 1 <= k <= 32
    std::int64_t randbelow(std::int64_t n);  // n >= 1
    // random.sample(items, k) (k <= len(items)) and random.shuffle(items).
    std::vector<std::int32_t> sample(const std::vector<std::int32_t>& items, std::int64_t k);
    void shuffle(std::vector<std::int32_t>& items);

 private:
    std::uint32_t next();
    std::uint32_t state_[624];
    int index_ = 624;
};

}  // namespace tessera::eplb
