// kernels/attention_bench.cpp — decode attention throughput on a small LLM's shape: a batch
// of sequences, one new token each, over a bf16 paged cache with one pool per layer (as the
// model keeps it), so a step reads every layer's cache from memory as a real decode step
// does. Prints one JSON line per thread count: milliseconds per step (all layers) and the
// cache bytes read per second, next to the machine's read bandwidth.
//
// Usage: attention_bench [--batch=16] [--context=352] [--layers=28] [--heads=16]
//                        [--kv-heads=8] [--head-dim=128] [--layout=contiguous|interleaved|serving]
//                        [--decoded=96]
// Layouts: each sequence's positions in one run of slots (contiguous); positions of the
// batch alternating (interleaved); or as a page-size-1 server leaves them (serving): the
// prompt in one run, the last --decoded positions taken one per decode step by every
// sequence in turn.

#include <algorithm>
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
#include "kernels/attention.h"
#include "tensor/dtype.h"

namespace {

struct Options {
    std::int64_t batch = 16, context = 352, layers = 28, heads = 16, kv_heads = 8, head_dim = 128;
    std::string layout = "contiguous";
    std::int64_t decoded = 96;  // serving layout: positions added one decode step at a time
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        const auto number = [&](std::string_view key, std::int64_t* out) {
            return tessera::bench::number_flag(arg, key, out);
        };
        if (number("--batch=", &o.batch) || number("--context=", &o.context) || number("--layers=", &o.layers) ||
            number("--heads=", &o.heads) || number("--kv-heads=", &o.kv_heads) ||
            number("--head-dim=", &o.head_dim) || number("--decoded=", &o.decoded))
            continue;
        if (arg == "--layout=interleaved" || arg == "--layout=contiguous" || arg == "--layout=serving") {
            o.layout = std::string(arg.substr(9));
        } else {
            std::fprintf(stderr, "attention_bench: unknown argument %s\n", argv[i]);
            std::exit(2);
        }
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace tessera;
    const Options o = parse(argc, argv);
    const std::int64_t row = o.kv_heads * o.head_dim;
    const std::int64_t slots = o.batch * o.context;
    // One pool per layer, allocated as the engine's KV pool is.
    std::vector<AlignedBuffer> k_pools, v_pools;
    for (std::int64_t l = 0; l < o.layers; ++l) {
        k_pools.emplace_back(static_cast<std::size_t>(slots * row) * sizeof(std::uint16_t));
        v_pools.emplace_back(static_cast<std::size_t>(slots * row) * sizeof(std::uint16_t));
        auto* k = k_pools.back().as<std::uint16_t>();
        auto* v = v_pools.back().as<std::uint16_t>();
        for (std::int64_t i = 0; i < slots * row; ++i) {
            k[i] = f32_to_bf16(std::sin(0.001f * static_cast<float>(i + l)));
            v[i] = f32_to_bf16(std::cos(0.001f * static_cast<float>(i + l)));
        }
    }
    std::vector<std::int32_t> slot_table(slots);
    const std::int64_t prompt = o.layout == "serving" ? std::max<std::int64_t>(0, o.context - o.decoded) : 0;
    for (std::int64_t s = 0; s < o.batch; ++s)
        for (std::int64_t p = 0; p < o.context; ++p) {
            std::int64_t slot = s * o.context + p;
            if (o.layout == "interleaved") slot = p * o.batch + s;
            if (o.layout == "serving")
                slot = p < prompt ? s * prompt + p : o.batch * prompt + (p - prompt) * o.batch + s;
            slot_table[s * o.context + p] = static_cast<std::int32_t>(slot);
        }
    std::vector<float> q(o.batch * o.heads * o.head_dim, 0.1f), out(q.size());
    const kernels::AttentionShape shape{o.heads, o.kv_heads, o.head_dim,
                                        1.0f / std::sqrt(static_cast<float>(o.head_dim))};
    const double bytes_per_step = 2.0 * static_cast<double>(slots * row) * 2.0 * static_cast<double>(o.layers);

    for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        const double median = bench::median_step_seconds([&] {
            for (std::int64_t l = 0; l < o.layers; ++l) {
                std::vector<kernels::AttentionArgs> batch;
                for (std::int64_t s = 0; s < o.batch; ++s) {
                    kernels::AttentionArgs a;
                    a.q = q.data() + s * o.heads * o.head_dim;
                    a.k = k_pools[l].as<std::uint16_t>();
                    a.v = v_pools[l].as<std::uint16_t>();
                    a.out = out.data() + s * o.heads * o.head_dim;
                    a.n_q = 1;
                    a.start_pos = o.context - 1;
                    a.kv_slots = slot_table.data() + s * o.context;
                    a.kv_dtype = DType::kBF16;
                    batch.push_back(a);
                }
                kernels::attention_batch(batch, shape, &pool);
            }
        });
        std::printf(
            "{\"bench\":\"decode_attention\",\"threads\":%d,\"batch\":%lld,\"context\":%lld,\"layers\":%lld,"
            "\"layout\":\"%s\",\"step_ms\":%.2f,\"kv_mb\":%.1f,\"kv_gbs\":%.2f,\"machine_read_gbs\":%.2f}\n",
            threads, static_cast<long long>(o.batch), static_cast<long long>(o.context),
            static_cast<long long>(o.layers), o.layout.c_str(), median * 1e3,
            bytes_per_step / 1e6, bytes_per_step / median * 1e-9, bench::measure_read_bandwidth_gbs(&pool));
        std::fflush(stdout);
    }
    return 0;
}
