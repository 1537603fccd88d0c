// Loading generated models end to end, and the errors a user sees for broken model folders:
// each names the file and the tensor or field at fault.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/make_model.h"
#include "base/thread_pool.h"
#include "executor/generator.h"
#include "loader/safetensors.h"
#include "models/model.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class ModelFolderTest : public ::testing::Test {
 protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("tessera_model_test_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string make(const std::string& arch, const std::string& dtype = "f32", std::int64_t fp8_block = 0) {
        app::MakeModelOptions o;
        o.arch = arch;
        o.dtype = dtype;
        o.seed = 3;
        o.fp8_block = fp8_block;
        o.out = (dir_ / (arch + (fp8_block ? "_fp8" : ""))).string();
        EXPECT_TRUE(app::make_model(o).ok());
        return o.out;
    }

    // Rewrites model.safetensors of `folder` after `edit` changed the tensor list.
    void rewrite_tensors(const std::string& folder,
                         const std::function<void(std::vector<loader::TensorToWrite>&)>& edit) {
        const std::string path = folder + "/model.safetensors";
        std::vector<loader::TensorToWrite> tensors;
        {
            auto file = loader::SafetensorsFile::open(path);
            ASSERT_TRUE(file.ok());
            for (const auto& [name, t] : (*file)->tensors()) {
                loader::TensorToWrite w{name, t.dtype, t.shape, {}};
                w.bytes.assign(t.data, t.data + t.bytes);
                tensors.push_back(std::move(w));
            }
        }
        edit(tensors);
        ASSERT_TRUE(loader::write_safetensors(path, tensors).ok());
    }

    Status load_error(const std::string& folder) {
        auto model = models::load_model({folder, "auto"});
        EXPECT_FALSE(model.ok()) << "loading " << folder << " should fail";
        return model.ok() ? Status::Ok() : model.status();
    }

    fs::path dir_;
};

