#include "scheduler/request.h"

#include <algorithm>

namespace tessera::scheduler {

std::string_view finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
        case FinishReason::kAbort: return "abort";
        case FinishReason::kNone: break;
    }
    return "";
}

std::vector<std::int32_t> Req::fill_ids(std::int64_t begin, std::int64_t end) const {
    std::vector<std::int32_t> out;
    out.reserve(static_cast<std::size_t>(std::max<std::int64_t>(end - begin, 0)));
    for (std::int64_t i = begin; i < end; ++i) out.push_back(fill_id(i));
    return out;
}

void Req::count_reasoning(std::int32_t token) {
    if (!think_end_id || reasoning_over) return;
    ++reasoning_tokens;
    reasoning_over = token == *think_end_id;
}

void Req::check_finished() {
    if (finished() || output_ids.empty()) return;
    if (static_cast<std::int64_t>(output_ids.size()) >= max_new_tokens) {
        finish_reason = FinishReason::kLength;
        return;
    }
    if (constraint && constraint->terminated()) {
        finish_reason = FinishReason::kStop;
        return;
    }
    if (ignore_eos) return;
    const std::int32_t last = output_ids.back();
    const auto has = [last](const std::vector<std::int32_t>& ids) {
        return std::find(ids.begin(), ids.end(), last) != ids.end();
    };
    if (has(stop_token_ids) || has(eos_token_ids)) finish_reason = FinishReason::kStop;
}

}  // namespace tessera::scheduler
