// kernels/matmul_bench.cpp — throughput of kernels::matmul on the linear-layer shapes of a
// small LLM, one JSON line per measurement (GFLOP/s and weight GB/s), plus one line of
// machine peaks to compare with. Decode (m = 1) cycles through enough copies of the weight
// to defeat the L3 cache, as a real decode step does, and so does a 16-row decode batch;
// prefill (m = 512, and 4096: a batch of 16 prompts of 256 tokens) reuses one copy, unless
// --cold asks for the copies at every m (an MoE expert's weight is read once per layer).
// --gated times a bf16 gated MLP instead (the small presets' dense MLP and expert), in one call
// (matmul_gated_mlp) against its two matmuls through a buffer, alternating within one run.
//
// Usage: matmul_bench [--isa=amx|avx512|avx2|reference] [--m=N (any)] [--n=N] [--dtype=bf16|f32|fp8_e4m3]
//                     [--threads=N] [--no-peaks] [--cold] [--gated]

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "bench/machine_peaks.h"
#include "kernels/matmul.h"
#include "tensor/fp8_blocks.h"

namespace tessera::kernels {
namespace {

constexpr std::size_t kColdBytes = std::size_t{512} << 20;  // > 16 × the 32 MB L3
constexpr int kMaxColdCopies = 64;
constexpr std::int64_t kDecodeRows = 16;  // m up to this: decode batches, weights from memory
constexpr double kMinSeconds = 0.4;
constexpr int kMinRepetitions = 3;

struct Options {
    Isa isa = active_isa();
    std::int64_t only_m = 0;
    std::string only_dtype;
    std::int64_t only_n = 0;
    int only_threads = 0;
    bool peaks = true;
    bool cold = false;  // weights from memory at every m, as an MoE expert's between uses
    bool gated = false;
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        const auto value = [&](std::string_view key) -> std::string_view {
            return arg.substr(0, key.size()) == key ? arg.substr(key.size()) : std::string_view();
        };
        if (arg == "--no-peaks") {
            o.peaks = false;
        } else if (arg == "--cold") {
            o.cold = true;
        } else if (arg == "--gated") {
            o.gated = true;
        } else if (auto v = value("--m="); !v.empty()) {
            o.only_m = std::stoll(std::string(v));
        } else if (auto v = value("--n="); !v.empty()) {
            o.only_n = std::stoll(std::string(v));
        } else if (auto v = value("--dtype="); !v.empty()) {
            o.only_dtype = v;
        } else if (auto v = value("--threads="); !v.empty()) {
            o.only_threads = std::stoi(std::string(v));
        } else if (auto v = value("--isa="); !v.empty()) {
            for (Isa isa : {Isa::kReference, Isa::kAvx2, Isa::kAvx512Bf16, Isa::kAmx}) {
                if (v == isa_name(isa)) o.isa = isa;
            }
        } else {
            std::fprintf(stderr, "matmul_bench: unknown argument %s\n", argv[i]);
            std::exit(2);
        }
    }
    return o;
}

// Cheap deterministic values in [-1, 1): generating 150M weights with <random> takes seconds.
void fill(std::vector<float>& v, std::uint64_t seed) {
    std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (float& e : v) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        e = static_cast<float>(static_cast<std::int32_t>(s >> 32)) * (1.0f / 2147483648.0f);
    }
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void run_shape(const Options& opt, std::int64_t k, std::int64_t n, DType dtype,
               const std::vector<float>& w_f32, ThreadPool* pools[2]) {
    std::vector<PackedWeight> copies;
    if (is_fp8(dtype)) {
        const Fp8Blocks q = quantize_fp8_blocks(w_f32.data(), n, k, dtype);
        std::vector<float> row_scales(static_cast<std::size_t>(n * q.scale_cols()));
        for (std::int64_t j = 0; j < n; ++j)
            for (std::int64_t b = 0; b < q.scale_cols(); ++b) row_scales[j * q.scale_cols() + b] = q.scale(j, b * q.block);
        copies.push_back(pack_fp8_weight(q.codes.data(), dtype, n, k, row_scales.data()));
    } else {
        copies.push_back(pack_weight(w_f32.data(), DType::kF32, n, k, dtype));
    }
    const std::size_t bytes = copies[0].bytes();

    // The decode and prefill sizes, or only --m (any m: decode batches of 2-15 rows too).
    const std::vector<std::int64_t> ms =
        opt.only_m != 0 ? std::vector<std::int64_t>{opt.only_m} : std::vector<std::int64_t>{1, 16, 512, 4096};
    for (std::int64_t m : ms) {
        const bool cold = opt.cold || m <= kDecodeRows;
        if (cold) {
            // Copies share the data pattern; only the addresses matter for caching.
            const std::size_t want =
                std::min<std::size_t>(kMaxColdCopies, (kColdBytes + bytes - 1) / bytes);
            while (copies.size() < want) {
                PackedWeight c;
                c.dtype = copies[0].dtype;
                c.n = n;
                c.k = k;
                c.n_padded = copies[0].n_padded;
                c.k_padded = copies[0].k_padded;
                c.data = AlignedBuffer(copies[0].data.size());
                std::memcpy(c.data.data(), copies[0].data.data(), c.data.size());
                c.scales = AlignedBuffer(copies[0].scales.size());
                if (c.scales.size() > 0) std::memcpy(c.scales.data(), copies[0].scales.data(), c.scales.size());
                copies.push_back(std::move(c));
            }
        }
        std::vector<float> x(m * k);
        fill(x, 7);
        std::vector<float> y(m * n);
        for (int t = 0; t < 2; ++t) {
            const int threads = t + 1;
            if (opt.only_threads != 0 && threads != opt.only_threads) continue;
            ThreadPool* pool = pools[t];
            const std::size_t n_copies = cold ? copies.size() : 1;
            std::size_t next = 0;
            matmul(x.data(), m, copies[0], y.data(), pool, opt.isa);  // warm up
            double best = 1e30;
            const double start = now_seconds();
            int reps = 0;
            while (reps < kMinRepetitions || now_seconds() - start < kMinSeconds) {
                // Per call: small-m calls are short, so time a batch across all copies.
                const std::size_t batch = cold ? n_copies : 1;
                const double t0 = now_seconds();
                for (std::size_t b = 0; b < batch; ++b) {
                    matmul(x.data(), m, copies[next], y.data(), pool, opt.isa);
                    next = (next + 1) % n_copies;
                }
                best = std::min(best, (now_seconds() - t0) / static_cast<double>(batch));
                ++reps;
            }
            const double gflops = 2.0 * m * n * k / best * 1e-9;
            const double gbs = static_cast<double>(bytes) / best * 1e-9;
            std::printf(
                "{\"bench\":\"matmul\",\"isa\":\"%s\",\"dtype\":\"%s\",\"m\":%lld,\"k\":%lld,"
                "\"n\":%lld,\"threads\":%d,\"us\":%.1f,\"gflops\":%.1f,\"weight_gbs\":%.2f,"
                "\"weight_mb\":%.1f,\"cold_copies\":%zu}\n",
                std::string(isa_name(opt.isa)).c_str(), std::string(dtype_name(dtype)).c_str(),
                static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n),
                threads, best * 1e6, gflops, gbs, bytes / 1e6, n_copies);
            std::fflush(stdout);
        }
    }
}

