#include "eplb/expert_distribution.h"

#include "eplb/eplb_options.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace tessera::eplb {

StatusOr<RecorderMode> parse_recorder_mode(const std::string& name) {
    if (name.empty() || name == "none") return RecorderMode::kOff;
    if (name == "stat" || name == "stat_approx") return RecorderMode::kStat;
    if (name == "per_pass") return RecorderMode::kPerPass;
    if (name == "per_token") return RecorderMode::kPerToken;
    return Status::InvalidArgument("--expert-distribution-recorder-mode " + name +
                                   ": expected stat, stat_approx, per_pass or per_token");
}

StatusOr<ReportMode> parse_report_mode(const std::string& name) {
    if (name.empty() || name == "off") return ReportMode::kOff;
    if (name == "server_log") return ReportMode::kServerLog;
    if (name == "prometheus") return ReportMode::kPrometheus;
    if (name == "both") return ReportMode::kBoth;
    return Status::InvalidArgument("--expert-balancedness-report-mode " + name +
                                   ": expected off, server_log, prometheus or both");
}

const char* recorder_mode_name(RecorderMode mode) {
    switch (mode) {
        case RecorderMode::kOff: return "none";
        case RecorderMode::kStat: return "stat";
        case RecorderMode::kPerPass: return "per_pass";
        case RecorderMode::kPerToken: return "per_token";
    }
    return "?";
}

double balancedness(const std::vector<std::int64_t>& rank_load) {
    if (rank_load.empty()) return 1.0;
    double sum = 0.0, max = 0.0;
    for (std::int64_t v : rank_load) {
        sum += static_cast<double>(v);
        max = std::max(max, static_cast<double>(v));
    }
    return (sum / static_cast<double>(rank_load.size()) + 1e-5) / (max + 1e-5);
}

ExpertDistributionRecorder::ExpertDistributionRecorder(RecorderMode mode, std::int64_t buffer_size,
                                                       std::int64_t num_layers, std::int64_t num_logical)
    : mode_(mode), buffer_size_(buffer_size), num_layers_(num_layers), num_logical_(num_logical) {}

void ExpertDistributionRecorder::start() {
    passes_.clear();
    recording_ = mode_ != RecorderMode::kOff;
}

void ExpertDistributionRecorder::stop() { recording_ = false; }

void ExpertDistributionRecorder::record(PassRecord pass) {
    if (!recording_) return;
    if (mode_ != RecorderMode::kPerToken) pass.token_experts.clear();
    if (mode_ != RecorderMode::kPerPass) pass.physical_count.clear();
    passes_.push_back(std::move(pass));
    if (buffer_size_ >= 0)
        while (static_cast<std::int64_t>(passes_.size()) > std::max<std::int64_t>(buffer_size_, 1)) passes_.pop_front();
}

std::vector<float> ExpertDistributionRecorder::logical_count_sum() const {
    std::vector<float> sum(static_cast<std::size_t>(num_layers_ * num_logical_), 0.0f);
    std::vector<std::int64_t> exact(sum.size(), 0);
    for (const PassRecord& p : passes_)
        for (std::size_t i = 0; i < exact.size() && i < p.logical_count.size(); ++i) exact[i] += p.logical_count[i];
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<float>(exact[i]);
    return sum;
}

std::optional<double> ExpertDistributionRecorder::average_balancedness() const {
    double sum = 0.0;
    int n = 0;
    for (const PassRecord& p : passes_)
        if (p.balancedness) sum += *p.balancedness, ++n;
    if (n == 0) return std::nullopt;
    return sum / n;
}

std::string ExpertDistributionRecorder::dump_json(int rank, const std::vector<std::int32_t>& phy2log) const {
    nlohmann::json j;
    j["rank"] = rank;
    j["recorder_mode"] = recorder_mode_name(mode_);
    j["num_layers"] = num_layers_;
    j["num_logical_experts"] = num_logical_;
    j["buffered_passes"] = passes_.size();
    auto matrix = [&](const std::vector<std::int32_t>& flat) {
        nlohmann::json rows = nlohmann::json::array();
        for (std::int64_t l = 0; l < num_layers_; ++l)
            rows.push_back(std::vector<std::int32_t>(flat.begin() + l * num_logical_, flat.begin() + (l + 1) * num_logical_));
        return rows;
    };
    if (mode_ == RecorderMode::kStat) {
        // [passes, layers, experts], as SGLang's stat dump: --init-expert-location reads it back.
        nlohmann::json passes = nlohmann::json::array();
        for (const PassRecord& p : passes_) passes.push_back(matrix(p.logical_count));
        j["logical_count"] = std::move(passes);
        const auto average = average_balancedness();
        j["average_utilization_rate_over_window"] = average ? nlohmann::json(*average) : nlohmann::json(nullptr);
    } else {
        nlohmann::json records = nlohmann::json::array();
        for (const PassRecord& p : passes_) {
            nlohmann::json r;
            r["forward_pass_id"] = p.pass_id;
            r["num_tokens"] = p.tokens;
            r["logical_count"] = matrix(p.logical_count);
            r["balancedness"] = p.balancedness ? nlohmann::json(*p.balancedness) : nlohmann::json(nullptr);
            if (mode_ == RecorderMode::kPerToken) r["topk_ids_of_layer"] = p.token_experts;
            if (mode_ == RecorderMode::kPerPass && num_layers_ > 0) {
                const std::size_t P = p.physical_count.size() / static_cast<std::size_t>(num_layers_);
                nlohmann::json rows = nlohmann::json::array();
                for (std::int64_t l = 0; l < num_layers_ && P > 0; ++l)
                    rows.push_back(std::vector<std::int32_t>(p.physical_count.begin() + l * P,
                                                             p.physical_count.begin() + (l + 1) * P));
                r["global_physical_count"] = std::move(rows);
            }
            records.push_back(std::move(r));
        }
        j["records"] = std::move(records);
    }
    const std::size_t P = num_layers_ > 0 ? phy2log.size() / static_cast<std::size_t>(num_layers_) : 0;
    nlohmann::json map = nlohmann::json::array();
    for (std::int64_t l = 0; l < num_layers_ && P > 0; ++l)
        map.push_back(std::vector<std::int32_t>(phy2log.begin() + l * P, phy2log.begin() + (l + 1) * P));
    j["last_physical_to_logical_map"] = std::move(map);
    return j.dump();
}

}  // namespace tessera::eplb
