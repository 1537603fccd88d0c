#include "dist/pp_partition.h"

#include <charconv>
#include <cstdint>
#include <string_view>

#include <fmt/core.h>

namespace tessera::dist {

namespace {

constexpr const char* kPartitionVar = "SGLANG_PP_LAYER_PARTITION";

Status invalid(std::string message) { return Status::InvalidArgument(std::move(message)); }

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// One integer per comma-separated entry. Spaces around an entry are tolerated (Python's
// int() in SGLang accepts them); anything else that is not a whole integer is rejected here,
// while the sign and the count/sum are checked by the caller with more specific messages.
StatusOr<std::vector<int64_t>> parse_partition(const std::string& value, int pp_size) {
    std::vector<int64_t> counts;
    std::string_view rest(value);
    while (true) {
        const size_t comma = rest.find(',');
        std::string_view entry = trim(rest.substr(0, comma));
        if (!entry.empty() && entry.front() == '+') entry.remove_prefix(1);
        int64_t n = 0;
        const auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), n);
        if (entry.empty() || ec != std::errc() || end != entry.data() + entry.size())
            return invalid(fmt::format(
                "Invalid partition string '{}' in {}: expected {} comma-separated layer counts, "
                "one per pipeline stage (e.g. '15,15,15,16'), but '{}' is not an integer",
                value, kPartitionVar, pp_size, entry));
        counts.push_back(n);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    return counts;
}

StatusOr<std::vector<LayerRange>> ranges_from_partition(int num_layers, int pp_size,
                                                        const std::string& value) {
    TSR_ASSIGN_OR_RETURN(std::vector<int64_t> counts, parse_partition(value, pp_size));
    if (static_cast<int64_t>(counts.size()) != pp_size)
        return invalid(fmt::format(
            "{}={} has {} entries but --pp-size is {}; give exactly one layer count per "
            "pipeline stage, or unset {} for the default split",
            kPartitionVar, value, counts.size(), pp_size, kPartitionVar));
    int64_t sum = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
        if (counts[i] <= 0)
            return invalid(fmt::format(
                "{}={} gives stage {} {} layers; every pipeline stage needs at least one layer",
                kPartitionVar, value, i, counts[i]));
        sum += counts[i];
    }
    if (sum != num_layers)
        return invalid(fmt::format(
            "{}={} sums to {} but the model has {} layers; the per-stage counts must add up "
            "to num_hidden_layers",
            kPartitionVar, value, sum, num_layers));
    std::vector<LayerRange> ranges;
    int begin = 0;
    for (int64_t n : counts) {
        ranges.push_back({begin, begin + static_cast<int>(n)});
        begin += static_cast<int>(n);
    }
    return ranges;
}

std::vector<LayerRange> default_ranges(int num_layers, int pp_size) {
    const int base = num_layers / pp_size;
    const int rem = num_layers % pp_size;
    std::vector<LayerRange> ranges;
    for (int r = 0; r < pp_size; ++r) {
        // Stages at or after pp - rem carry one extra layer; the (pp - rem) stages before
        // them are one layer short of base + 1 each, hence the offset.
        if (r >= pp_size - rem) {
            const int begin = r * (base + 1) - (pp_size - rem);
            ranges.push_back({begin, begin + base + 1});
        } else {
            ranges.push_back({r * base, r * base + base});
        }
    }
    return ranges;
}

}  // namespace

StatusOr<std::vector<LayerRange>> pp_layer_ranges(int num_layers, int pp_size,
                                                  const std::optional<std::string>& partition) {
    if (num_layers < 1) return invalid(fmt::format("the model has {} layers; need at least 1", num_layers));
    if (pp_size < 1) return invalid(fmt::format("--pp-size must be at least 1, got {}", pp_size));
    if (partition) return ranges_from_partition(num_layers, pp_size, *partition);
    // SGLang would hand the first stages zero layers here; a stage without layers only
    // forwards activations, which is never what the user meant.
    if (pp_size > num_layers)
        return invalid(fmt::format(
            "--pp-size {} is larger than the model's {} layers; every pipeline stage needs at "
            "least one layer: use --pp-size <= {}",
            pp_size, num_layers, num_layers));
    return default_ranges(num_layers, pp_size);
}

StatusOr<LayerRange> pp_layer_range(int num_layers, int pp_rank, int pp_size,
                                    const std::optional<std::string>& partition) {
    if (pp_size >= 1 && (pp_rank < 0 || pp_rank >= pp_size))
        return invalid(fmt::format("pp_rank {} is outside [0, --pp-size {})", pp_rank, pp_size));
    TSR_ASSIGN_OR_RETURN(std::vector<LayerRange> ranges, pp_layer_ranges(num_layers, pp_size, partition));
    return ranges[static_cast<size_t>(pp_rank)];
}

}  // namespace tessera::dist
