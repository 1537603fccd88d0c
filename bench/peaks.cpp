// bench/peaks — the machine's limits the model benchmarks are judged against, for scripts
// that need them next to their own measurements: read and triad bandwidth and the bf16
// multiply-add peak on N threads. Prints one JSON line.
// Usage: bench_peaks [--threads 2]

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "bench/machine_peaks.h"
#include "kernels/isa.h"

using namespace tessera;

int main(int argc, char** argv) {
    int threads = 2;
    for (int i = 1; i < argc; ++i) {
        if (std::string_view(argv[i]) == "--threads" && i + 1 < argc) {
            threads = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: bench_peaks [--threads N]\n");
            return 2;
        }
    }
    if (threads < 1) {
        std::fprintf(stderr, "bench_peaks: --threads must be at least 1\n");
        return 2;
    }
    ThreadPool pool(threads);
    const nlohmann::json j = {
        {"bench", "peaks"},
        {"threads", threads},
        {"read_bandwidth_gb_per_s", bench::measure_read_bandwidth_gbs(&pool)},
        {"triad_bandwidth_gb_per_s", bench::measure_triad_bandwidth_gbs(&pool)},
        {"peak_bf16_gflops", bench::measure_peak_bf16_gflops(&pool)},
        {"peak_dpbf16_gflops", bench::measure_peak_dpbf16_gflops(&pool)},
        {"peak_amx_bf16_gflops", bench::measure_peak_amx_bf16_gflops(&pool)},
        {"amx_l1_tile_loop_gflops", bench::measure_amx_l1_tile_loop_gflops(&pool)},
        {"kernels", std::string(kernels::isa_name(kernels::active_isa()))},
    };
    std::printf("%s\n", j.dump().c_str());
    return 0;
}