TEST_F(ModelFolderTest, MissingTensorNamesTheTensorAndTheFile) {
    const std::string m = make("llama");
    rewrite_tensors(m, [](auto& tensors) {
        std::erase_if(tensors, [](const auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
    });
    Status s = load_error(m);
    EXPECT_NE(s.message().find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s.message();
}

TEST_F(ModelFolderTest, WrongShapeSaysWhatConfigImplies) {
    const std::string m = make("qwen2");
    rewrite_tensors(m, [](auto& tensors) {
        for (auto& t : tensors) {
            if (t.name == "model.layers.0.self_attn.k_proj.bias") {
                t.shape = {32};
                t.bytes.resize(32 * 4);
            }
        }
    });
    Status s = load_error(m);
    EXPECT_NE(s.message().find("'model.layers.0.self_attn.k_proj.bias' has shape [32], but config.json implies [64]"),
              std::string::npos)
        << s.message();
}

TEST_F(ModelFolderTest, UnsupportedDtypeIsNamed) {
    const std::string m = make("qwen3");
    // An I8 tensor cannot be produced by our writer; write the header by hand.
    const std::string header = R"({"model.norm.weight":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})";
    std::ofstream out(m + "/model.safetensors", std::ios::binary | std::ios::trunc);
    const std::uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << "abcd";
    out.close();
    Status s = load_error(m);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_NE(s.message().find("tensor 'model.norm.weight' has dtype I8; supported dtypes: F32, BF16, F16"),
              std::string::npos)
        << s.message();
}

TEST_F(ModelFolderTest, TruncatedFileIsReportedAsSuch) {
    const std::string m = make("qwen3");
    const std::string path = m + "/model.safetensors";
    fs::resize_file(path, fs::file_size(path) / 2);
    Status s = load_error(m);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("truncated file"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
    fs::resize_file(path, 5);
    s = load_error(m);
    EXPECT_NE(s.message().find("truncated file"), std::string::npos) << s.message();
}

TEST_F(ModelFolderTest, UnsupportedArchitectureListsTheSupportedOnes) {
    const std::string m = make("llama");
    nlohmann::json config;
    std::ifstream(m + "/config.json") >> config;
    config["architectures"] = {"MambaForCausalLM"};
    std::ofstream(m + "/config.json") << config.dump();
    Status s = load_error(m);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_NE(s.message().find("unsupported architecture MambaForCausalLM; supported: LlamaForCausalLM"),
              std::string::npos)
        << s.message();
}

// DeepSeek keeps one latent row per token and layer (kv_lora_rank + qk_rope_head_dim) and no
// V: SGLang's MLA cell size.
// The small presets' tensors have the shapes their config.json implies; Qwen2's config
// carries no head_dim, so its heads are hidden / heads wide. One layer keeps it quick.
TEST_F(ModelFolderTest, SmallPresetsLoad) {
    for (const std::string arch : {"qwen2", "qwen2-moe"}) {
        app::MakeModelOptions o;
        o.arch = arch;
        o.preset = "small";
        o.num_layers = 1;
        o.tokenizer = "none";
        o.out = (dir_ / arch).string();
        ASSERT_TRUE(app::make_model(o).ok()) << arch;
        auto model = models::load_model({o.out, "auto"});
        EXPECT_TRUE(model.ok()) << arch << ": " << model.status().message();
    }
}

TEST_F(ModelFolderTest, DeepseekCachesOneLatentRowPerToken) {
    // make-model's tiny presets: kv_lora_rank 64, qk_rope_head_dim 32 (V2) or 16 (V3).
    for (const auto& [arch, rope] : std::vector<std::pair<std::string, std::int64_t>>{{"deepseek-v2", 32},
                                                                                      {"deepseek-v3", 16}}) {
        const std::string m = make(arch, "bf16");
        models::LoadOptions o;
        o.model_path = m;
        auto model = models::load_model(o);
        ASSERT_TRUE(model.ok()) << model.status().message();
        const kvcache::KvCacheShape shape = (*model)->kv_cache_shape();
        EXPECT_EQ(shape.kind, kvcache::KvKind::kLatent) << arch;
        EXPECT_FALSE(shape.has_v());
        EXPECT_EQ(shape.row_floats(), 64 + rope) << arch;
        EXPECT_EQ(shape.bytes_per_token(), 3 * (64 + rope) * 2) << arch << ": 3 layers of bf16 latents";
    }
}

// An FP8 checkpoint keeps its projections in one byte per weight (plus scales), and every
// broken piece of its format is named: a missing or misshapen scale, another quant_method.
TEST_F(ModelFolderTest, Fp8CheckpointLoadsAndItsErrorsNameTheTensor) {
    const std::string bf16 = make("qwen3", "bf16");
    const std::string fp8 = make("qwen3", "bf16", 32);
    auto plain = models::load_model({bf16, "auto"});
    auto quantized = models::load_model({fp8, "auto"});
    ASSERT_TRUE(plain.ok() && quantized.ok()) << quantized.status().message();
    EXPECT_EQ((*quantized)->linear_weight_dtype(), DType::kF8E4M3);
    EXPECT_EQ((*quantized)->compute_dtype(), DType::kBF16) << "norms and embeddings stay bf16";
    EXPECT_LT((*quantized)->weight_bytes(), (*plain)->weight_bytes() * 3 / 4);

    rewrite_tensors(fp8, [](auto& tensors) {
        std::erase_if(tensors, [](const auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight_scale_inv"; });
    });
    Status s = load_error(fp8);
    EXPECT_NE(s.message().find("fp8 tensor 'model.layers.1.mlp.up_proj.weight' has no "
                               "'model.layers.1.mlp.up_proj.weight_scale_inv'"),
              std::string::npos)
        << s.message();

    const std::string fp8b = make("llama", "bf16", 32);
    rewrite_tensors(fp8b, [](auto& tensors) {
        for (auto& t : tensors) {
            if (t.name == "model.layers.0.self_attn.o_proj.weight_scale_inv") {
                t.shape = {2, 2};
                t.bytes.resize(16);
            }
        }
    });
    s = load_error(fp8b);
    EXPECT_NE(s.message().find("'model.layers.0.self_attn.o_proj.weight_scale_inv' has shape [2, 2], but a [128, 128] "
                               "weight in 32 x 32 blocks (weight_block_size) needs [4, 4] floats"),
              std::string::npos)
        << s.message();

    nlohmann::json config;
    std::ifstream(bf16 + "/config.json") >> config;
    config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
    std::ofstream(bf16 + "/config.json") << config.dump();
    s = load_error(bf16);
    EXPECT_NE(s.message().find("quant_method \"awq\" is not supported"), std::string::npos) << s.message();
}

// --quantization fp8 turns an unquantized checkpoint's projections into e4m3 128 x 128 blocks
// (the tiny llama's 128-wide layers are one block each); other methods are refused.
TEST_F(ModelFolderTest, QuantizationFp8QuantizesAtLoad) {
    const std::string m = make("llama", "bf16");
    models::LoadOptions o;
    o.model_path = m;
    auto plain = models::load_model(o);
    o.quantization = "fp8";
    auto quantized = models::load_model(o);
    ASSERT_TRUE(plain.ok() && quantized.ok()) << quantized.status().message();
    EXPECT_EQ((*plain)->linear_weight_dtype(), DType::kBF16);
    EXPECT_EQ((*quantized)->linear_weight_dtype(), DType::kF8E4M3);
    EXPECT_LT((*quantized)->weight_bytes(), (*plain)->weight_bytes());
    o.quantization = "gptq";
    auto refused = models::load_model(o);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("--quantization gptq is not supported"), std::string::npos);
}

TEST_F(ModelFolderTest, MissingFolderAndBadConfigFields) {
    Status s = load_error((dir_ / "nothing").string());
    EXPECT_NE(s.message().find("no config.json"), std::string::npos) << s.message();
    const std::string m = make("qwen3");
    nlohmann::json config;
    std::ifstream(m + "/config.json") >> config;
    config["num_key_value_heads"] = 3;
    std::ofstream(m + "/config.json") << config.dump();
    s = load_error(m);
    EXPECT_NE(s.message().find("num_attention_heads (4) must be a multiple of num_key_value_heads (3)"),
              std::string::npos)
        << s.message();
}

// --json-model-override-args: its top-level fields replace config.json's before it is read,
// and an override that breaks the config is reported as coming from the flag.
TEST_F(ModelFolderTest, JsonModelOverrideArgsReplaceConfigFields) {
    const std::string m = make("qwen3");
    models::LoadOptions options{m, "auto"};
    options.json_model_override_args = R"({"max_position_embeddings": 77, "rope_theta": 500.0})";
    auto model = models::load_model(options);
    ASSERT_TRUE(model.ok()) << model.status().message();
    EXPECT_EQ((*model)->config().max_position_embeddings, 77);
    EXPECT_EQ((*model)->config().rope_theta, 500.0);
    auto plain = models::read_model_config(m);
    ASSERT_TRUE(plain.ok());
    EXPECT_NE(plain->max_position_embeddings, 77);

    options.json_model_override_args = R"({"num_key_value_heads": 3})";
    Status s = models::load_model(options).status();
    EXPECT_NE(s.message().find("(with --json-model-override-args)"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("must be a multiple of num_key_value_heads (3)"), std::string::npos) << s.message();
    EXPECT_FALSE(models::read_model_config(m, "[1]").ok());
}

// The KV cache path must give the logits of a full recompute, with any thread count.
TEST_F(ModelFolderTest, DecodeWithCacheEqualsFullRecompute) {
    for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
        auto model = models::load_model({make(arch), "auto"});
        ASSERT_TRUE(model.ok()) << model.status().message();
        const std::vector<std::int32_t> prompt = {5, 17, 99, 3, 250, 8, 1, 42, 7};
        executor::GenerateOptions gen;
        gen.max_new_tokens = 6;
        gen.capture_logits = true;
        gen.ignore_eos = true;
        ThreadPool two(2);
        auto cached = executor::generate(**model, prompt, gen, &two);
        ASSERT_TRUE(cached.ok());
        auto single = executor::generate(**model, prompt, gen, nullptr);
        ASSERT_TRUE(single.ok());
        EXPECT_EQ(cached->output_ids, single->output_ids) << arch;

        std::vector<std::int32_t> full = prompt;
        full.insert(full.end(), cached->output_ids.begin(), cached->output_ids.end() - 1);
        kvcache::KvCache cache((*model)->kv_cache_shape(), static_cast<std::int64_t>(full.size()));
        std::vector<float> logits;
        ASSERT_TRUE((*model)->forward({full, 0, true}, cache, nullptr, &logits).ok());
        ASSERT_EQ(logits.size(), cached->logits.size());
        double max_diff = 0;
        for (std::size_t i = 0; i < logits.size(); ++i)
            max_diff = std::max(max_diff, double(std::abs(logits[i] - cached->logits[i])));
        EXPECT_LT(max_diff, 1e-3) << arch;
    }
}

// A batch of sequences in different phases (a prefill, a chunk after a cached prefix, a
// decode step) over one shared, scattered KV pool gives each sequence's own logits.
TEST_F(ModelFolderTest, BatchedForwardOverSharedSlotsEqualsSeparateForwards) {
    auto model = models::load_model({make("qwen2"), "auto"});
    ASSERT_TRUE(model.ok()) << model.status().message();
    models::Model& m = **model;
    const std::vector<std::vector<std::int32_t>> seqs = {{5, 9, 13, 2, 7}, {100, 200, 300, 400, 500, 600, 700}, {42, 43}};
    const std::vector<std::int64_t> cached = {0, 4, 1};  // tokens already in the pool before this step
    // Reference: each sequence alone, all logits of its full token list.
    std::vector<std::vector<float>> expected;
    for (const auto& s : seqs) {
        kvcache::KvCache cache(m.kv_cache_shape(), static_cast<std::int64_t>(s.size()));
        std::vector<float> logits;
        ASSERT_TRUE(m.forward({s, 0, true}, cache, nullptr, &logits).ok());
        expected.push_back(logits);
    }
    // The pool: 64 rows, each sequence's positions scattered over it.
    const std::int64_t rows = 64;
    kvcache::KvCache pool(m.kv_cache_shape(), rows);
    std::vector<std::vector<std::int32_t>> slots(seqs.size());
    std::int32_t k = 0;  // 37 is coprime with 64: every position gets its own row
    for (std::size_t i = 0; i < seqs.size(); ++i)
        for (std::size_t p = 0; p < seqs[i].size(); ++p) slots[i].push_back(static_cast<std::int32_t>((k++ * 37 + 5) % rows));
    // Step 1: the cached prefixes.
    models::BatchInput prefix;
    std::vector<std::int32_t> prefix_tokens;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        if (cached[i] == 0) continue;
        prefix_tokens.insert(prefix_tokens.end(), seqs[i].begin(), seqs[i].begin() + cached[i]);
        prefix.seqs.push_back({cached[i], 0, slots[i].data(), models::LogitsMode::kNone});
    }
    prefix.tokens = prefix_tokens;
    std::vector<float> logits;
    ASSERT_TRUE(m.forward(prefix, pool.view(), nullptr, &logits).ok());
    EXPECT_TRUE(logits.empty());
    // Step 2: the rest of every sequence in one batch, all logits.
    models::BatchInput step;
    std::vector<std::int32_t> step_tokens;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        step_tokens.insert(step_tokens.end(), seqs[i].begin() + cached[i], seqs[i].end());
        step.seqs.push_back({static_cast<std::int64_t>(seqs[i].size()) - cached[i], cached[i], slots[i].data(),
                             models::LogitsMode::kAll});
    }
    step.tokens = step_tokens;
    ThreadPool two(2);
    ASSERT_TRUE(m.forward(step, pool.view(), &two, &logits).ok());
    const std::int64_t vocab = m.config().vocab_size;
    std::size_t row = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        for (std::size_t p = cached[i]; p < seqs[i].size(); ++p, ++row) {
            for (std::int64_t v = 0; v < vocab; ++v)
                ASSERT_NEAR(logits[row * vocab + v], expected[i][p * vocab + v], 1e-4) << "seq " << i << " pos " << p;
        }
    }
    EXPECT_EQ(row * vocab, logits.size());
}

}  // namespace
}  // namespace tessera
