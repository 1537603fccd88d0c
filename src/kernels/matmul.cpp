// kernels/matmul.cpp — weight packing, the scalar reference paths, and the matmul dispatch:
// picks the ISA path, prepares x for it (bf16 rounding) and splits the output over the
// thread pool. The vector kernels live in cpu/matmul_avx2.cpp and cpu/matmul_avx512.cpp.

#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/cpu/matmul_impl.h"

namespace tessera::kernels {

namespace {

using cpu::kPanelWidth;

// Below this many elements of x, converting it on the calling thread is cheaper than a
// second round trip through the pool.
constexpr std::int64_t kParallelPrepareElements = 1 << 16;
// Rows per work item when the output is split by rows: a multiple of both ISA row tiles.
constexpr std::int64_t kRowAlign = 12;
// Rows per pass over the weight for tall inputs (see matmul()).
constexpr std::int64_t kRowBlock = 512;

std::int64_t round_up(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }

// Chunks per worker when splitting work: enough that a worker slowed down by another
// process on its core (common on a shared machine) hands its share to the others.
constexpr std::int64_t kChunksPerWorker = 6;

// Runs fn(begin, end) over [0, n) in chunks that are multiples of `align` (except the
// last), handed out to the pool's workers on demand; inline when there is no pool.
template <typename F>
void split(ThreadPool* pool, std::int64_t n, std::int64_t align, F&& fn) {
    if (pool == nullptr || pool->size() == 1 || n <= align) {
        fn(std::int64_t{0}, n);
        return;
    }
    const std::int64_t units = (n + align - 1) / align;
    const std::int64_t n_chunks = std::min(units, kChunksPerWorker * pool->size());
    const std::int64_t chunk = (units + n_chunks - 1) / n_chunks * align;
    std::atomic<std::int64_t> next{0};
    pool->run([&](int, int) {
        while (true) {
            const std::int64_t begin = next.fetch_add(1, std::memory_order_relaxed) * chunk;
            if (begin >= n) return;
            fn(begin, std::min(n, begin + chunk));
        }
    });
}

// Scratch for x converted for a bf16 kernel; grows, never shrinks. Per calling thread, so
// concurrent matmul() calls from different threads do not share it.
template <typename T>
T* scratch(std::int64_t elements) {
    thread_local AlignedBuffer buffer;
    const auto bytes = static_cast<std::size_t>(elements) * sizeof(T);
    if (buffer.size() < bytes) buffer = AlignedBuffer(bytes);
    return buffer.as<T>();
}

float packed_at(const PackedWeight& w, std::int64_t row, std::int64_t col) {
    const std::int64_t panel = row / kPanelWidth;
    const std::int64_t lane = row % kPanelWidth;
    if (w.dtype == DType::kBF16) {
        const std::int64_t index =
            ((panel * (w.k_padded / 2) + col / 2) * kPanelWidth + lane) * 2 + col % 2;
        return bf16_to_f32(w.data.as<std::uint16_t>()[index]);
    }
    return w.data.as<float>()[(panel * w.k_padded + col) * kPanelWidth + lane];
}

// The kReference path: scalar loops over the packed layout, rows [r0, r1) × panels
// [p0, p1). Each output sums over k in order, in f32.
void matmul_packed_reference(const float* x, std::int64_t x_stride, const PackedWeight& w, float* y,
                             std::int64_t y_stride, std::int64_t r0, std::int64_t r1,
                             std::int64_t p0, std::int64_t p1) {
    const bool bf16 = w.dtype == DType::kBF16;
    std::vector<float> xr(static_cast<std::size_t>(w.k));
    for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = 0; c < w.k; ++c) {
            const float v = x[r * x_stride + c];
            xr[c] = bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
        }
        const std::int64_t n_end = std::min(w.n, p1 * kPanelWidth);
        for (std::int64_t j = p0 * kPanelWidth; j < n_end; ++j) {
            float acc = 0.0f;
            for (std::int64_t c = 0; c < w.k; ++c) acc += xr[c] * packed_at(w, j, c);
            y[r * y_stride + j] = acc;
        }
    }
}

}  // namespace

PackedWeight pack_weight(const void* w, DType src_type, std::int64_t n, std::int64_t k,
                         DType dst_type) {
    TSR_CHECK(dst_type == DType::kF32 || dst_type == DType::kBF16)
        << "pack_weight: the compute type must be f32 or bf16, got " << dtype_name(dst_type);
    TSR_CHECK(n >= 0 && k >= 0) << "pack_weight: bad shape [" << n << ", " << k << "]";
    PackedWeight out;
    out.dtype = dst_type;
    out.n = n;
    out.k = k;
    out.n_padded = round_up(n, kPanelWidth);
    out.k_padded = round_up(k, 2);
    out.data =
        AlignedBuffer(static_cast<std::size_t>(out.n_padded * out.k_padded) * dtype_size(dst_type));

    const auto* src = static_cast<const std::byte*>(w);
    const std::size_t src_row_bytes = static_cast<std::size_t>(k) * dtype_size(src_type);
    std::vector<float> row(static_cast<std::size_t>(k));
    for (std::int64_t j = 0; j < n && k > 0; ++j) {
        convert_to_f32(src + j * src_row_bytes, src_type, row.data(), row.size());
        const std::int64_t panel = j / kPanelWidth;
        const std::int64_t lane = j % kPanelWidth;
        if (dst_type == DType::kBF16) {
            // [panel][k / 2][lane][k % 2]
            std::uint16_t* base =
                out.data.as<std::uint16_t>() + panel * out.k_padded * kPanelWidth + lane * 2;
            for (std::int64_t c = 0; c < k; ++c) {
                base[(c / 2) * kPanelWidth * 2 + c % 2] = f32_to_bf16(row[c]);
            }
        } else {
            // [panel][k][lane]
            float* base = out.data.as<float>() + panel * out.k_padded * kPanelWidth + lane;
            for (std::int64_t c = 0; c < k; ++c) base[c * kPanelWidth] = row[c];
        }
    }
    return out;
}

