#include "scheduler/memory_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

namespace tessera::scheduler {

StatusOr<MemoryPlan> plan_memory(const MemoryPlanInput& in) {
    if (in.kv_bytes_per_token <= 0 || in.page_size <= 0 || in.context_len <= 0) {
        return Status::InvalidArgument(fmt::format(
            "memory plan needs kv_bytes_per_token ({}), page_size ({}) and context_len ({}) > 0",
            in.kv_bytes_per_token, in.page_size, in.context_len));
    }
    MemoryPlan plan;
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    const double total_gib = static_cast<double>(in.capacity_bytes) / kGiB;
    const double available_gib = static_cast<double>(in.capacity_bytes - in.weight_bytes) / kGiB;
    plan.rest_gib = available_gib - total_gib * (1.0 - in.mem_fraction_static);
    std::int64_t max_total = static_cast<std::int64_t>(plan.rest_gib * kGiB) / in.kv_bytes_per_token;
    if (plan.rest_gib <= 0) max_total = 0;

    // Request rows: the user's cap, else scaled by how many full-context requests fit.
    if (in.max_running_requests) {
        plan.req_to_token_pool_size = *in.max_running_requests;
    } else {
        const auto scaled =
            static_cast<std::int64_t>(static_cast<double>(max_total) / in.context_len * 512);
        plan.req_to_token_pool_size = std::min<std::int64_t>(std::max<std::int64_t>(scaled, 2048), 4096);
    }

    if (in.max_total_tokens) {
        if (*in.max_total_tokens > max_total) {
            plan.warnings.push_back(fmt::format(
                "max_total_tokens={} is larger than the profiled value {}. Use the profiled value "
                "instead.",
                *in.max_total_tokens, max_total));
        }
        max_total = std::min(max_total, *in.max_total_tokens);
    }
    max_total = max_total / in.page_size * in.page_size;
    if (max_total <= 0) {
        return Status::ResourceExhausted(
            "Not enough memory. Please try to increase --mem-fraction-static.");
    }
    plan.max_total_num_tokens = max_total;
    plan.kv_pool_bytes = max_total * in.kv_bytes_per_token;
    plan.req_to_token_width = in.context_len + 4;

    const std::int64_t dp_div = in.enable_dp_attention ? std::max(in.dp_size, 1) : 1;
    const std::int64_t wanted =
        in.max_running_requests ? *in.max_running_requests / dp_div : max_total / 2;
    plan.max_running_requests = std::min(wanted, plan.req_to_token_pool_size);

    plan.max_req_len = std::min(in.context_len - 1, max_total - 1);
    plan.max_req_input_len = plan.max_req_len - 1;
    return plan;
}

double default_mem_fraction_static(const MemFractionInput& in) {
    if (!in.capacity_mib || *in.capacity_mib <= 0) return 0.95;
    const auto capacity = static_cast<double>(*in.capacity_mib);
    const std::int64_t activation_tokens = in.chunked_prefill_size > 0
                                               ? std::max<std::int64_t>(in.chunked_prefill_size, 2048)
                                               : std::max<std::int64_t>(in.max_prefill_tokens, 2048);
    constexpr double kReserveForGraphMib = 0.0;  // no CUDA graphs on CPU
    double reserved = 512.0 + static_cast<double>(activation_tokens) * 1.5 +
                      static_cast<double>(in.tp_size * in.pp_size) / 8.0 * 1024.0 +
                      kReserveForGraphMib + static_cast<double>(in.host_headroom_mib);
    if (capacity > 60.0 * 1024.0) reserved = std::max(reserved, 10.0 * 1024.0);
    return std::round((capacity - reserved) / capacity * 1000.0) / 1000.0;
}

std::int64_t cpu_host_headroom_mib(std::int64_t capacity_mib) {
    return std::max<std::int64_t>(1024, capacity_mib / 10);
}

std::int64_t default_max_cached_tokens(std::int64_t capacity_bytes, std::int64_t kv_bytes_per_token) {
    return kv_bytes_per_token > 0 ? capacity_bytes / 8 / kv_bytes_per_token : -1;
}

std::int64_t default_chunked_prefill_size(std::optional<std::int64_t> capacity_mib) {
    if (!capacity_mib) return 4096;
    const std::int64_t gib = 1024;
    const std::int64_t m = *capacity_mib;
    if (m < 20 * gib) return 2048;
    if (m < 60 * gib) return 4096;
    if (m < 160 * gib) return 8192;
    return 16384;
}

RankMemory rank_memory_defaults(const RankMemoryRequest& r) {
    RankMemory out;
    const std::int64_t capacity_mib = r.capacity_bytes >> 20;
    // SGLang sets the memory-based default before handle_data_parallelism divides it among the
    // DP-attention groups (a size given on the command line was divided by resolve()).
    out.chunked_prefill_size = r.chunked_prefill_size.value_or(
        default_chunked_prefill_size(capacity_mib) / (r.enable_dp_attention ? std::max(r.dp_size, 1) : 1));
    MemFractionInput mf;
    mf.capacity_mib = capacity_mib;
    mf.chunked_prefill_size = out.chunked_prefill_size;
    mf.max_prefill_tokens = r.max_prefill_tokens;
    mf.tp_size = r.tp_size;
    mf.pp_size = r.pp_size;
    mf.host_headroom_mib = cpu_host_headroom_mib(capacity_mib);
    out.mem_fraction_static = r.mem_fraction_static.value_or(default_mem_fraction_static(mf));
    out.context_len = r.context_length.value_or(r.model_context_len);
    return out;
}

StatusOr<RankMemory> plan_rank_memory(const RankMemoryRequest& r) {
    RankMemory out = rank_memory_defaults(r);
    MemoryPlanInput in;
    in.capacity_bytes = r.capacity_bytes;
    in.weight_bytes = r.weight_bytes;
    in.mem_fraction_static = out.mem_fraction_static;
    in.kv_bytes_per_token = r.kv_bytes_per_token;
    in.page_size = r.page_size;
    in.context_len = out.context_len;
    in.max_running_requests = r.max_running_requests;
    in.max_total_tokens = r.max_total_tokens;
    in.dp_size = r.dp_size;
    in.enable_dp_attention = r.enable_dp_attention;
    TSR_ASSIGN_OR_RETURN(out.plan, plan_memory(in));
    return out;
}

}  // namespace tessera::scheduler
