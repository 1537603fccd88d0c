#include "executor/prefill_agreement.h"

#include <fmt/core.h>

#include <vector>

#include "dist/process_group.h"

namespace tessera::executor {

namespace {

enum Field { kIndex, kPrefillable, kBelowWatermark, kRunning, kMaxPrefillBatch, kWaiting, kFields };

}  // namespace

StatusOr<BatchRunner::PrefillAgreement> PrefillAgreementGroup::agree(const BatchRunner::PrefillIntent& mine) {
    if (pending_) {
        BatchRunner::PrefillAgreement again = last_;
        again.fresh = false;
        return again;
    }
    std::int64_t me[kFields] = {};
    me[kIndex] = agreements_;
    me[kPrefillable] = mine.prefillable;
    me[kBelowWatermark] = mine.below_watermark;
    me[kRunning] = mine.running;
    me[kMaxPrefillBatch] = mine.max_prefill_batch;
    me[kWaiting] = mine.waiting;
    StatusOr<std::vector<std::int64_t>> rows = leaders_.all_gather_rows(me);
    if (!rows.ok())
        return Status(rows.status().code(),
                      fmt::format("prefill delayer agreement {}: {}", agreements_, rows.status().message()));
    BatchRunner::PrefillAgreement agreed;
    for (int g = 0; g < leaders_.size(); ++g) {
        const std::int64_t* r = rows->data() + g * kFields;
        if (r[kIndex] != agreements_)
            return Status(StatusCode::kUnavailable,
                          fmt::format("prefill delayer: this group's leader is at agreement {} but attn_dp group {}'s "
                                      "is at {} (a leader skipped a round)",
                                      agreements_, g, r[kIndex]));
        agreed.groups.push_back({.prefillable = r[kPrefillable],
                                 .below_watermark = r[kBelowWatermark],
                                 .running = r[kRunning],
                                 .max_prefill_batch = r[kMaxPrefillBatch],
                                 .waiting = r[kWaiting]});
    }
    ++agreements_;
    pending_ = true;
    last_ = agreed;
    return agreed;
}

Status PrefillAgreementGroup::before_round() {
    if (!pending_) TSR_RETURN_IF_ERROR(agree({}).status());
    pending_ = false;
    return Status::Ok();
}

}  // namespace tessera::executor