void unpack_weight(const PackedWeight& w, float* out) {
    for (std::int64_t j = 0; j < w.n; ++j) {
        for (std::int64_t c = 0; c < w.k; ++c) out[j * w.k + c] = packed_at(w, j, c);
    }
}

void matmul(const float* x, std::int64_t m, const PackedWeight& w, float* y, ThreadPool* pool,
            Isa isa, std::int64_t x_stride, std::int64_t y_stride) {
    if (x_stride == 0) x_stride = w.k;
    if (y_stride == 0) y_stride = w.n;
    TSR_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kBF16)
        << "matmul: unpacked or unsupported weight type " << dtype_name(w.dtype);
    TSR_CHECK(x_stride >= w.k && y_stride >= w.n)
        << "matmul: strides (" << x_stride << ", " << y_stride << ") below k=" << w.k
        << ", n=" << w.n;
    if (m <= 0 || w.n == 0) return;
    if (m > kRowBlock) {
        // Tall inputs (long prefills) in row blocks: the kernels stream the input once per
        // group of output panels, and a block's rows stay in the caches between groups,
        // where all rows of a 4096-row input would come from memory each time (measured
        // ~10 % slower). Re-reading the weight per block costs little next to the work.
        for (std::int64_t r0 = 0; r0 < m; r0 += kRowBlock)
            matmul(x + r0 * x_stride, std::min(kRowBlock, m - r0), w, y + r0 * y_stride, pool, isa, x_stride,
                   y_stride);
        return;
    }
    if (w.k == 0) {
        for (std::int64_t r = 0; r < m; ++r) std::fill_n(y + r * y_stride, w.n, 0.0f);
        return;
    }
    if (isa != Isa::kReference && !isa_supported(isa)) isa = best_supported_isa();

    const std::int64_t n_panels = w.n_padded / kPanelWidth;
    if (isa == Isa::kReference) {
        split(pool, n_panels, 1, [&](std::int64_t p0, std::int64_t p1) {
            matmul_packed_reference(x, x_stride, w, y, y_stride, 0, m, p0, p1);
        });
        return;
    }

    const bool avx512 = isa == Isa::kAvx512Bf16;
    cpu::MatmulOperands op;
    op.m = m;
    op.w = &w;
    op.y = y;
    op.y_stride = y_stride;
    if (w.dtype == DType::kF32) {
        op.a = x;
        op.a_stride = x_stride;
    } else {
        // The kernels read x rounded to bf16 with a zero pad column (see matmul_impl.h).
        op.a_stride = w.k_padded;
        void* dst = avx512 ? static_cast<void*>(scratch<std::uint16_t>(m * w.k_padded))
                           : static_cast<void*>(scratch<float>(m * w.k_padded));
        const auto prepare = [&](std::int64_t r0, std::int64_t r1) {
            if (avx512) {
                cpu::prepare_bf16_avx512(x, x_stride, w.k, w.k_padded, r0, r1,
                                         static_cast<std::uint16_t*>(dst));
            } else {
                cpu::prepare_bf16_avx2(x, x_stride, w.k, w.k_padded, r0, r1,
                                       static_cast<float*>(dst));
            }
        };
        if (m * w.k >= kParallelPrepareElements) {
            split(pool, m, 1, prepare);
        } else {
            prepare(0, m);
        }
        op.a = dst;
    }

    const auto tile = avx512 ? &cpu::matmul_tile_avx512 : &cpu::matmul_tile_avx2;
    const std::int64_t group = avx512 ? cpu::panel_group_avx512() : cpu::panel_group_avx2();
    const int n_workers = pool == nullptr ? 1 : pool->size();
    const std::int64_t n_groups = (n_panels + group - 1) / group;
    // Split the weight (each thread streams its own part once) unless there are too few
    // panel groups to balance and enough rows to split instead.
    if (n_groups >= 4 * n_workers || m < 2 * kRowAlign * n_workers) {
        split(pool, n_panels, group, [&](std::int64_t p0, std::int64_t p1) {
            tile(op, cpu::OutputTile{0, m, p0, p1});
        });
    } else {
        split(pool, m, kRowAlign, [&](std::int64_t r0, std::int64_t r1) {
            tile(op, cpu::OutputTile{r0, r1, 0, n_panels});
        });
    }
}

void matmul_reference(const float* x, std::int64_t m, const float* w, std::int64_t n,
                      std::int64_t k, float* y) {
    for (std::int64_t r = 0; r < m; ++r) {
        for (std::int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (std::int64_t c = 0; c < k; ++c) {
                acc += static_cast<double>(x[r * k + c]) * static_cast<double>(w[j * k + c]);
            }
            y[r * n + j] = static_cast<float>(acc);
        }
    }
}

}  // namespace tessera::kernels
