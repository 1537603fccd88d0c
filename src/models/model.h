#pragma once
// models/model.h — the Model interface: one forward step of a run of tokens of one sequence
// over its KV cache, returning logits. Models are immutable after load; forward() is called
// by one thread at a time per KvCache (the executor thread).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kvcache/kv_cache.h"
#include "eplb/eplb_options.h"
#include "layers/dp_attention.h"
#include "layers/parallel.h"
#include "loader/model_config.h"
#include "models/memory_release.h"
#include "models/weights_source.h"

namespace tessera {
class ThreadPool;
}
namespace tessera::dist {
class ProcessGroup;
}

namespace tessera::models {

enum class LogitsMode { kNone, kLast, kAll };

// One sequence of a batched forward: its new tokens are consecutive in BatchInput::tokens.
struct SequenceInput {
    std::int64_t n_tokens = 0;
    std::int64_t start_pos = 0;            // position of its first new token
    const std::int32_t* slots = nullptr;   // I32 [start_pos + n_tokens]: KV row of every position
                                           // (nullptr: position p is row p)
    LogitsMode logits = LogitsMode::kLast;
    // Return the final-normed hidden states of its last `hidden_rows` new tokens (0: none) in
    // BatchInput::hidden_out, last stage only (SGLang's return_hidden_states).
    std::int64_t hidden_rows = 0;
    // kAll: logits rows for the new tokens from this one on (prompt log-probabilities need the
    // rows from logprob_start_len, not the cached or earlier ones).
    std::int64_t first_logit = 0;
};

// The logits rows `seq` asks for: n_tokens - first_logit (kAll), 1 (kLast) or none.
inline std::int64_t logit_rows(const SequenceInput& seq) {
    if (seq.n_tokens <= 0) return 0;
    if (seq.logits == LogitsMode::kAll) return seq.n_tokens - std::min(seq.first_logit, seq.n_tokens);
    return seq.logits == LogitsMode::kLast ? 1 : 0;
}

struct BatchInput {
    std::span<const std::int32_t> tokens;  // I32 [Σ n_tokens]
    std::vector<SequenceInput> seqs;
    // Pipeline stages after the first: f32 [Σ n_tokens, hidden_size], the residual stream the
    // previous stage produced (its `out`). Empty on the first stage, which embeds `tokens`.
    std::span<const float> hidden_in;
    // Applied by the MoE models before the pass; a step with no tokens carries only this.
    eplb::ExpertRecordCommand expert_record = eplb::ExpertRecordCommand::kNone;
    // A control step (no tokens) of a weight update (models/reloadable_model.h). Null: none.
    const WeightsSource* load_weights = nullptr;
    // Output of its kLoad phase, when not null: whether this rank's TP group, and every
    // earlier pipeline stage, loaded its share (what a pipeline stage tells the next).
    bool* weights_loaded = nullptr;
    // A control step (no tokens) of /release_memory_occupation (models/reloadable_model.h).
    MemoryRelease release_memory;
    // DP-attention: what every attention-DP group runs this step (this rank's group's tokens
    // are the ones above, possibly none). Required when the model was loaded with
    // LoadOptions::dp_attention enabled; null otherwise.
    const layers::DpAttentionStep* dp_attention = nullptr;
    // Output, last stage: f32 [Σ hidden_rows, hidden_size], the rows SequenceInput::hidden_rows
    // asks for, sequence by sequence, each after the final norm (what the LM head reads).
    // Null when no sequence asks.
    std::vector<float>* hidden_out = nullptr;
    // Output, --enable-return-routed-experts: I32 [Σ n_tokens, num_hidden_layers, top_k], the
    // logical experts each new token's MoE layers chose (0 for dense layers). Null: none.
    std::vector<std::int32_t>* routed_experts_out = nullptr;
};

// The part of the model one pipeline stage runs: decoder layers [layer_begin, layer_end);
// the first stage also embeds the tokens, the last applies the final norm and the LM head.
struct StageInfo {
    int layer_begin = 0;
    int layer_end = 0;
    bool first = true;
    bool last = true;
    int num_layers() const { return layer_end - layer_begin; }
};

// A single sequence over a cache of its own (positions are rows).
struct ForwardInput {
    std::span<const std::int32_t> tokens;  // I32 [n_tokens]
    std::int64_t start_pos = 0;            // position of tokens[0]; the cache holds 0..start_pos-1
    bool all_logits = false;               // logits for every token, else only the last
};

class Model {
 public:
    virtual ~Model() = default;
    Model() = default;
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    virtual const loader::ModelConfig& config() const = 0;
    // KV of this stage's layers only (kv_cache_shape().num_layers == stage().num_layers()).
    virtual kvcache::KvCacheShape kv_cache_shape() const = 0;
    virtual StageInfo stage() const = 0;
    virtual DType compute_dtype() const = 0;
    // What the attention and MLP / expert projections hold: compute_dtype(), or fp8 for an FP8
    // checkpoint or under --quantization fp8.
    virtual DType linear_weight_dtype() const { return compute_dtype(); }
    virtual std::size_t weight_bytes() const = 0;
    // Weight bytes streamed from memory for one decode token (what bounds decode speed).
    virtual std::size_t weight_bytes_per_token() const = 0;
    // Multiply-add FLOPs of the linear layers for one token (2 per multiply-add), and of
    // attention for a token at position `pos`: what a forward of n tokens must compute.
    virtual double linear_flops_per_token() const = 0;
    virtual double attention_flops_at(std::int64_t pos) const = 0;
    // Bytes the MoE layers of this rank moved so far (zero for dense models).
    virtual layers::MoeTraffic moe_traffic() const { return {}; }

