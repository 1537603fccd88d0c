#pragma once
// front/engine.h — the request front of a leader rank, as SGLang's tokenizer manager with its
// scheduler: implements server::Backend on top of the tokenizer (text, chat template,
// streaming detokenization, stop strings) and the scheduler, which it drives on its own
// thread. HTTP threads call submit/abort; those only
// queue commands for the scheduler thread, which owns the Scheduler and every request's
// output stream and calls the event callbacks.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "executor/forward_batch.h"
#include "front/crash_dump.h"
#include "front/grammar_compiler.h"
#include "front/request_log.h"
#include "front/request_metrics_file.h"
#include "front/sessions.h"
#include "scheduler/scheduler.h"
#include "server/backend.h"
#include "tokenizer/chat_format.h"
#include "front/recv_skipper.h"
#include "tokenizer/output_stream.h"
#include "tokenizer/tokenizer.h"

namespace tessera::front {

struct EngineConfig {
    std::string served_model_name;
    std::string model_path;
    std::string tokenizer_path;
    std::string model_type;    // config.json's, for /model_info
    std::string architecture;  // config.json's architectures[0]
    std::int64_t context_len = 0;
    std::int64_t vocab_size = 0;  // the model's: token ids at or above it are refused
    std::vector<std::int32_t> eos_token_ids;
    // --reasoning-parser: its think-end token, the end of a require_reasoning request's reasoning.
    std::optional<std::int32_t> think_end_token_id;
    // --enable-strict-thinking: the tokens a require_reasoning request may write inside its
    // reasoning (all but the parser's excluded ones; null: no filter), and the reasoning tokens
    // it may write when it gives no thinking_budget (SGLANG_MAX_THINK_TOKENS; negative: no limit).
    std::shared_ptr<const std::vector<std::uint32_t>> thinking_allowed_tokens;
    std::int64_t default_thinking_budget = -1;
    // false under --is-embedding: every request ends with its prompt and answers its embedding.
    bool is_generation = true;
    // The most a request's return_hidden_states may ask for: --return-hidden-states-mode, or
    // full under --enable-return-hidden-states.
    server::HiddenStatesMode max_hidden_states_mode = server::HiddenStatesMode::kNone;
    // --enable-return-routed-experts: requests may set return_routed_experts (else it is
    // ignored, as SGLang ignores it).
    bool return_routed_experts = false;
    std::uint64_t random_seed = 0;
    // The sampling seed of a request that gives none: under --enable-deterministic-inference
    // 42 (SGLang's sampling_batch_info.py), else one drawn from random_seed per request.
    std::optional<std::uint64_t> default_sampling_seed;
    scheduler::SchedulerConfig scheduler;
    std::string startup_info_json = "{}";  // resolved launch settings for /get_server_info
    // What this (the HTTP) rank's memory should hold, set against its resident size in
    // /metrics: its weights, and KV bytes per token of the running and cached tokens.
    std::int64_t weight_bytes = 0;
    std::int64_t kv_bytes_per_token = 0;
    // --expert-balancedness-report-mode prometheus|both: the output rank's report (or null).
    std::shared_ptr<eplb::BalancednessReport> balancedness;
    // Why the expert distribution endpoints cannot work with this launch ("" when they can).
    std::string expert_record_unavailable;
    // Why /update_weights_from_disk and the memory occupation routes cannot work with this
    // launch ("" when they can).
    std::string weight_update_unavailable;
    // --enable-memory-saver: /release_memory_occupation gives the memory back (without it, as
    // SGLang's no-op adapter, a release only drops the prefix cache).
    bool memory_saver = false;
    int stream_interval = 1;          // --stream-interval
    // A request's priority (scheduler.enable_priority_scheduling: when it gives none, this,
    // else the worst) and, without priority scheduling, whether giving one is refused.
    std::optional<std::int64_t> default_priority_value;
    bool abort_on_priority_when_disabled = false;
    bool allow_auto_truncate = false;  // --allow-auto-truncate
    RequestLogOptions request_log;     // --log-requests, --log-requests-level, --log-requests-format
    // --export-metrics-to-file: the --export-metrics-to-file-dir that gets a line per finished
    // request ("": off).
    std::string export_metrics_dir;
    // --crash-dump-folder: where the recent requests are written if the server fails ("": off).
    std::string crash_dump_folder;
    int scheduler_recv_interval = 1;  // --scheduler-recv-interval
    // Constrained decoding: off under --grammar-backend none (such requests are refused); how
    // JSON-constrained output may place whitespace.
    bool grammar_backend = true;
    grammar::JsonWhitespace json_whitespace;
    std::string metric_labels;        // server::metric_labels(): model_name and --extra-metric-labels
};

class Engine final : public server::Backend {
 public:
    // `tokenizer` (null under --skip-tokenizer-init: token ids in and out, no text) and
    // `runner` must outlive the engine; `chat` renders chat requests.
    Engine(EngineConfig config, const tokenizer::Tokenizer* tokenizer, tokenizer::ChatFormat chat,
           executor::BatchRunner& runner);
    ~Engine() override;
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    void start();  // starts the scheduler thread
    void stop();   // stops it (after drain() for a graceful stop); idempotent

