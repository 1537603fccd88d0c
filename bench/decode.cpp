// bench/decode — single-sequence decode speed against the memory-bandwidth limit.
// Each decode token streams every linear weight it uses once (MoE: only its experts) and
// reads the KV rows of its context, so tokens/s can be at most
// bandwidth / (weight_bytes_per_token + kv bytes of the context). Prints one JSON line.
// Usage: bench_decode --model-path DIR [--threads 2] [--steps 64] [--context 16] [--dtype auto]

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
    const std::int64_t steps = args->number("steps", 64);
    const std::int64_t context = args->number("context", 16);
    ThreadPool pool(args->threads);
    models::Model& m = **model;
    kvcache::KvCache cache(m.kv_cache_shape(), context + steps + 1);
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(context));
    for (std::int64_t i = 0; i < context; ++i) prompt[i] = static_cast<std::int32_t>((i * 7919 + 13) % m.config().vocab_size);
    std::vector<float> logits;
    if (!m.forward({prompt, 0, false}, cache, &pool, &logits).ok()) return 1;

    std::vector<double> step_s;
    std::int32_t token = 1;
    for (std::int64_t s = 0; s < steps; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        if (!m.forward({std::span<const std::int32_t>(&token, 1), context + s, false}, cache, &pool, &logits).ok()) return 1;
        step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        token = static_cast<std::int32_t>((token * 31 + 7) % m.config().vocab_size);
    }
    const double median_step = bench::median(step_s);
    double total = 0;
    for (double v : step_s) total += v;
    const double triad = bench::measure_triad_bandwidth_gbs(&pool);
    const double read = bench::measure_read_bandwidth_gbs(&pool);
    const double bytes = static_cast<double>(m.weight_bytes_per_token());
    const double tok_s = 1.0 / median_step;
    const double limit_triad = triad * 1e9 / bytes;
    // KV read by one step at the median context of the measured steps.
    const kvcache::KvCacheShape kv = m.kv_cache_shape();
    const double kv_read = static_cast<double>(kv.bytes_per_token()) * static_cast<double>(context + steps / 2);
    const double limit_with_kv = triad * 1e9 / (bytes + kv_read);
    nlohmann::json j = {
        {"bench", "decode"},
        {"model", m.config().architecture},
        {"dtype", dtype_name(m.compute_dtype())},
        {"linear_weight_dtype", dtype_name(m.linear_weight_dtype())},
        {"kernels", kernels::isa_name(kernels::active_isa())},
        {"threads", args->threads},
        {"context", context},
        {"steps", steps},
        {"decode_tokens_per_s", tok_s},
        {"decode_tokens_per_s_mean", static_cast<double>(steps) / total},
        {"weight_bytes_per_token", bytes},
        {"weight_gb_per_s", bytes * tok_s / 1e9},
        {"triad_bandwidth_gb_per_s", triad},
        {"read_bandwidth_gb_per_s", read},
        {"bandwidth_limit_tokens_per_s", limit_triad},
        {"ratio_to_triad_limit", tok_s / limit_triad},
        {"ratio_to_read_limit", tok_s / (read * 1e9 / bytes)},
        {"kv_bytes_per_token", kv.bytes_per_token()},
        {"kv_bytes_read_per_step", kv_read},
        {"bandwidth_limit_with_kv_tokens_per_s", limit_with_kv},
        {"ratio_to_triad_limit_with_kv", tok_s / limit_with_kv},
        // Bytes a step must read (weights and KV) per second, against the read bandwidth.
        {"ratio_to_read_limit_with_kv", tok_s * (bytes + kv_read) / (read * 1e9)},
    };
    const loader::ModelConfig& c = m.config();
    if (c.is_mla()) {
        // The same layers caching per-head K (nope + rope) and V, as plain multi-head attention.
        j["kv_bytes_per_token_mha_equivalent"] =
            kv.n_layers * c.num_attention_heads * (c.head_dim + c.mla.v_head_dim) * static_cast<std::int64_t>(dtype_size(kv.dtype));
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
}
