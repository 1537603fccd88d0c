#pragma once
// base/aligned_buffer.h — an owning, 64-byte aligned, zero-initialised byte buffer.
// Large buffers (>= 2 MiB) are anonymous mappings, 2 MiB aligned and advised to use
// transparent huge pages: the kernel zero-fills their pages on first touch, so a big KV pool
// costs no time or resident memory until it is used.
// Move-only. Not thread-safe (plain data).

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace tessera {

class AlignedBuffer {
 public:
    static constexpr std::size_t kAlignment = 64;

    AlignedBuffer() = default;
    static constexpr std::size_t kMapThreshold = std::size_t{1} << 21;

    explicit AlignedBuffer(std::size_t bytes) : size_(bytes) {
        if (bytes == 0) return;
        const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
        if (rounded >= kMapThreshold) {
            // Mapped one huge page larger so the data can start on a 2 MiB boundary, and
            // advised to use transparent huge pages: weights and KV are streamed through
            // far faster than 4 KiB page walks allow (a decode step touches ~10^5 pages).
            mapped_ = rounded + kMapThreshold;
            void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) throw std::bad_alloc();
            map_base_ = static_cast<std::byte*>(p);
            const auto address = reinterpret_cast<std::uintptr_t>(p);
            data_ = map_base_ + ((kMapThreshold - address % kMapThreshold) % kMapThreshold);
            madvise(map_base_, mapped_, MADV_HUGEPAGE);  // advice only: a kernel without THP ignores it
            return;
        }
        data_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
        if (data_ == nullptr) throw std::bad_alloc();
        std::memset(data_, 0, rounded);
    }
    ~AlignedBuffer() { release(); }
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    AlignedBuffer(AlignedBuffer&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)),
          size_(std::exchange(o.size_, 0)),
          mapped_(std::exchange(o.mapped_, 0)),
          map_base_(std::exchange(o.map_base_, nullptr)) {}
    AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
        if (this != &o) {
            release();
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
            mapped_ = std::exchange(o.mapped_, 0);
            map_base_ = std::exchange(o.map_base_, nullptr);
        }
        return *this;
    }

    std::byte* data() { return data_; }
    const std::byte* data() const { return data_; }
    std::size_t size() const { return size_; }
    template <typename T>
    T* as() { return reinterpret_cast<T*>(data_); }
    template <typename T>
    const T* as() const { return reinterpret_cast<const T*>(data_); }

 private:
    void release() {
        if (mapped_ != 0) {
            munmap(map_base_, mapped_);
        } else {
            std::free(data_);
        }
        data_ = nullptr;
        mapped_ = 0;
        map_base_ = nullptr;
    }

    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t mapped_ = 0;         // bytes mapped with mmap; 0 for heap buffers
    std::byte* map_base_ = nullptr;  // start of the mapping (data_ is 2 MiB aligned inside it)
};

}  // namespace tessera
