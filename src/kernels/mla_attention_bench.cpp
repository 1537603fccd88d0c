// kernels/mla_attention_bench.cpp — MLA's absorbed decode attention on DeepSeek's shape: a
// batch of sequences, one new token each, over a bf16 latent cache with one pool per layer (as
// the model keeps it), so a step reads every layer's cache from memory as a real decode step
// does. Prints one JSON line per kernel path and thread count: milliseconds per step (all
// layers), the multiply-add rate (heads × (latent + rope + latent) per key) and the cache
// bytes read per second, next to the machine's read bandwidth.
//
// Usage: mla_attention_bench [--batch=1] [--context=4096] [--layers=8] [--heads=16]
//                            [--latent=512] [--rope=64] [--kv-dtype=bf16|fp8_e4m3|fp8_e5m2]

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "bench/kernel_bench_support.h"
#include "bench/machine_peaks.h"
#include "kernels/isa.h"
#include "kernels/mla_attention.h"
#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace {

struct Options {
    std::int64_t batch = 1, context = 4096, layers = 8, heads = 16, latent = 512, rope = 64;
    tessera::DType kv_dtype = tessera::DType::kBF16;
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        const auto number = [&](std::string_view key, std::int64_t* out) {
            return tessera::bench::number_flag(arg, key, out);
        };
        if (number("--batch=", &o.batch) || number("--context=", &o.context) || number("--layers=", &o.layers) ||
            number("--heads=", &o.heads) || number("--latent=", &o.latent) || number("--rope=", &o.rope))
            continue;
        if (arg == "--kv-dtype=bf16" || arg == "--kv-dtype=fp8_e4m3" || arg == "--kv-dtype=fp8_e5m2") {
            o.kv_dtype = arg == "--kv-dtype=bf16"       ? tessera::DType::kBF16
                         : arg == "--kv-dtype=fp8_e4m3" ? tessera::DType::kF8E4M3
                                                        : tessera::DType::kF8E5M2;
            continue;
        }
        std::fprintf(stderr, "mla_attention_bench: unknown argument %s\n", argv[i]);
        std::exit(2);
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace tessera;
    const Options o = parse(argc, argv);
    const std::int64_t width = o.latent + o.rope;
    const std::int64_t slots = o.batch * o.context;
    const std::int64_t values = slots * width;
    std::vector<AlignedBuffer> pools;
    std::vector<float> row_values(static_cast<std::size_t>(values));
    for (std::int64_t l = 0; l < o.layers; ++l) {
        pools.emplace_back(static_cast<std::size_t>(values) * dtype_size(o.kv_dtype));
        for (std::int64_t i = 0; i < values; ++i) row_values[i] = std::sin(0.001f * static_cast<float>(i + l));
        kernels::store_kv_row(row_values.data(), pools.back().data(), 0, values, o.kv_dtype);
    }
    std::vector<std::int32_t> slot_table(slots);  // sequence s holds rows [s · context, (s + 1) · context)
    for (std::int64_t i = 0; i < slots; ++i) slot_table[i] = static_cast<std::int32_t>(i);
    std::vector<float> q(o.batch * o.heads * width, 0.01f), out(o.batch * o.heads * o.latent);
    const kernels::MlaShape shape{o.heads, o.latent, o.rope, 0.07f};
    const double bytes_per_step =
        static_cast<double>(values * dtype_size(o.kv_dtype)) * static_cast<double>(o.layers);
    const double flops_per_step =
        2.0 * static_cast<double>(slots * o.heads * (width + o.latent)) * static_cast<double>(o.layers);

    std::vector<kernels::Isa> paths{kernels::Isa::kAvx2};
    if (kernels::isa_supported(kernels::Isa::kAvx512Bf16)) paths.push_back(kernels::Isa::kAvx512Bf16);
    for (const kernels::Isa isa : paths) {
        for (int threads : {1, 2}) {
            ThreadPool pool(threads);
            const double median = bench::median_step_seconds([&] {
                for (std::int64_t l = 0; l < o.layers; ++l) {
                    std::vector<kernels::MlaAbsorbedArgs> batch;
                    for (std::int64_t s = 0; s < o.batch; ++s)
                        batch.push_back({q.data() + s * o.heads * width, pools[l].data(), o.kv_dtype,
                                         slot_table.data() + s * o.context, 1, o.context - 1,
                                         out.data() + s * o.heads * o.latent});
                    kernels::mla_attention_absorbed(batch, shape, &pool, isa);
                }
            });
            std::printf(
                "{\"bench\":\"mla_decode_attention\",\"kernels\":\"%s\",\"kv_dtype\":\"%s\",\"threads\":%d,\"batch\":%lld,\"context\":%lld,"
                "\"layers\":%lld,\"heads\":%lld,\"step_ms\":%.3f,\"gflop_per_s\":%.1f,\"cache_mb\":%.1f,"
                "\"cache_gbs\":%.2f,\"machine_read_gbs\":%.2f}\n",
                isa == kernels::Isa::kAvx2 ? "avx2" : "avx512", std::string(dtype_name(o.kv_dtype)).c_str(), threads, static_cast<long long>(o.batch),
                static_cast<long long>(o.context), static_cast<long long>(o.layers), static_cast<long long>(o.heads),
                median * 1e3, flops_per_step / median * 1e-9, bytes_per_step / 1e6, bytes_per_step / median * 1e-9,
                bench::measure_read_bandwidth_gbs(&pool));
            std::fflush(stdout);
        }
    }
    return 0;
}
