#include "eplb/python_random.h"

#include <cmath>
#include <set>
#include <utility>

namespace tessera::eplb {

PythonRandom::PythonRandom(std::uint32_t seed) {
    // init_genrand(19650218) then init_by_array({seed}) (_randommodule.c).
    state_[0] = 19650218u;
    for (int i = 1; i < 624; ++i) state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
    const std::uint32_t key[1] = {seed};
    int i = 1, j = 0;
    for (int k = 624; k > 0; --k) {
        state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<std::uint32_t>(j);
        ++i, ++j;
        if (i >= 624) state_[0] = state_[623], i = 1;
        if (j >= 1) j = 0;
    }
    for (int k = 623; k > 0; --k) {
        state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941u)) - static_cast<std::uint32_t>(i);
        ++i;
        if (i >= 624) state_[0] = state_[623], i = 1;
    }
    state_[0] = 0x80000000u;
}

std::uint32_t PythonRandom::next() {
    if (index_ >= 624) {
        for (int k = 0; k < 624; ++k) {
            const std::uint32_t y = (state_[k] & 0x80000000u) | (state_[(k + 1) % 624] & 0x7fffffffu);
            state_[k] = state_[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        index_ = 0;
    }
    std::uint32_t y = state_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

std::uint32_t PythonRandom::getrandbits(int k) { return next() >> (32 - k); }

std::int64_t PythonRandom::randbelow(std::int64_t n) {
    int k = 0;
    while ((std::int64_t{1} << k) <= n) ++k;  // n.bit_length()
    std::int64_t r = getrandbits(k);
    while (r >= n) r = getrandbits(k);
    return r;
}

std::vector<std::int32_t> PythonRandom::sample(const std::vector<std::int32_t>& items, std::int64_t k) {
    const auto n = static_cast<std::int64_t>(items.size());
    std::vector<std::int32_t> out(static_cast<std::size_t>(k));
    std::int64_t setsize = 21;
    if (k > 5) setsize += static_cast<std::int64_t>(std::pow(4.0, std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0))));
    if (n > setsize) {  // CPython's set path
        std::set<std::int64_t> selected;
        for (std::int64_t i = 0; i < k; ++i) {
            std::int64_t j = randbelow(n);
            while (selected.count(j) != 0) j = randbelow(n);
            selected.insert(j);
            out[i] = items[j];
        }
        return out;
    }
    std::vector<std::int32_t> pool = items;
    for (std::int64_t i = 0; i < k; ++i) {
        const std::int64_t j = randbelow(n - i);
        out[i] = pool[j];
        pool[j] = pool[n - i - 1];
    }
    return out;
}

void PythonRandom::shuffle(std::vector<std::int32_t>& items) {
    for (auto i = static_cast<std::int64_t>(items.size()) - 1; i > 0; --i) std::swap(items[i], items[randbelow(i + 1)]);
}

}  // namespace tessera::eplb
