#include "base/status.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

StatusOr<int> half(int v) {
    if (v % 2) return Status::InvalidArgument("odd value " + std::to_string(v));
    return v / 2;
}

Status quarter(int v, int* out) {
    TSR_ASSIGN_OR_RETURN(int h, half(v));
    TSR_ASSIGN_OR_RETURN(*out, half(h));
    return Status::Ok();
}

TEST(StatusTest, PropagatesTheFirstError) {
    int out = 0;
    EXPECT_TRUE(quarter(8, &out).ok());
    EXPECT_EQ(out, 2);
    Status s = quarter(6, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "odd value 3");
    EXPECT_EQ(s.to_string(), "invalid argument: odd value 3");
}

}  // namespace
}  // namespace tessera
