#include "base/env.h"

#include <cstdlib>

namespace tessera {

namespace {
std::string read(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

// Unset stays distinguishable from empty: for these variables "unset" selects a default,
// while an empty value is a user error that the parser reports.
std::optional<std::string> read_optional(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
}
}  // namespace

const EnvFlags& env() {
    static const EnvFlags flags = [] {
        EnvFlags f;
        f.kernel_isa = read("TSR_KERNEL_ISA");
        f.tokenizer_assets = read("TSR_TOKENIZER_ASSETS");
        f.log_level = read("TSR_LOG_LEVEL");
        f.pp_layer_partition = read_optional("SGLANG_PP_LAYER_PARTITION");
        f.dynamic_chunking_smooth_factor = read_optional("SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR");
        f.api_key = read("TESSERA_API_KEY");
        f.openai_api_key = read("OPENAI_API_KEY");
        f.expert_distribution_recorder_dir = read("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR");
        if (f.expert_distribution_recorder_dir.empty()) f.expert_distribution_recorder_dir = "/tmp";
        f.eplb_corrupt_transfer = read("TSR_EPLB_FAULT_CORRUPT_TRANSFER") == "1";
        f.eplb_fail_transfer = read("TSR_EPLB_FAULT_FAIL_TRANSFER") == "1";
        f.eplb_transfer_between_passes = read("TSR_EPLB_TRANSFER_BETWEEN_PASSES") == "1";
        f.pp_over_gloo = read("TSR_PP_OVER_GLOO") == "1";
        f.dpa_fault = read("TSR_DPA_FAULT");
        f.job_token = read("TESSERA_JOB_TOKEN");
        f.gloo_socket_ifname = read("GLOO_SOCKET_IFNAME");
        f.max_think_tokens = read_optional("SGLANG_MAX_THINK_TOKENS");
        f.decrease_prefill_idle = read_optional("SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE");
        f.prefill_delayer_max_delay_passes = read_optional("SGLANG_PREFILL_DELAYER_MAX_DELAY_PASSES");
        f.prefill_delayer_token_usage_low_watermark = read_optional("SGLANG_PREFILL_DELAYER_TOKEN_USAGE_LOW_WATERMARK");
        return f;
    }();
    return flags;
}

}  // namespace tessera
