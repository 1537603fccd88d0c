#pragma once
// executor/forward_batch.h — one step of work for the model runner, as the scheduler decides
// it: several sequences, each extending its KV by some new tokens (a prefill chunk, or one
// decode token), with the KV slots already allocated by the scheduler. The runner computes
// the step and samples one next token for every sequence that asks for it.
// Plain data; built by the scheduler thread, read by the executor.

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "eplb/eplb_options.h"
#include "kernels/sampling.h"
#include "models/memory_release.h"
#include "models/weights_source.h"

namespace tessera::executor {

// Which final-normed hidden states a sequence hands back with each sampled token (SGLang's
// return_hidden_states): none; the row that predicted the token; or that, except for the first
// token, which brings every row of its prefill pass (the prompt's uncached tail).
enum class HiddenCapture : std::int8_t { kNone, kLast, kFirstPass };

struct SequenceSampling {
    kernels::SamplingParams params;  // temperature, top_k, top_p, min_p, seed
    float frequency_penalty = 0.0f;  // OpenAI semantics: logit -= f · count(token in output)
    float presence_penalty = 0.0f;   // logit -= p · [token in output]
    int top_logprobs = 0;            // > 0: also return the top-k log-probabilities
    bool logprobs = false;           // return the chosen token's log-probability
    std::vector<std::pair<std::int32_t, float>> logit_bias;  // added to those logits first
    HiddenCapture hidden_states = HiddenCapture::kNone;
    // Constrained decoding: bit t of word t / 32 set when token t may be sampled (others get
    // -inf after penalties, before log-probabilities, as SGLang's vocab_mask); null: any token.
    std::shared_ptr<const std::vector<std::uint32_t>> allowed_tokens;
};

struct ForwardSequence {
    std::string rid;                       // request id (for errors and traces)
    std::vector<std::int32_t> tokens;      // I32 [n_new]: the tokens this step feeds
    std::int64_t start_pos = 0;            // position of tokens[0]
    std::vector<std::int32_t> slots;       // I32 [start_pos + n_new]: KV slot of every position
    bool need_token = false;               // sample a next token after this step
    SequenceSampling sampling;
    std::vector<std::int32_t> output_ids;  // tokens generated so far (penalties, seeded RNG step)
    // Prompt log-probabilities (SGLang's input_token_logprobs): row input_logprob_row + k of
    // this step reports the log-probability of input_logprob_targets[k], the prompt token after
    // it (for a chunk that ends inside the prompt, the last target is the next chunk's first
    // token), of the raw logits, with the best input_top_logprobs of the row. The row a token
    // is sampled from comes after them. Empty: none.
    std::int64_t input_logprob_row = 0;
    std::vector<std::int32_t> input_logprob_targets;
    int input_top_logprobs = 0;
    // SGLang's token_ids_logprob: the sampled row and every prompt log-probability row also
    // report the log-probabilities of these tokens. Empty: none.
    std::vector<std::int32_t> logprob_token_ids;
};

struct ForwardBatch {
    std::vector<ForwardSequence> seqs;
    // An expert-distribution recorder command for every rank (a step with no sequences
    // carries only this).
    eplb::ExpertRecordCommand expert_record = eplb::ExpertRecordCommand::kNone;
    // /update_weights_from_disk: every rank replaces its weights with its share of this folder's
    // (a step with no sequences carrying only this).
    std::optional<models::WeightsSource> load_weights;
    // /release_memory_occupation: every rank drops its weights and gives back its KV pool's
    // pages (a step with no sequences carrying only this).
    models::MemoryRelease release_memory;
    // --enable-return-routed-experts: every sequence's result carries its tokens' experts.
    bool record_routed_experts = false;
    std::int64_t total_new_tokens() const {
        std::int64_t n = 0;
        for (const auto& s : seqs) n += static_cast<std::int64_t>(s.tokens.size());
        return n;
    }
};

struct SampledToken {
    std::int32_t token = -1;
    float logprob = 0.0f;                                      // when requested
    std::vector<std::pair<std::int32_t, float>> top_logprobs;  // when requested, best first
    // ForwardSequence::input_logprob_targets: one log-probability per target, and the best
    // input_top_logprobs of each of their rows, f32 [targets × k] (row by row, best first).
    std::vector<float> input_logprobs;
    std::vector<std::pair<std::int32_t, float>> input_top_logprobs;
    // ForwardSequence::logprob_token_ids: their log-probabilities at the sampled row, and at
    // each prompt row, f32 [targets × ids].
    std::vector<float> token_ids_logprobs;
    std::vector<float> input_token_ids_logprobs;
    // An embedding model's output instead of a token (token stays -1): the sequence's pooled
    // hidden state, f32 [hidden_size], unit L2 norm.
    std::vector<float> embedding;
    // SequenceSampling::hidden_states: f32 [hidden_rows, hidden_size], final-normed.
    std::vector<float> hidden_states;
    std::int64_t hidden_rows = 0;
    // ForwardBatch::record_routed_experts: I32 [n_tokens, num_hidden_layers, top_k], the logical
    // experts each of the step's tokens of this sequence went to (0 for dense layers).
    std::vector<std::int32_t> routed_experts;
};

// What the scheduler drives: the model on this rank (or, in tests, a fake).
class BatchRunner {
 public:
    virtual ~BatchRunner() = default;
    // One SampledToken per sequence (token -1 where need_token is false). An error fails
    // the whole step (the scheduler aborts the batch's requests with it).
    virtual StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) = 0;

