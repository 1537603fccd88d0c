// kernels/mla_attention_bench.cpp — MLA's absorbed decode attention on DeepSeek's shape: a
// batch of sequences, one new token each, over a bf16 latent cache with one pool per layer (as
// the model keeps it), so a step reads every layer's cache from memory as a real decode step
// does. Prints one JSON line per kernel path and thread count: milliseconds per step (all
// layers), the multiply-add rate (heads × (latent + rope + latent) per key) and the cache
// bytes read per second, next to the machine's read bandwidth.
//
// Usage: mla_attention_bench [--batch=1] [--context=4096] [--layers=8] [--heads=16]
//                            [--latent=512] [--rope=64]

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
#include "tensor/dtype.h"

namespace {

struct Options {
    std::int64_t batch = 1, context = 4096, layers = 8, heads = 16, latent = 512, rope = 64;
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
    std::vector<AlignedBuffer> pools;
    for (std::int64_t l = 0; l < o.layers; ++l) {
        pools.emplace_back(static_cast<std::size_t>(slots * width) * sizeof(std::uint16_t));
        auto* c = pools.back().as<std::uint16_t>();
        for (std::int64_t i = 0; i < slots * width; ++i) c[i] = f32_to_bf16(std::sin(0.001f * static_cast<float>(i + l)));
    }
    std::vector<std::int32_t> slot_table(slots);  // sequence s holds rows [s · context, (s + 1) · context)
    for (std::int64_t i = 0; i < slots; ++i) slot_table[i] = static_cast<std::int32_t>(i);
    std::vector<float> q(o.batch * o.heads * width, 0.01f), out(o.batch * o.heads * o.latent);
    const kernels::MlaShape shape{o.heads, o.latent, o.rope, 0.07f};
    const double bytes_per_step = static_cast<double>(slots * width) * 2.0 * static_cast<double>(o.layers);
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
                        batch.push_back({q.data() + s * o.heads * width, pools[l].data(), DType::kBF16,
                                         slot_table.data() + s * o.context, 1, o.context - 1,
                                         out.data() + s * o.heads * o.latent});
                    kernels::mla_attention_absorbed(batch, shape, &pool, isa);
                }
            });
            std::printf(
                "{\"bench\":\"mla_decode_attention\",\"kernels\":\"%s\",\"threads\":%d,\"batch\":%lld,\"context\":%lld,"
                "\"layers\":%lld,\"heads\":%lld,\"step_ms\":%.3f,\"gflop_per_s\":%.1f,\"cache_mb\":%.1f,"
                "\"cache_gbs\":%.2f,\"machine_read_gbs\":%.2f}\n",
                isa == kernels::Isa::kAvx2 ? "avx2" : "avx512", threads, static_cast<long long>(o.batch),
                static_cast<long long>(o.context), static_cast<long long>(o.layers), static_cast<long long>(o.heads),
                median * 1e3, flops_per_step / median * 1e-9, bytes_per_step / 1e6, bytes_per_step / median * 1e-9,
                bench::measure_read_bandwidth_gbs(&pool));
            std::fflush(stdout);
        }
    }
    return 0;
}
