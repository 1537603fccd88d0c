#pragma once
// base/aligned_buffer.h — an owning, 64-byte aligned, zero-initialised byte buffer.
// Move-only. Not thread-safe (plain data).

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace tessera {

class AlignedBuffer {
 public:
    static constexpr std::size_t kAlignment = 64;

    AlignedBuffer() = default;
    explicit AlignedBuffer(std::size_t bytes) : size_(bytes) {
        if (bytes == 0) return;
        const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
        data_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
        if (data_ == nullptr) throw std::bad_alloc();
        std::memset(data_, 0, rounded);
    }
    ~AlignedBuffer() { std::free(data_); }
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    AlignedBuffer(AlignedBuffer&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
        if (this != &o) {
            std::free(data_);
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
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
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace tessera
