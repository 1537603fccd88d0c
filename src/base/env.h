#pragma once
// base/env.h — the one place environment variables are read. EnvFlags is loaded once
// (first call to env()) and is read-only afterwards; safe from any thread.

#include <optional>
#include <string>

namespace tessera {

struct EnvFlags {
    // env: TSR_KERNEL_ISA — force a kernel path: "amx" (AVX-512 BF16 + AMX tiles), "avx512"
    // (AVX-512 BF16), "avx2", "reference".
    // Empty: the best the CPU supports.
    std::string kernel_isa;
    // env: TSR_TOKENIZER_ASSETS — folder with <name>/tokenizer.json for make-model.
    std::string tokenizer_assets;
    // env: TSR_LOG_LEVEL — debug, info, warn, error.
    std::string log_level;
    // env: SGLANG_PP_LAYER_PARTITION — layer count per pipeline stage, "a,b,c,..." (one entry
    // per --pp-size stage, summing to the model's layers). Unset: the even default split.
    // Parsed and validated by dist::pp_layer_range.
    std::optional<std::string> pp_layer_partition;
    // env: SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR — how far dynamic chunking follows the fitted
    // cost model, a number in [0, 1]. Unset: 0.75. Parsed by
    // scheduler::parse_dynamic_chunking_smooth_factor.
    std::optional<std::string> dynamic_chunking_smooth_factor;
    // env: TESSERA_API_KEY — the API key `serve` requires when --api-key is not given.
    std::string api_key;
    // env: OPENAI_API_KEY — what `bench serve` sends as `Authorization: Bearer` (as SGLang's
    // bench_serving does).
    std::string openai_api_key;
    // env: SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR — where /dump_expert_distribution_record
    // writes (default /tmp, as SGLang).
    std::string expert_distribution_recorder_dir;
    // env: TSR_EPLB_FAULT_CORRUPT_TRANSFER=1 — fault injection for tests: experts moved by an
    // EPLB rebalance arrive corrupted, which the probe batch must catch (and roll back).
    bool eplb_corrupt_transfer = false;
    // env: TSR_EPLB_FAULT_FAIL_TRANSFER=1 — fault injection for tests: TP rank 1 reports the
    // transfer of a rebalance as failed; every rank must keep the old placement.
    bool eplb_fail_transfer = false;
    // env: TSR_EPLB_TRANSFER_BETWEEN_PASSES=1 — benchmarks: move a rebalance's experts on the
    // forward thread between two passes, as before transfers ran beside a pass (the A/B of
    // bench/eplb_balance.py --transfer-ab).
    bool eplb_transfer_between_passes = false;
    // env: TSR_PP_OVER_GLOO=1 — benchmarks: pipeline stages on one node pass hidden states over
    // Gloo (TCP on loopback), as before they used shared memory (the A/B of
    // bench/ab_generate.py --baseline-env).
    bool pp_over_gloo = false;
    // env: TSR_DPA_FAULT=skip:G:R or stall:G:R — fault injection for tests: the ranks of
    // attention-DP group G skip round R of the DP-attention lockstep (the others must name the
    // group), or stop joining at round R (the others must fail within --dist-timeout).
    std::string dpa_fault;
    // env: TESSERA_JOB_TOKEN — the secret the rendezvous store admits this job's processes
    // with. The launcher sets it for its ranks; set it yourself (the same on every node) for
    // multi-node jobs on a shared network (app/launcher.h job_token()).
    std::string job_token;
    // env: SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE, SGLANG_PREFILL_DELAYER_MAX_DELAY_PASSES,
    // SGLANG_PREFILL_DELAYER_TOKEN_USAGE_LOW_WATERMARK — SGLang's deprecated spellings of
    // --enable-prefill-delayer and two of its knobs (server_args.py
    // _handle_prefill_delayer_env_compat); read by ServerArgs::resolve, which warns.
    std::optional<std::string> decrease_prefill_idle;
    std::optional<std::string> prefill_delayer_max_delay_passes;
    std::optional<std::string> prefill_delayer_token_usage_low_watermark;
    // env: SGLANG_MAX_THINK_TOKENS — with --enable-strict-thinking, the reasoning tokens a request
    // may write when it gives no custom_params.thinking_budget (an integer; unset or negative:
    // no limit). Parsed by `serve`.
    std::optional<std::string> max_think_tokens;
    // env: GLOO_SOCKET_IFNAME — the network interface Gloo's sockets use (PyTorch's name).
    // Empty: the interface of the route to --dist-init-addr.
    std::string gloo_socket_ifname;
};

const EnvFlags& env();

}  // namespace tessera
