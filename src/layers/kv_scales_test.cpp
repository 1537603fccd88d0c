// Which checkpoint tensors give an fp8 KV cache its scales (GQA and MLA attention), and
// SGLang's rules for one or neither of k_scale / v_scale.
#include "layers/kv_scales.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "loader/safetensors.h"
#include "loader/weight_source.h"

namespace tessera::layers {
namespace {

const std::string kPrefix = "model.layers.0.self_attn.";

loader::TensorToWrite scale(const std::string& name, std::vector<float> values, std::vector<std::int64_t> shape = {}) {
    loader::TensorToWrite t{kPrefix + name, DType::kF32, std::move(shape), std::vector<std::byte>(values.size() * 4)};
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
}

// The scales read from a checkpoint holding `tensors` (and one unrelated weight).
StatusOr<KvScales> scales_of(std::vector<loader::TensorToWrite> tensors, bool mla = false) {
    const auto dir = std::filesystem::temp_directory_path() / ("tessera_kv_scales_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    tensors.push_back(scale("q_norm.weight", {1.0f, 1.0f}, {2}));
    EXPECT_TRUE(loader::write_safetensors((dir / "model.safetensors").string(), tensors).ok());
    auto source = loader::WeightSource::open(dir.string());
    EXPECT_TRUE(source.ok()) << source.status().message();
    StatusOr<KvScales> scales = mla ? load_mla_kv_scales(**source, kPrefix) : load_kv_scales(**source, kPrefix);
    std::filesystem::remove_all(dir);
    return scales;
}

void expect_scales(const StatusOr<KvScales>& got, float k, float v, bool from_checkpoint) {
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->k, k);
    EXPECT_EQ(got->v, v);
    EXPECT_EQ(got->source, from_checkpoint ? "the checkpoint" : "");
}

TEST(KvScalesTest, NoneMeansOne) { expect_scales(scales_of({}), 1.0f, 1.0f, false); }

TEST(KvScalesTest, EveryNameSglangRemaps) {
    expect_scales(scales_of({scale("k_scale", {0.5f}), scale("v_scale", {0.25f})}), 0.5f, 0.25f, true);
    expect_scales(scales_of({scale("attn.k_scale", {2.0f}, {1}), scale("attn.v_scale", {3.0f}, {1})}), 2.0f, 3.0f,
                  true);
    expect_scales(scales_of({scale("k_proj.k_scale", {4.0f}), scale("v_proj.v_scale", {8.0f})}), 4.0f, 8.0f, true);
}

TEST(KvScalesTest, OneScaleServesBoth) {
    expect_scales(scales_of({scale("kv_scale", {6.0f})}), 6.0f, 6.0f, true);  // deprecated single scale
    expect_scales(scales_of({scale("v_scale", {5.0f})}), 5.0f, 5.0f, true);
    expect_scales(scales_of({scale("k_scale", {7.0f}), scale("v_scale", {-1.0f})}), 7.0f, 7.0f, true);
    expect_scales(scales_of({scale("k_scale", {0.0f}), scale("v_scale", {-1.0f})}), 1.0f, 1.0f, false);
}

TEST(KvScalesTest, MlaScalesLiveOnAttnMqa) {
    expect_scales(scales_of({scale("attn_mqa.k_scale", {2.0f}), scale("attn_mqa.v_scale", {4.0f})}, true), 2.0f,
                  4.0f, true);
    expect_scales(scales_of({scale("k_proj.k_scale", {3.0f})}, true), 3.0f, 3.0f, true);  // ModelOpt's, remapped
    // DeepSeek's loader has no other names: these stay unused there.
    expect_scales(scales_of({scale("k_scale", {5.0f}), scale("kv_scale", {6.0f})}, true), 1.0f, 1.0f, false);
}

TEST(KvScalesTest, OnlyPerTensorScales) {
    const auto got = scales_of({scale("k_scale", {1.0f, 2.0f, 3.0f, 4.0f}, {4}), scale("v_scale", {1.0f})});
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.status().message().find("k_scale has shape [4]: only per-tensor"), std::string::npos)
        << got.status().message();
}

}  // namespace
}  // namespace tessera::layers