    // Pipelined use (pipeline parallelism): launch() starts a step and returns once this
    // rank's part is done and handed on; collect() returns the results of the oldest launched
    // step not yet collected, in launch order. Steps run on every stage in launch order, so a
    // later step may read K/V an earlier one writes. By default launch() runs the whole step
    // at once and collect() hands its result back.
    virtual Status launch(const ForwardBatch& batch);
    virtual StatusOr<std::vector<SampledToken>> collect();

    // Lockstep runners (DP-attention): the attention-DP groups of a TP group run every step
    // together, so a group with nothing to run must still join each step the others run.
    // The driver (engine loop, generate) calls idle_step() whenever an iteration of its loop
    // ran no step (rounds() unchanged): it joins one round, runs an empty batch if another
    // group had work, and returns whether one did (then call again at once; else wait a
    // little for requests before the next round).
    virtual bool lockstep() const { return false; }
    virtual std::int64_t rounds() const { return 0; }
    virtual StatusOr<bool> idle_step() { return false; }
    // Per-group counters for /metrics (lockstep runners only).
    struct LockstepStats {
        std::int64_t forwards = 0;    // forward steps of the TP group (some group had tokens)
        std::int64_t idle_steps = 0;  // of them, run with no tokens of this group while others had some
        std::int64_t tokens = 0;      // this group's tokens through the model
    };
    virtual LockstepStats lockstep_stats() const { return {}; }
    // Whether some attention-DP group ran a prefill in the round of the step collected last
    // (SGLang's ForwardBatch.is_extend_in_batch): lockstep runners only; others see just their
    // own steps, which the scheduler knows.
    virtual bool last_round_extended() const { return false; }

    // SGLang's prefill delayer (managers/prefill_delayer.py negotiate): before deciding whether
    // to admit new requests, each attention-DP group's scheduler states what it could run and
    // learns every group's statement, in group order (`fresh`). One agreement precedes each
    // round of a lockstep runner: the scheduler calls before_round() right before every
    // launch, from the thread that forms the steps; a round no agreement was asked for gets
    // one saying "nothing to admit". Asked again before the next round, agree_prefill()
    // returns the same agreement with `fresh` false. Other runners answer with `mine` alone.
    struct PrefillIntent {
        std::int64_t prefillable = 0;      // a waiting request is about to be admitted
        std::int64_t below_watermark = 0;  // prefillable, and KV use under the low watermark
        std::int64_t running = 0;          // requests running
        std::int64_t max_prefill_batch = 0;  // the most requests one prefill of this group admitted
        std::int64_t waiting = 0;          // requests in the queue
    };
    struct PrefillAgreement {
        std::vector<PrefillIntent> groups;
        bool fresh = true;
    };
    virtual StatusOr<PrefillAgreement> agree_prefill(const PrefillIntent& mine) {
        return PrefillAgreement{{mine}, true};
    }
    virtual Status before_round() { return Status::Ok(); }
    // Another group of the lockstep is stopping (its launch got SIGTERM): this one should drain
    // and stop too, since no group can run a step without the others. Any thread.
    virtual bool lockstep_stopping() const { return false; }

    // Set once a step failed in a way no later step can recover from (a collective between
    // ranks timed out or lost a peer: a stalled or dead rank). The server must then end the
    // job rather than fail every request after it one timeout at a time. Ok otherwise.
    const Status& fatal_error() const { return fatal_; }

 protected:
    // Records `s` as the fatal error when it breaks the rank group; returns it.
    Status note_failure(Status s);

 private:
    std::deque<StatusOr<std::vector<SampledToken>>> finished_;  // default launch/collect only
    Status fatal_;
};

}  // namespace tessera::executor
