// bench/prefill — prompt processing speed against the machine's multiply-add peak.
// FLOPs counted are what the forward must compute: every linear layer for each prompt token,
// causal attention, and the LM head for the last token. Prints one JSON line.
// Usage: bench_prefill --model-path DIR [--threads 2] [--prompt-len 512] [--repeats 3]

#include <chrono>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "bench/machine_peaks.h"
#include "bench/model_bench.h"
#include "kernels/isa.h"

using namespace tessera;

int main(int argc, char** argv) {
    int exit_code = 0;
    auto loaded = bench::load_bench(argc, argv, &exit_code);
    if (!loaded) return exit_code;
    const bench::BenchArgs* args = &loaded->args;
    auto* model = &loaded->model;
    const std::int64_t n = args->number("prompt-len", 512);
    const std::int64_t repeats = args->number("repeats", 3);
    ThreadPool pool(args->threads);
    models::Model& m = **model;
    const auto& c = m.config();
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) prompt[i] = static_cast<std::int32_t>((i * 7919 + 13) % c.vocab_size);
    kvcache::KvCache cache(m.kv_cache_shape(), n);
    std::vector<float> logits;
    std::vector<double> runs;
    for (std::int64_t r = 0; r < repeats + 1; ++r) {  // the first run warms caches and pages
        const auto t0 = std::chrono::steady_clock::now();
        if (!m.forward({prompt, 0, false}, cache, &pool, &logits).ok()) return 1;
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) runs.push_back(s);
    }
    double flops = static_cast<double>(n) * m.linear_flops_per_token() +
                   2.0 * static_cast<double>(c.hidden_size) * c.vocab_size;
    for (std::int64_t p = 0; p < n; ++p) flops += m.attention_flops_at(p);
    const double seconds = bench::median(runs);
    const bool bf16 = m.compute_dtype() == DType::kBF16;
    const double peak = bf16 ? bench::measure_peak_bf16_gflops(&pool) : bench::measure_peak_f32_gflops(&pool);
    const double gflops = flops / seconds / 1e9;
    nlohmann::json j = {
        {"bench", "prefill"},
        {"model", c.architecture},
        {"dtype", dtype_name(m.compute_dtype())},
        {"linear_weight_dtype", dtype_name(m.linear_weight_dtype())},
        {"kernels", kernels::isa_name(kernels::active_isa())},
        {"threads", args->threads},
        {"prompt_len", n},
        {"repeats", repeats},
        {"prefill_s", seconds},
        {"prefill_tokens_per_s", static_cast<double>(n) / seconds},
        {"gflop", flops / 1e9},
        {"gflops", gflops},
        {"peak_gflops", peak},
        {"peak_kind", !bf16 ? "f32 fma" : kernels::active_isa() == kernels::Isa::kAmx ? "bf16 AMX tiles" : "bf16 dot-product"},
        {"ratio_to_peak", gflops / peak},
    };
    if (bf16 && kernels::active_isa() == kernels::Isa::kAmx) {
        // The tile peak counts multiplies alone; a GEMM must also load its tiles.
        const double tile_loop = bench::measure_amx_l1_tile_loop_gflops(&pool);
        j["amx_l1_tile_loop_gflops"] = tile_loop;
        j["ratio_to_l1_tile_loop"] = gflops / tile_loop;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
}
