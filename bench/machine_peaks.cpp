// bench/machine_peaks.cpp — memory bandwidth and multiply-add peak measurements
// (see machine_peaks.h). The AVX-512 loops live in machine_peaks_avx512.cpp.

#include "bench/machine_peaks.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "bench/machine_peaks_impl.h"
#include "kernels/isa.h"

namespace tessera::bench {

namespace {

constexpr std::size_t kTriadArrayBytes = std::size_t{256} << 20;
constexpr std::size_t kReadArrayBytes = std::size_t{512} << 20;
constexpr int kBandwidthRepetitions = 5;
constexpr int kPeakRepetitions = 5;
constexpr std::int64_t kPeakIterations = 4'000'000;

// Calls fn(worker, n_workers) on every thread of the pool, or once inline.
template <typename F>
void on_all_threads(ThreadPool* pool, F&& fn) {
    if (pool == nullptr) {
        fn(0, 1);
    } else {
        pool->run(fn);
    }
}

template <typename F>
double best_seconds(int repetitions, F&& fn) {
    double best = 1e30;
    for (int r = 0; r < repetitions; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    return best;
}

// [begin, end) of worker w's share of n elements, split on 64-byte lines (8 elements).
std::pair<std::size_t, std::size_t> share(std::size_t n, int worker, int n_workers) {
    const std::size_t lines = n / 8;
    return {lines * worker / n_workers * 8,
            worker + 1 == n_workers ? n : lines * (worker + 1) / n_workers * 8};
}

constexpr int kAvx2Chains = 12;

double run_fma256_chains(std::int64_t iterations) {
    __m256 acc[kAvx2Chains];
#pragma GCC unroll 12
    for (int c = 0; c < kAvx2Chains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
    const __m256 a = _mm256_set1_ps(0.999999f);
    const __m256 b = _mm256_set1_ps(1e-7f);
    for (std::int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
        for (int c = 0; c < kAvx2Chains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
        __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]));
    }
    __m256 sum = acc[0];
#pragma GCC unroll 12
    for (int c = 1; c < kAvx2Chains; ++c) sum = _mm256_add_ps(sum, acc[c]);
    alignas(32) float out[8];
    _mm256_store_ps(out, sum);
    volatile float sink = out[0];
    (void)sink;
    return static_cast<double>(iterations) * kAvx2Chains * 16.0;
}

// Best GFLOP/s of `chains(iterations)` run on every thread at once.
double peak_gflops(ThreadPool* pool, double (*chains)(std::int64_t)) {
    chains(kPeakIterations / 8);  // warm up: clocks and the AVX-512 unit
    std::atomic<double> flop{0.0};
    double best = 0.0;
    for (int r = 0; r < kPeakRepetitions; ++r) {
        flop = 0.0;
        const double seconds = best_seconds(1, [&] {
            on_all_threads(pool, [&](int, int) {
                const double done = chains(kPeakIterations);
                double seen = flop.load();
                while (!flop.compare_exchange_weak(seen, seen + done)) {
                }
            });
        });
        best = std::max(best, flop.load() / seconds * 1e-9);
    }
    return best;
}

bool has_avx512_bf16() { return kernels::isa_supported(kernels::Isa::kAvx512Bf16); }

}  // namespace

double measure_triad_bandwidth_gbs(ThreadPool* pool) {
    const std::size_t n = kTriadArrayBytes / sizeof(double);
    AlignedBuffer a_buf(kTriadArrayBytes), b_buf(kTriadArrayBytes), c_buf(kTriadArrayBytes);
    double* a = a_buf.as<double>();
    double* b = b_buf.as<double>();
    double* c = c_buf.as<double>();
    // The buffers come zeroed (pages touched); give b and c values, on the threads that
    // will read them.
    on_all_threads(pool, [&](int w, int n_w) {
        const auto [begin, end] = share(n, w, n_w);
        for (std::size_t i = begin; i < end; ++i) {
            b[i] = 1.0;
            c[i] = 2.0;
        }
    });
    const double scalar = 3.0;
    const double seconds = best_seconds(kBandwidthRepetitions, [&] {
        on_all_threads(pool, [&](int w, int n_w) {
            const auto [begin, end] = share(n, w, n_w);
            for (std::size_t i = begin; i < end; ++i) a[i] = b[i] + scalar * c[i];
        });
    });
    volatile double sink = a[n / 2];
    (void)sink;
    return 3.0 * static_cast<double>(kTriadArrayBytes) / seconds * 1e-9;
}

double measure_read_bandwidth_gbs(ThreadPool* pool) {
    const std::size_t n = kReadArrayBytes / sizeof(std::uint64_t);
    AlignedBuffer buf(kReadArrayBytes);
    std::uint64_t* data = buf.as<std::uint64_t>();
    on_all_threads(pool, [&](int w, int n_w) {
        const auto [begin, end] = share(n, w, n_w);
        for (std::size_t i = begin; i < end; ++i) data[i] = i;
    });
    std::atomic<std::uint64_t> total{0};
    const double seconds = best_seconds(kBandwidthRepetitions, [&] {
        on_all_threads(pool, [&](int w, int n_w) {
            const auto [begin, end] = share(n, w, n_w);
            // Integer sums vectorise without reassociation flags; 4 accumulators keep
            // several lines in flight.
            std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (std::size_t i = begin; i + 4 <= end; i += 4) {
                s0 += data[i];
                s1 += data[i + 1];
                s2 += data[i + 2];
                s3 += data[i + 3];
            }
            total.fetch_add(s0 + s1 + s2 + s3, std::memory_order_relaxed);
        });
    });
    volatile std::uint64_t sink = total.load();
    (void)sink;
    return static_cast<double>(kReadArrayBytes) / seconds * 1e-9;
}

double measure_peak_bf16_gflops(ThreadPool* pool) {
    if (kernels::active_isa() == kernels::Isa::kAmx) return measure_peak_amx_bf16_gflops(pool);
    return measure_peak_dpbf16_gflops(pool);
}

double measure_peak_dpbf16_gflops(ThreadPool* pool) {
    return peak_gflops(pool, has_avx512_bf16() ? &detail::run_dpbf16_chains : &run_fma256_chains);
}

double measure_peak_amx_bf16_gflops(ThreadPool* pool) {
    if (!kernels::isa_supported(kernels::Isa::kAmx)) return 0.0;
    // A tile multiply does 256 times the work of one _mm512_dpbf16_ps: fewer iterations.
    return peak_gflops(pool, [](std::int64_t iterations) { return detail::run_amx_chains(iterations / 16); });
}

double measure_amx_l1_tile_loop_gflops(ThreadPool* pool) {
    if (!kernels::isa_supported(kernels::Isa::kAmx)) return 0.0;
    // A K step of the loop is four tile multiplies: eight per call round is 128 times fewer.
    return peak_gflops(pool, [](std::int64_t iterations) { return detail::run_amx_l1_tile_loop(iterations / 128); });
}

double measure_peak_f32_gflops(ThreadPool* pool) {
    return peak_gflops(pool, has_avx512_bf16() ? &detail::run_fma512_chains : &run_fma256_chains);
}

}  // namespace tessera::bench