    // server::Backend
    Status submit(server::GenerationRequest request, server::EventCallback on_event) override;
    void abort(const std::string& request_id) override;
    void abort_prefixed(const std::string& prefix) override;
    StatusOr<std::vector<std::int32_t>> tokenize(const std::string& text, bool add_special_tokens) const override;
    StatusOr<std::string> detokenize(const std::vector<std::int32_t>& ids, bool skip_special_tokens) const override;
    std::string served_model_name() const override { return config_.served_model_name; }
    std::int64_t max_model_len() const override { return config_.context_len; }
    bool ready() const override { return running_.load() && !draining_.load(); }
    nlohmann::json server_info() const override;
    nlohmann::json model_info() const override;
    std::string metrics_text() const override;
    Status flush_cache() override;
    Status expert_record(ExpertRecordAction action) override;
    Status pause_generation(PauseMode mode) override;
    Status continue_generation() override;
    void update_weights_from_disk(const WeightUpdate& update, std::function<void(Status)> done) override;
    void release_memory_occupation(const MemoryRegions& regions, std::function<void(Status)> done) override;
    void resume_memory_occupation(const MemoryRegions& regions, std::function<void(Status)> done) override;
    Status configure_logging(const LoggingChange& change) override;
    StatusOr<std::string> open_session(const server::OpenSessionParams& params) override;
    void close_session(const std::string& session_id) override;
    void drain() override;

    // --crash-dump-folder: writes the recent and running requests (once); Ok without the flag.
    Status dump_requests(std::string_view why);

    // Set when the ranks can no longer run steps together (a collective timed out or lost a
    // peer: a rank stalled or died). Every request was then ended with this error and the
    // engine stopped; the server should exit non-zero. Ok otherwise.
    Status fatal_error() const;

 private:
    struct Command {
        enum class Kind {
            kAdd, kAbort, kAbortPrefixed, kFlush, kExpertRecord, kSessionClosed, kPause, kContinue, kUpdateWeights,
            kReleaseMemory, kResumeMemory
        } kind;
        scheduler::Req req;  // kAdd
        std::string rid;     // kAbort; kAbortPrefixed: the prefix
        eplb::ExpertRecordCommand record = eplb::ExpertRecordCommand::kNone;  // kExpertRecord
        PauseMode pause = PauseMode::kAbort;                                  // kPause
        WeightUpdate update;                                                  // kUpdateWeights
        MemoryRegions regions;                                                // k*Memory
        std::function<void(Status)> done;                                     // kUpdateWeights, k*Memory
    };
    // Queues a command whose result the loop sets in control_result_, and waits for it (one
    // such command at a time).
    Status control(Command command, std::chrono::seconds timeout, std::string_view what);
    struct StreamParams {
        bool skip_special_tokens = true;
        std::vector<std::string> stop;
        bool logprobs = false;
        server::HiddenStatesMode hidden_states = server::HiddenStatesMode::kNone;
        bool routed_experts = false;
        int interval = 1;
        std::optional<std::string> echo;  // GenerationParams::echo: the prompt's text
        std::vector<std::int32_t> logprob_token_ids;  // GenerationParams::token_ids_logprob
        std::string exported_parameters;  // --export-metrics-to-file: the request's parameters
        std::chrono::steady_clock::time_point received_at;
        std::optional<std::string> session;  // SessionParams::id: the turn is recorded when it ends
    };
    struct Stream {
        server::EventCallback on_event;
        std::optional<tokenizer::OutputStream> output;  // none without a tokenizer
        bool logprobs = false;
        server::HiddenStatesMode hidden_states = server::HiddenStatesMode::kNone;
        // return_routed_experts: the rows so far, sent with the last event.
        std::optional<std::vector<std::int32_t>> routed_experts;
        bool done = false;
        // --stream-interval (SGLang scheduler_output_processor_mixin.py stream_output_generation):
        // with an interval k > 1 an event goes out at output tokens 1, k + 1, 2k + 1, ... and at
        // the end, carrying every token since the one before; `held` gathers them meanwhile.
        int interval = 1;
        std::optional<std::string> echo;  // sent with the first event
        std::vector<std::int32_t> logprob_token_ids;  // GenerationParams::token_ids_logprob
        std::int64_t tokens = 0;
        server::GenerationEvent held;
        std::string logged_output;  // --log-requests: the output so far, as much as the level shows
        std::string exported_parameters;
        std::chrono::steady_clock::time_point received_at;
        std::optional<std::string> session;
        std::vector<std::int32_t> output_ids;  // a session's turn: its output, kept for the next turn
    };

