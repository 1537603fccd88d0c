// --scheduler-recv-interval: which turns read the inbox.
#include "front/recv_skipper.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::front {
namespace {

using scheduler::StepKind;

// 'r' where the turn after `steps[i]` reads the inbox, '.' where it skips.
std::string reads(int interval, const std::vector<StepKind>& steps) {
    RecvSkipper skipper(interval);
    std::string out;
    for (StepKind s : steps) out += skipper.should_receive(s) ? 'r' : '.';
    return out;
}

TEST(RecvSkipperTest, IntervalOneReadsEveryTurn) {
    EXPECT_EQ(reads(1, {StepKind::kIdle, StepKind::kDecode, StepKind::kDecode, StepKind::kPrefill}), "rrrr");
}

TEST(RecvSkipperTest, DecodeAndIdleTurnsCountOnePrefillCountsTheWholeInterval) {
    const auto D = StepKind::kDecode, P = StepKind::kPrefill, I = StepKind::kIdle;
    // The first turn reads; then every third decode or idle turn; right after any prefill.
    EXPECT_EQ(reads(3, {I, D, D, D, D, D, D, P, D, I, I}), "r..r..rr..r");
    EXPECT_EQ(reads(3, {D, P, P, D}), "rrr.");
}

}  // namespace
}  // namespace tessera::front
