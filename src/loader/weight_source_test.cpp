#include "loader/weight_source.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tessera::loader {
namespace {

float value_at(const TensorView& t, std::int64_t i) {
    float v = 0.0f;
    convert_to_f32(static_cast<const std::byte*>(t.data) + i * static_cast<std::int64_t>(dtype_size(t.dtype)), t.dtype,
                   &v, 1);
    return v;
}

// --load-format dummy: a tensor is made when asked for, in the given dtype, small uniform
// values from a seed that restarts per tensor; the optional ones exist as `present` says.
TEST(WeightSourceTest, DummyMakesEachTensorAskedFor) {
    auto source = WeightSource::dummy("/nowhere", DType::kBF16, [](const std::string& name) {
        return name != "lm_head.weight";
    });
    EXPECT_EQ(source->find("a.weight"), nullptr) << "nothing exists before it is asked for";
    auto a = source->get("a.weight", {64, 32});
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ((*a)->dtype, DType::kBF16);
    EXPECT_EQ((*a)->bytes, 64u * 32u * 2u);
    float lo = 1.0f, hi = -1.0f;
    bool varied = false;
    for (std::int64_t i = 0; i < 64 * 32; ++i) {
        const float v = value_at(**a, i);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        varied |= v != value_at(**a, 0);
    }
    EXPECT_GE(lo, -1e-3f);
    EXPECT_LE(hi, 1e-3f);
    EXPECT_LT(lo, -5e-4f);
    EXPECT_GT(hi, 5e-4f);
    EXPECT_TRUE(varied);
    EXPECT_EQ(source->find("a.weight"), *a) << "made once, then found";
    auto b = source->get("b.weight", {8, 4});
    ASSERT_TRUE(b.ok());
    for (std::int64_t i = 0; i < 32; ++i) EXPECT_EQ(value_at(**b, i), value_at(**a, i)) << "the seed restarts";
    EXPECT_FALSE(source->get("a.weight", {32, 64}).ok()) << "one name, one shape";
    EXPECT_TRUE(source->contains("model.norm.weight"));
    EXPECT_FALSE(source->contains("lm_head.weight"));
    EXPECT_EQ(source->dominant_dtype(), DType::kBF16);
    auto rows = source->read_rows_f32("a.weight", 64, 32, 2, 1);
    ASSERT_TRUE(rows.ok());
    EXPECT_EQ((*rows)[0], value_at(**a, 64));
}

}  // namespace
}  // namespace tessera::loader
