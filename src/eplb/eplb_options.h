#pragma once
// eplb/eplb_options.h — the EPLB launch settings one rank's model needs (SGLang's
// --ep-num-redundant-experts, --init-expert-location, --ep-dispatch-algorithm, --enable-eplb
// and --eplb-*, --expert-distribution-recorder-*, --expert-balancedness-report-mode), resolved
// by server::ServerArgs. Plain data.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "eplb/balancer.h"
#include "eplb/expert_dispatch.h"
#include "eplb/expert_distribution.h"

namespace tessera::dist {
class ProcessGroup;
}

namespace tessera::eplb {

class BalancednessReport;

// /start_expert_distribution_record, /stop_..., /dump_...: carried to every rank with a step.
enum class ExpertRecordCommand : std::int64_t { kNone = 0, kStart = 1, kStop = 2, kDump = 3 };

enum class ReportMode { kOff, kServerLog, kPrometheus, kBoth };
StatusOr<ReportMode> parse_report_mode(const std::string& name);

struct EplbOptions {
    std::int64_t num_redundant_experts = 0;
    std::string init_expert_location = "trivial";
    DispatchAlgorithm dispatch = DispatchAlgorithm::kStatic;
    bool enable = false;  // live rebalancing
    EplbAlgorithm algorithm = EplbAlgorithm::kAuto;
    std::int64_t rebalance_num_iterations = 1000;
    std::optional<std::int64_t> layers_per_chunk;  // none: every layer in one pass
    double min_rebalancing_utilization_threshold = 1.0;
    RecorderMode recorder_mode = RecorderMode::kOff;
    std::int64_t recorder_buffer_size = 1000;  // -1: unbounded
    ReportMode report = ReportMode::kOff;
    std::int64_t num_nodes = 1;
    std::string dump_dir = "/tmp";  // SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR
    int global_rank = 0;
    // The TP group's ranks again, a process group only the expert transfer of live rebalancing
    // uses, so that it runs beside a forward pass (nullptr: it runs between passes).
    dist::ProcessGroup* transfer_group = nullptr;
    // Where the output rank publishes balancedness for /metrics (nullptr elsewhere).
    std::shared_ptr<BalancednessReport> metrics;
};

}  // namespace tessera::eplb