// A gated MLP of `intermediate` features on `hidden`: matmul_gated_mlp against matmul then
// matmul_silu_and_mul, each the best of its calls, the two taking turns. Decode sizes (or
// --cold) cycle through copies of the weights, as run_shape does.
void run_gated(const Options& opt, std::int64_t hidden, std::int64_t intermediate, ThreadPool* pools[2]) {
    std::vector<float> gate_up_f32(static_cast<std::size_t>(2 * intermediate * hidden));
    std::vector<float> down_f32(static_cast<std::size_t>(hidden * intermediate));
    fill(gate_up_f32, 11);
    fill(down_f32, 12);
    struct Weights {
        PackedWeight gate_up, down;
    };
    std::vector<Weights> copies;
    const auto add_copy = [&] {
        copies.push_back({pack_weight(gate_up_f32.data(), DType::kF32, 2 * intermediate, hidden, DType::kBF16),
                          pack_weight(down_f32.data(), DType::kF32, hidden, intermediate, DType::kBF16)});
    };
    add_copy();
    const std::size_t bytes = copies[0].gate_up.bytes() + copies[0].down.bytes();
    const std::vector<std::int64_t> ms =
        opt.only_m != 0 ? std::vector<std::int64_t>{opt.only_m} : std::vector<std::int64_t>{1, 16, 512};
    for (std::int64_t m : ms) {
        const bool cold = opt.cold || m <= kDecodeRows;
        while (cold && copies.size() < std::min<std::size_t>(kMaxColdCopies, (kColdBytes + bytes - 1) / bytes))
            add_copy();
        std::vector<float> x(static_cast<std::size_t>(m * hidden));
        fill(x, 13);
        std::vector<float> rows(static_cast<std::size_t>(m * 2 * intermediate));
        std::vector<float> y(static_cast<std::size_t>(m * hidden));
        for (int t = 0; t < 2; ++t) {
            if (opt.only_threads != 0 && t + 1 != opt.only_threads) continue;
            ThreadPool* pool = pools[t];
            const std::size_t n_copies = cold ? copies.size() : 1;
            std::size_t next = 0;
            const auto time_batch = [&](bool gated) {
                const double t0 = now_seconds();
                for (std::size_t b = 0; b < n_copies; ++b) {
                    const Weights& w = copies[next];
                    next = (next + 1) % n_copies;
                    if (gated) {
                        matmul_gated_mlp(x.data(), m, nullptr, 0.0f, w.gate_up, w.down, rows.data(), y.data(), pool,
                                         opt.isa);
                    } else {
                        matmul(x.data(), m, w.gate_up, rows.data(), pool, opt.isa);
                        matmul_silu_and_mul(rows.data(), m, w.down, y.data(), pool, opt.isa);
                    }
                }
                return (now_seconds() - t0) / static_cast<double>(n_copies);
            };
            time_batch(true);  // warm up
            time_batch(false);
            double best_gated = 1e30, best_two = 1e30;
            const double start = now_seconds();
            for (int reps = 0; reps < kMinRepetitions || now_seconds() - start < 2 * kMinSeconds; ++reps) {
                best_gated = std::min(best_gated, time_batch(true));
                best_two = std::min(best_two, time_batch(false));
            }
            std::printf(
                "{\"bench\":\"gated_mlp\",\"isa\":\"%s\",\"m\":%lld,\"hidden\":%lld,\"intermediate\":%lld,"
                "\"threads\":%d,\"gated_us\":%.1f,\"two_matmuls_us\":%.1f,\"gated_over_two_matmuls\":%.3f,"
                "\"cold_copies\":%zu}\n",
                std::string(isa_name(opt.isa)).c_str(), static_cast<long long>(m), static_cast<long long>(hidden),
                static_cast<long long>(intermediate), t + 1, best_gated * 1e6, best_two * 1e6, best_gated / best_two,
                n_copies);
            std::fflush(stdout);
        }
    }
}

}  // namespace
}  // namespace tessera::kernels

