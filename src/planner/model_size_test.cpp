// The planner's per-rank size from config.json against the model tessera really loads, for
// every architecture and a set of layouts: the two must agree to the byte, or `tessera plan`
// and `tessera serve` would size the KV pool differently.

#include "planner/model_size.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

#include "app/make_model.h"
#include "dist/process_group.h"
#include "models/model.h"

namespace tessera::planner {
namespace {

namespace fs = std::filesystem;

// Loading shards by rank and size only; a TP group is required but never called.
class LoadOnlyGroup final : public dist::ProcessGroup {
 public:
    LoadOnlyGroup(int rank, int size) : ProcessGroup("tp", rank, size) {}
    std::string backend_name() const override { return "load-only"; }
};

struct Layout {
    const char* name;
    int tp_rank, tp_size, pp_rank, pp_size, ep_size;
    int attn_dp = 1;  // DP-attention groups (1: off)
    bool dp_lm_head = false;
    bool dense_replicated = false;  // --moe-dense-tp-size 1
    bool all_to_all = false;        // --moe-a2a-backend all_to_all: shared experts whole
};

constexpr Layout kLayouts[] = {
    {"tp1", 0, 1, 0, 1, 1}, {"tp2 rank 0", 0, 2, 0, 1, 1}, {"tp2 rank 1", 1, 2, 0, 1, 1},
    {"pp2 stage 0", 0, 1, 0, 2, 1}, {"pp2 stage 1", 0, 1, 1, 2, 1}, {"tp2 ep2 rank 1", 1, 2, 0, 1, 2},
    {"tp2 dpa2 rank 1", 1, 2, 0, 1, 1, 2}, {"tp4 dpa2 dp-lm-head rank 3", 3, 4, 0, 1, 1, 2, true},
    {"tp2 dense replicated rank 1", 1, 2, 0, 1, 1, 1, false, true},
    {"tp2 ep2 all_to_all rank 1", 1, 2, 0, 1, 2, 1, false, false, true},
};

class ModelSizeTest : public ::testing::TestWithParam<const char*> {
 protected:
    int refused_ = 0;
    fs::path dir_ = fs::temp_directory_path() / ("tessera_model_size_" + std::to_string(::getpid()));
    void TearDown() override { fs::remove_all(dir_); }

    std::string make(const std::string& arch, const std::string& dtype, std::int64_t fp8_block) {
        app::MakeModelOptions o;
        o.arch = arch;
        o.dtype = dtype;
        o.fp8_block = fp8_block;
        o.out = (dir_ / (arch + dtype + std::to_string(fp8_block))).string();
        EXPECT_TRUE(app::make_model(o).ok());
        return o.out;
    }

    void check(const std::string& folder, const std::string& quantization, const std::string& kv_dtype) {
        auto config = models::read_model_config(folder);
        ASSERT_TRUE(config.ok()) << config.status().to_string();
        auto types = weight_types(*config, "auto", quantization, kv_dtype);
        ASSERT_TRUE(types.ok()) << types.status().to_string();
        for (const Layout& l : kLayouts) {
            SCOPED_TRACE(std::string(l.name) + ", quantization '" + quantization + "', kv " + kv_dtype);
            if (l.ep_size > 1 && !config->is_moe()) continue;
            models::LoadOptions o;
            o.model_path = folder;
            o.quantization = quantization;
            o.kv_cache_dtype = kv_dtype;
            o.tp_rank = l.tp_rank;
            o.tp_size = l.tp_size;
            LoadOnlyGroup group(l.tp_rank, l.tp_size);
            if (l.tp_size > 1) o.tp_group = &group;
            if (l.ep_size > 1) o.moe.ep_group = &group;
            o.pp_rank = l.pp_rank;
            o.pp_size = l.pp_size;
            o.moe.ep_size = l.ep_size;
            o.moe.ep_rank = l.tp_rank % l.ep_size;
            o.moe.moe_tp_size = l.tp_size / l.ep_size;
            o.moe.moe_tp_rank = l.tp_rank / l.ep_size;
            const int attn_tp = l.tp_size / l.attn_dp;
            LoadOnlyGroup attn_group(l.tp_rank % attn_tp, attn_tp);
            if (l.attn_dp > 1) {
                o.dp_attention = {l.tp_rank / attn_tp, l.attn_dp, l.tp_rank % attn_tp, attn_tp,
                                  attn_tp > 1 ? &attn_group : nullptr, &group, l.dp_lm_head};
            }
            o.dense_mlp_replicated = l.dense_replicated;
            if (l.all_to_all) o.moe.backend = layers::MoeA2aBackend::kAllToAll;
            auto model = models::load_model(o);

            RankPlace place;
            place.tp_rank = l.tp_rank;
            place.tp_size = l.tp_size;
            place.pp_rank = l.pp_rank;
            place.pp_size = l.pp_size;
            place.ep_rank = o.moe.ep_rank;
            place.ep_size = l.ep_size;
            place.moe_tp_rank = o.moe.moe_tp_rank;
            place.moe_tp_size = o.moe.moe_tp_size;
            if (l.attn_dp > 1) {
                place.attn_tp_rank = l.tp_rank % attn_tp;
                place.attn_tp_size = attn_tp;
                place.dp_attention = true;
                place.dp_lm_head = l.dp_lm_head;
            }
            place.dense_mlp_replicated = l.dense_replicated;
            place.moe_all_to_all = l.all_to_all;
            auto size = rank_size(*config, place, *types);
            // Both refuse a split the same way (an fp8 block cut in two), or both agree on the sizes.
            ASSERT_EQ(size.ok(), model.ok()) << (model.ok() ? size.status() : model.status()).to_string();
            if (!model.ok()) {
                EXPECT_EQ(size.status().message().substr(0, 60), model.status().message().substr(0, 60));
                ++refused_;
                continue;
            }
            EXPECT_EQ(size->weight_bytes, static_cast<std::int64_t>((*model)->weight_bytes()));
            EXPECT_EQ(size->kv_bytes_per_token, (*model)->kv_cache_shape().bytes_per_token());
        }
    }
};

TEST_P(ModelSizeTest, EqualsTheLoadedModel) {
    const std::string arch = GetParam();
    check(make(arch, "bf16", 0), "", "auto");
    check(make(arch, "f32", 0), "", "auto");
    check(make(arch, "bf16", 0), "fp8", "fp8_e4m3");
    check(make(arch, "bf16", 32), "", "auto");
    EXPECT_GT(refused_, 0) << "the tiny models' 128-wide blocks cannot be split over TP 2";
}

INSTANTIATE_TEST_SUITE_P(Architectures, ModelSizeTest,
                         ::testing::Values("llama", "qwen2", "qwen3", "qwen3-moe", "qwen2-moe", "mixtral", "deepseek-v2",
                                           "deepseek-v3"),
                         [](const auto& info) {
                             std::string name = info.param;
                             for (char& c : name)
                                 if (c == '-') c = '_';
                             return name;
                         });

}  // namespace
}  // namespace tessera::planner