    StatusOr<std::vector<std::int32_t>> prompt_ids(const server::GenerationInput& input) const;
    void push(Command command);
    void loop();
    void on_req_event(const scheduler::ReqEvent& event);  // REQUIRES: scheduler thread
    // Streaming sessions or session references: the scheduler keeps KV for sessions until
    // they close.
    bool keeps_session_kv() const {
        return config_.scheduler.enable_streaming_session || config_.scheduler.enable_session_radix_cache;
    }
    // Ends every request with `why` and refuses new ones. REQUIRES: scheduler thread.
    void fail_everything(const Status& why);
    // The oldest pending /update_weights_from_disk, once nothing runs or generation is paused:
    // loads, drops the cache, answers, and admits again after the last. REQUIRES: scheduler thread.
    void update_weights();
    // Queues a weight update or memory command, or answers it at once when this launch cannot
    // run it or the server is stopping.
    void push_weights_command(Command command);
    // update_weights while one is pending and nothing runs (or generation is paused).
    void run_ready_weight_updates();
    // /release_memory_occupation and /resume_memory_occupation. REQUIRES: scheduler thread.
    Status release_memory(const MemoryRegions& regions);
    Status resume_memory(const MemoryRegions& regions);
    // Admission waits while a weight update is pending or memory is released.
    void hold_admission_while_needed();

    const EngineConfig config_;
    RequestLog request_log_;  // its settings change through configure_logging (thread-safe)
    std::unique_ptr<RequestMetricsFile> metrics_file_;  // --export-metrics-to-file
    std::unique_ptr<CrashDump> crash_dump_;             // --crash-dump-folder
    const tokenizer::Tokenizer* tokenizer_;
    // Ids a request may give: the tokenizer's vocabulary, or without one the model's.
    std::int64_t vocab_size() const { return tokenizer_ ? tokenizer_->vocab_size() : config_.vocab_size; }
    const tokenizer::ChatFormat chat_;
    std::unique_ptr<GrammarCompiler> grammar_compiler_;  // null without a tokenizer
    SessionStore sessions_;  // /open_session
    executor::BatchRunner& runner_;  // the scheduler drives it; lockstep runners also get idle steps
    scheduler::Scheduler scheduler_;  // scheduler thread only

    std::mutex control_mu_;  // one control() at a time
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Command> inbox_;                                           // GUARDED_BY(mu_)
    std::unordered_map<std::string, server::EventCallback> pending_;     // GUARDED_BY(mu_)
    std::unordered_map<std::string, StreamParams> stream_params_;        // GUARDED_BY(mu_)
    std::mt19937_64 seed_rng_;                                            // GUARDED_BY(mu_)
    scheduler::SchedulerStats stats_;                                     // GUARDED_BY(mu_)
    bool idle_ = true;                                                    // GUARDED_BY(mu_)
    // Lockstep runner only: the last round had another group's work, so join the next at once.
    bool peers_busy_ = false;  // scheduler thread only
    int idle_rounds_ = 0;      // consecutive rounds with no work anywhere; scheduler thread only
    RecvSkipper recv_skipper_;                                    // scheduler thread only
    scheduler::StepKind last_step_ = scheduler::StepKind::kIdle;  // scheduler thread only
    std::optional<bool> flush_result_;                                    // GUARDED_BY(mu_)
    std::optional<Status> control_result_;                                // GUARDED_BY(mu_)
    bool paused_ = false;  // /pause_generation until /continue_generation; GUARDED_BY(mu_)
    std::string model_path_;  // /model_info's: the launch's, then the last weight update's; GUARDED_BY(mu_)
    // Weight updates waiting for the running requests (admission held meanwhile), in arrival
    // order (SGLang's writer lock takes them one at a time), and their answers.
    struct PendingUpdate {
        WeightUpdate update;
        std::function<void(Status)> done;
    };
    std::deque<PendingUpdate> pending_updates_;  // scheduler thread only
    MemoryRegions released_;  // given back by /release_memory_occupation, not resumed yet; scheduler thread only
    Status fatal_;                                                        // GUARDED_BY(mu_)

    std::unordered_map<std::string, Stream> streams_;  // scheduler thread only
    std::vector<std::string> stop_matched_;            // scheduler thread only: abort after step
    std::atomic<bool> running_{false};
    std::atomic<bool> draining_{false};
    std::atomic<bool> stop_requested_{false};
    std::thread thread_;
};

}  // namespace tessera::front
