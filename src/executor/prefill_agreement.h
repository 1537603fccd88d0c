#pragma once
// executor/prefill_agreement.h — the prefill delayer's agreement among attention-DP groups.
// SGLang's prefill_delayer.py all-gathers every rank's intent over the TP group and reads only
// attention-TP rank 0's; here only the groups' leaders take part, over a group of their own
// (dist::GroupKind::kAttnDp). The followers never wait on it, and it runs on the scheduler
// thread while a step's collectives run on the step thread. Exactly one agreement precedes
// each lockstep round on every leader, which keeps the leaders' agreements paired.

#include <cstdint>

#include "base/status.h"
#include "executor/forward_batch.h"

namespace tessera::dist {
class ProcessGroup;
}

namespace tessera::executor {

class PrefillAgreementGroup {
 public:
    // `leaders`: the attention-DP group's leaders, one per group, in group order.
    explicit PrefillAgreementGroup(dist::ProcessGroup& leaders) : leaders_(leaders) {}

    // The agreement before the next round: agreed now with `mine`, or, when one was agreed
    // since the last round, that one again (fresh false).
    StatusOr<BatchRunner::PrefillAgreement> agree(const BatchRunner::PrefillIntent& mine);
    // Right before a round: agrees "nothing to admit" if nothing was agreed for it.
    Status before_round();

 private:
    dist::ProcessGroup& leaders_;
    std::int64_t agreements_ = 0;  // agreed so far; the leaders check they are at the same one
    bool pending_ = false;         // agreed since the last round
    BatchRunner::PrefillAgreement last_;
};

}  // namespace tessera::executor