int main(int argc, char** argv) {
    using namespace tessera;
    using namespace tessera::kernels;
    const Options opt = parse(argc, argv);
    ThreadPool pool1(1);
    ThreadPool pool2(2);
    ThreadPool* pools[2] = {&pool1, &pool2};

    if (opt.peaks) {
        for (int t = 0; t < 2; ++t) {
            if (opt.only_threads != 0 && t + 1 != opt.only_threads) continue;
            std::printf(
                "{\"bench\":\"machine_peaks\",\"threads\":%d,\"read_gbs\":%.2f,"
                "\"triad_gbs\":%.2f,\"peak_bf16_gflops\":%.1f,\"peak_f32_gflops\":%.1f}\n",
                t + 1, bench::measure_read_bandwidth_gbs(pools[t]),
                bench::measure_triad_bandwidth_gbs(pools[t]),
                bench::measure_peak_bf16_gflops(pools[t]),
                bench::measure_peak_f32_gflops(pools[t]));
            std::fflush(stdout);
        }
    }

    if (opt.gated) {
        // The small presets' dense MLP and Qwen3-MoE expert.
        for (const auto& [hidden, intermediate] : {std::pair<std::int64_t, std::int64_t>{1024, 3072}, {1024, 768}})
            run_gated(opt, hidden, intermediate, pools);
        return 0;
    }
    const std::pair<std::int64_t, std::int64_t> shapes[] = {
        {1024, 2048}, {1024, 3072}, {3072, 1024}, {1024, 151936},
        // The small preset's fused projections: qkv, o, gate_up.
        {1024, 4096}, {2048, 1024}, {1024, 6144},
        // The Qwen3-MoE small preset's expert: gate_up, down.
        {1024, 768}, {384, 1024}};
    for (const auto& [k, n] : shapes) {
        if (opt.only_n != 0 && n != opt.only_n) continue;
        std::vector<float> w(static_cast<std::size_t>(n * k));
        fill(w, static_cast<std::uint64_t>(n * 31 + k));
        for (DType dtype : {DType::kBF16, DType::kF32, DType::kF8E4M3}) {
            if (!opt.only_dtype.empty() && opt.only_dtype != dtype_name(dtype)) continue;
            run_shape(opt, k, n, dtype, w, pools);
        }
    }
    return 0;
}