    // One step over several sequences: every linear layer runs on all their new tokens at
    // once, attention per sequence over its own KV rows. Writes the new tokens' K/V into
    // `kv` (this stage's layers). On the last stage `out` is the logits, f32 [rows,
    // vocab_size] with, per sequence in order, 0, 1 or n_tokens rows as its LogitsMode says
    // (an embedding model, config().is_generation false: f32 [rows, hidden_size], each row the
    // final-normed hidden state scaled to unit L2 norm, SGLang's Pooler with LAST pooling);
    // on other stages it is the hidden states for the next stage, f32 [Σ n_tokens,
    // hidden_size] (LogitsMode is ignored there).
    virtual Status forward(const BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                           std::vector<float>* out) = 0;

    // logits f32 [n_tokens or 1, vocab_size]; writes K/V of the new tokens into `cache`.
    Status forward(const ForwardInput& input, kvcache::KvCache& cache, ThreadPool* pool, std::vector<float>* logits) {
        TSR_RETURN_IF_ERROR(cache.check_fits(input.start_pos, static_cast<std::int64_t>(input.tokens.size())));
        BatchInput batch{input.tokens,
                         {{static_cast<std::int64_t>(input.tokens.size()), input.start_pos, nullptr,
                           input.all_logits ? LogitsMode::kAll : LogitsMode::kLast}}};
        return forward(batch, cache.view(), pool, logits);
    }
};

struct LoadOptions {
    std::string model_path;
    std::string dtype = "auto";  // auto (the checkpoint's), f32, bf16
    // --quantization: "" (the checkpoint's: fp8 when its config.json says so) or "fp8" (an
    // unquantized checkpoint's linear weights become e4m3 in 128 × 128 blocks at load).
    std::string quantization;
    // --kv-cache-dtype: auto (the compute dtype), bf16 / bfloat16, fp8_e4m3, fp8_e5m2.
    std::string kv_cache_dtype = "auto";
    // --quantization-param-path: SGLang's JSON of per-layer KV cache scales ("" for none).
    std::string quantization_param_path;
    // --json-model-override-args: config.json fields replaced before it is read ("" for none).
    std::string json_model_override_args;
    // Tensor parallelism: this rank's place in its TP group, and the group (nullptr when
    // tp_size is 1). The model keeps only its shard of every weight.
    int tp_rank = 0;
    int tp_size = 1;
    dist::ProcessGroup* tp_group = nullptr;
    // Pipeline parallelism: this rank's stage; the model keeps only the stage's layers
    // (reference §6.1). `layer_partition` is SGLANG_PP_LAYER_PARTITION (nullopt: default split).
    int pp_rank = 0;
    int pp_size = 1;
    std::optional<std::string> layer_partition;
    // Expert parallelism: this rank's place in the MoE view of its TP group and the
    // dispatcher; the model keeps only its experts (and its moe_tp slice of each).
    layers::MoeParallel moe;
    // DP-attention (--enable-dp-attention): attention over this rank's attention-TP group on
    // its group's own requests, MLP / MoE over the whole TP group on every group's tokens.
    layers::DpAttentionParallel dp_attention;
    // --moe-dense-tp-size 1: dense MLP layers replicated on every rank (no TP split, no
    // gather under DP-attention).
    bool dense_mlp_replicated = false;
    // --is-embedding: the model serves embeddings (ModelConfig::is_generation false): the last
    // stage's output rows are pooled hidden states, not logits.
    bool is_embedding = false;
    // --enable-return-routed-experts: refused at load for a model without routed experts.
    bool return_routed_experts = false;
    // --load-format: auto / safetensors (the folder's files) or dummy (random weights from
    // config.json alone, for profiling).
    std::string load_format = "auto";
    // Expert placement, dispatch, recording and live rebalancing (MoE models).
    eplb::EplbOptions eplb;
};

// Reads config.json and the weights; fails with errors naming the file and tensor.
StatusOr<std::unique_ptr<Model>> load_model(const LoadOptions& options);

// The KV element type of --kv-cache-dtype for a model computing in `compute_dtype`.
StatusOr<DType> resolve_kv_cache_dtype(const std::string& requested, DType compute_dtype);

// config.json architectures tessera loads (models/registry.cpp).
std::vector<std::string> supported_architectures();

// <model_path>/config.json alone, read as load_model reads it (no weights): for planning.
StatusOr<loader::ModelConfig> read_model_config(const std::string& model_path, std::string_view override_json = "");

}  // namespace tessera::models
