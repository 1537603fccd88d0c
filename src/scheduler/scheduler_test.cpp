// Scheduler tests without a model: FakeRunner computes each next token from the K/V slots it
// is given, the way a model would — every position's entry is a hash chained from the entry
// of the previous position and its own token, and the output reads all entries in order — so
// the result equals a hash of the full token history only if the scheduler's slot and
// position bookkeeping is right. Outputs are
// compared against that history hash computed directly (reference_next).
// In queued mode the fake behaves like a pipeline: launch() only queues a step and collect()
// computes the oldest, so several steps are in flight and a step reads K/V that only the
// steps launched before it have written.

#include "scheduler/scheduler.h"

#include <deque>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <unordered_map>

#include <gtest/gtest.h>

#include "executor/future_tokens.h"

namespace tessera::scheduler {
namespace {

using executor::ForwardBatch;
using executor::SampledToken;
using Tokens = std::vector<std::int32_t>;

constexpr std::int32_t kVocab = 50000;
constexpr std::uint64_t kChainSeed = 0x9e3779b97f4a7c15ull;

std::uint64_t mix(std::uint64_t prev, std::int32_t token, std::int64_t pos) {
    std::uint64_t h = prev ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(token)) * 0xff51afd7ed558ccdull);
    h ^= static_cast<std::uint64_t>(pos) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 29;
    return h | 1;  // never 0: 0 marks a slot that was never written
}
std::int32_t to_token(std::uint64_t h) { return static_cast<std::int32_t>((h >> 17) % kVocab); }

// "Attention": the next token reads the entries of every position, in order, so a wrong or
// overwritten slot anywhere in the sequence changes it.
std::uint64_t attend(std::uint64_t acc, std::uint64_t entry) {
    return mix(acc ^ entry, 7, 0);
}

std::int32_t reference_next(const Tokens& history) {
    std::uint64_t h = kChainSeed;
    std::uint64_t acc = 0;
    for (std::size_t i = 0; i < history.size(); ++i) {
        h = mix(h, history[i], static_cast<std::int64_t>(i));
        acc = attend(acc, h);
    }
    return to_token(acc);
}

// The fake's "log-probability" of `target` following position `pos`.
float fake_logprob(std::int64_t pos, std::int32_t target) {
    return -static_cast<float>(pos) - static_cast<float>(target) / 1024.0f;
}

class FakeRunner final : public executor::BatchRunner {
 public:
    explicit FakeRunner(std::int64_t n_rows) : kv_(static_cast<std::size_t>(n_rows), 0) {}

    std::function<void()> before_run;     // e.g. the scheduler's invariant check
    bool fail_next = false;               // inject one failed step
    bool embedding = false;               // an embedding model: results carry the "token" as a row
    std::vector<std::vector<std::string>> batches;  // rids of every batch, in order
    std::vector<std::string> weight_loads;          // the weight updates' steps: "load /path", "commit /path"
    std::vector<models::MemoryRelease> releases;    // the memory releases' steps
    std::int64_t n_partial_chunks = 0;    // sequences run without need_token

    // ---- queued (pipeline) mode -------------------------------------------------------
    bool queued = false;
    std::vector<ForwardBatch> launched;   // every launched batch, in order
    int max_in_flight = 0;
    // A sequence launched while an earlier sequence of its rid that samples a token is
    // still in flight: its input token is not known yet. Unless it is fed as a future token
    // (overlap scheduling), which collect() resolves as the OverlapRunner does.
    int dependency_violations = 0;
    int future_fed = 0;
    int future_fed_after_prefill = 0;  // of them, fed the first token of a prompt in flight
    // Sequences launched while an earlier chunk of the same rid is in flight, and those of
    // them that do not continue it exactly (start_pos, or the slots of the earlier part).
    int overlapped_chunks = 0;
    int chunk_mismatches = 0;

    // ---- DP-attention rounds ---------------------------------------------------------------
    // Another group prefilled in the round of the step collected last (set by the test).
    bool other_group_prefilled = false;
    bool last_round_extended() const override { return other_group_prefilled; }

    // ---- prefill delayer ------------------------------------------------------------------
    // The other attention-DP groups' statements at each agreement (unset: this group alone).
    // Agreements pair with rounds as a DP-attention leader's do.
    std::function<std::vector<PrefillIntent>(int agreement)> other_groups;
    std::vector<PrefillIntent> intents;  // this group's, per agreement
    int rounds_begun = 0;
    int launches_without_round = 0;  // launched with no before_round() since the last launch

    StatusOr<PrefillAgreement> agree_prefill(const PrefillIntent& mine) override {
        if (agreed_for_round_) return PrefillAgreement{last_agreed_, false};
        intents.push_back(mine);
        last_agreed_ = {mine};
        if (other_groups) {
            const std::vector<PrefillIntent> others = other_groups(static_cast<int>(intents.size()) - 1);
            last_agreed_.insert(last_agreed_.end(), others.begin(), others.end());
        }
        agreed_for_round_ = true;
        return PrefillAgreement{last_agreed_, true};
    }
    Status before_round() override {
        if (!agreed_for_round_ && other_groups) (void)agree_prefill({});
        agreed_for_round_ = false;
        round_open_ = true;
        ++rounds_begun;
        return Status::Ok();
    }

    Status launch(const ForwardBatch& batch) override {
        if (!round_open_) ++launches_without_round;
        round_open_ = false;
        launched.push_back(batch);
        if (!queued) return BatchRunner::launch(batch);
        for (const auto& s : batch.seqs) {
            const executor::ForwardSequence* prev = nullptr;
            for (const ForwardBatch& p : pending_)
                for (const auto& q : p.seqs)
                    if (q.rid == s.rid) prev = &q;
            if (prev == nullptr) continue;
            if (prev->need_token) {
                const bool future = s.tokens == Tokens{executor::kFutureToken};
                ++(future ? future_fed : dependency_violations);
                if (future && prev->output_ids.empty()) ++future_fed_after_prefill;
                continue;
            }
            ++overlapped_chunks;
            const auto prev_end = prev->start_pos + static_cast<std::int64_t>(prev->tokens.size());
            if (s.start_pos != prev_end || s.slots.size() < prev->slots.size() ||
                !std::equal(prev->slots.begin(), prev->slots.end(), s.slots.begin()))
                ++chunk_mismatches;
        }
        pending_.push_back(batch);
        max_in_flight = std::max(max_in_flight, static_cast<int>(pending_.size()));
        return Status::Ok();
    }
    StatusOr<std::vector<SampledToken>> collect() override {
        if (!queued) return BatchRunner::collect();
        if (pending_.empty()) return Status::Internal("collect() without a launched step");
        ForwardBatch batch = std::move(pending_.front());
        pending_.pop_front();
        const Status resolved = futures_.resolve(batch);
        StatusOr<std::vector<SampledToken>> result = resolved.ok() ? run(batch) : StatusOr<std::vector<SampledToken>>(resolved);
        futures_.record(batch, result);
        return result;
    }
    // Launched, not yet collected sequences of `rid` (only those sampling a token).
    int in_flight(const std::string& rid, bool token_only = false) const {
        int n = 0;
        for (const ForwardBatch& p : pending_)
            for (const auto& q : p.seqs) n += q.rid == rid && (q.need_token || !token_only) ? 1 : 0;
        return n;
    }

    // Constrained decoding: the first allowed token at or after `token` (wrapping around).
    static std::int32_t allowed_token(std::int32_t token, const executor::SequenceSampling& sampling) {
        if (!sampling.allowed_tokens) return token;
        const auto& mask = *sampling.allowed_tokens;
        for (std::int32_t k = 0; k < kVocab; ++k) {
            const std::int32_t t = (token + k) % kVocab;
            if (static_cast<std::size_t>(t >> 5) < mask.size() && ((mask[t >> 5] >> (t & 31)) & 1u)) return t;
        }
        ADD_FAILURE() << "a mask allows no token";
        return token;
    }
    int masked_samples = 0;

    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) override {
        if (before_run) before_run();
        if (batch.release_memory.any()) {
            EXPECT_TRUE(batch.seqs.empty()) << "a memory release is a step of its own";
            EXPECT_TRUE(pending_.empty()) << "a memory release while steps are in flight";
            releases.push_back(batch.release_memory);
            return std::vector<SampledToken>{};
        }
        if (batch.load_weights) {
            EXPECT_TRUE(batch.seqs.empty()) << "a weight update is a step of its own";
            EXPECT_TRUE(pending_.empty()) << "a weight update while steps are in flight";
            const models::WeightsPhase phase = batch.load_weights->phase;
            weight_loads.push_back(std::string(phase == models::WeightsPhase::kLoad     ? "load "
                                               : phase == models::WeightsPhase::kCommit ? "commit "
                                                                                        : "discard ") +
                                   batch.load_weights->model_path);
            if (phase == models::WeightsPhase::kLoad && batch.load_weights->model_path == "/bad")
                return Status::InvalidArgument("no such folder");
            return std::vector<SampledToken>{};
        }
        if (fail_next) {
            fail_next = false;
            for (const auto& s : batch.seqs) failed_rids_.insert(s.rid);
            return Status::Internal("injected runner failure");
        }
        // Slots written this step must be distinct and not read by any sequence: only a
        // cached prefix (read-only) may be shared between live sequences.
        std::set<std::int32_t> written;
        for (const auto& s : batch.seqs) {
            EXPECT_EQ(static_cast<std::int64_t>(s.slots.size()),
                      s.start_pos + static_cast<std::int64_t>(s.tokens.size())) << s.rid;
            for (std::size_t i = static_cast<std::size_t>(s.start_pos); i < s.slots.size(); ++i) {
                const std::int32_t slot = s.slots[i];
                EXPECT_GT(slot, 0) << s.rid;
                EXPECT_LT(static_cast<std::size_t>(slot), kv_.size()) << s.rid;
                EXPECT_TRUE(written.insert(slot).second) << "slot " << slot << " written twice";
            }
        }
        std::vector<std::string> rids;
        std::vector<SampledToken> out;
        for (const auto& s : batch.seqs) {
            rids.push_back(s.rid);
            for (std::int64_t p = 0; p < s.start_pos; ++p) {
                const std::int32_t slot = s.slots[p];
                EXPECT_EQ(written.count(slot), 0u) << s.rid << ": prefix slot " << slot << " is overwritten";
                // A step launched after a failed one of its request reads what that step did
                // not write; the scheduler ignores its results.
                if (failed_rids_.count(s.rid) == 0) {
                    EXPECT_NE(kv_[slot], 0u) << s.rid << ": reads unwritten slot " << slot;
                }
            }
            std::uint64_t h = s.start_pos == 0 ? kChainSeed : kv_[s.slots[s.start_pos - 1]];
            for (std::size_t i = 0; i < s.tokens.size(); ++i) {
                EXPECT_GE(s.tokens[i], 0) << s.rid << ": a future token reached the model";
                const std::int64_t pos = s.start_pos + static_cast<std::int64_t>(i);
                h = mix(h, s.tokens[i], pos);
                kv_[s.slots[pos]] = h;
            }
            if (!s.need_token) ++n_partial_chunks;
            // A decode step feeds the last output token (resolved from the step before under
            // overlap scheduling, which appends it to output_ids as well).
            if (s.tokens.size() == 1 && !s.output_ids.empty()) {
                EXPECT_EQ(s.tokens[0], s.output_ids.back()) << s.rid << " at " << s.start_pos;
            }
            std::uint64_t acc = 0;
            for (const std::int32_t slot : s.slots) acc = attend(acc, kv_[slot]);
            if (embedding) {
                out.push_back({});
                if (s.need_token) out.back().embedding = {static_cast<float>(to_token(acc)), 1.0f};
            } else {
                out.push_back({.token = s.need_token ? allowed_token(to_token(acc), s.sampling) : -1});
                if (s.sampling.allowed_tokens) ++masked_samples;
            }
            // Prompt log-probabilities: fake_logprob of each row's position and target, and as
            // its best ones the position and the row.
            for (std::size_t k = 0; k < s.input_logprob_targets.size(); ++k) {
                const std::int64_t pos = s.start_pos + s.input_logprob_row + static_cast<std::int64_t>(k);
                out.back().input_logprobs.push_back(fake_logprob(pos, s.input_logprob_targets[k]));
                for (int t = 0; t < s.input_top_logprobs; ++t)
                    out.back().input_top_logprobs.emplace_back(static_cast<std::int32_t>(pos), static_cast<float>(t));
                for (std::int32_t id : s.logprob_token_ids)
                    out.back().input_token_ids_logprobs.push_back(fake_logprob(pos, id));
            }
            // token_ids_logprob at the sampled row: the ids asked for, as values.
            if (s.need_token)
                for (std::int32_t id : s.logprob_token_ids)
                    out.back().token_ids_logprobs.push_back(static_cast<float>(id));
            // --enable-return-routed-experts: each token's "experts" are its id and position.
            for (std::size_t i = 0; batch.record_routed_experts && i < s.tokens.size(); ++i) {
                out.back().routed_experts.push_back(s.tokens[i]);
                out.back().routed_experts.push_back(static_cast<std::int32_t>(s.start_pos) + static_cast<int>(i));
            }
        }
        batches.push_back(std::move(rids));
        return out;
    }

 private:
    bool agreed_for_round_ = false;
    bool round_open_ = false;
    std::vector<PrefillIntent> last_agreed_;
    std::vector<std::uint64_t> kv_;  // per slot: the chained hash standing in for K/V
    std::deque<ForwardBatch> pending_;  // queued mode: launched, not yet collected
    executor::FutureTokens futures_;
    std::set<std::string> failed_rids_;
};

struct Result {
    std::vector<std::int32_t> tokens;
    std::vector<float> embedding;
    std::int64_t reasoning_tokens = -1;
    std::vector<std::int32_t> routed_experts;  // every event's, in order
    FinishReason reason = FinishReason::kNone;
    std::string error;
    std::int64_t cached_tokens = -1;
    int n_events = 0;
    // ReqEvent::has_input_logprobs: the tokens, values and best ones that came (once).
    int input_logprob_events = 0;
    std::vector<std::int32_t> input_tokens;
    std::vector<float> input_logprobs;
    std::vector<std::pair<std::int32_t, float>> input_top;
    std::vector<float> input_chosen;              // token_ids_logprob's at the prompt's rows
    std::vector<std::vector<float>> chosen;       // and at each output token
};

// Drives a scheduler to completion, checking the KV invariants before every batch and the
// allocator at the end.
class Harness {
 public:
    explicit Harness(const SchedulerConfig& cfg, bool queued = false)
        : runner_(cfg.max_total_num_tokens + cfg.page_size),
          sched_(cfg, runner_, [this] { return now_ += 0.01; }) {
        runner_.queued = queued;
        runner_.before_run = [this] {
            const Status s = sched_.check_invariants();
            EXPECT_TRUE(s.ok()) << s.to_string();
        };
    }
    // `key` names the result when a rid is reused; defaults to the rid.
    void add(Req req, std::string key = {}) {
        const std::string rid = req.rid;
        if (key.empty()) key = rid;
        req.sink = [this, rid, key](const ReqEvent& ev) {
            Result& r = results_[key];
            ++r.n_events;
            EXPECT_EQ(ev.rid, rid);
            r.routed_experts.insert(r.routed_experts.end(), ev.routed_experts.begin(), ev.routed_experts.end());
            if (ev.has_input_logprobs) {
                ++r.input_logprob_events;
                r.input_tokens.assign(ev.input_logprob_tokens.begin(), ev.input_logprob_tokens.end());
                r.input_logprobs.assign(ev.input_logprobs.begin(), ev.input_logprobs.end());
                r.input_top.assign(ev.input_top_logprobs.begin(), ev.input_top_logprobs.end());
                r.input_chosen.assign(ev.input_token_ids_logprobs.begin(), ev.input_token_ids_logprobs.end());
            }
            if (ev.token) r.chosen.push_back(ev.token->token_ids_logprobs);
            if (ev.token && !ev.token->embedding.empty()) {
                r.embedding = ev.token->embedding;
            } else if (ev.token) {
                r.tokens.push_back(ev.token->token);
            }
            if (ev.finished) {
                finish_order_.push_back(key);
                EXPECT_EQ(r.reason, FinishReason::kNone) << rid << " finished twice";
                r.reason = ev.finish_reason;
                r.error = ev.error;
                r.cached_tokens = ev.cached_tokens;
                r.reasoning_tokens = ev.reasoning_tokens;
                EXPECT_EQ(ev.completion_tokens, static_cast<std::int64_t>(r.tokens.size()));
            }
        };
        ASSERT_TRUE(sched_.add_request(std::move(req)).ok());
    }
    void run(int max_steps = 100000) {
        for (int i = 0; i < max_steps && !sched_.idle(); ++i) {
            sched_.step();
            const Status s = sched_.check_invariants();
            EXPECT_TRUE(s.ok()) << s.to_string();
            const SchedulerStats st = sched_.stats();
            max_running_ = std::max(max_running_, st.num_running_reqs);
        }
        ASSERT_TRUE(sched_.idle());
        expect_pool_whole();
    }
    // Steps (checking the invariants after each) until `done`, at most 200; returns done().
    bool step_until(const std::function<bool()>& done) {
        for (int i = 0; i < 200 && !done(); ++i) {
            sched_.step();
            const Status s = sched_.check_invariants();
            EXPECT_TRUE(s.ok()) << s.to_string();
        }
        return done();
    }
    void expect_pool_whole() {
        const Status s = sched_.check_invariants();
        EXPECT_TRUE(s.ok()) << s.to_string();
        const SchedulerStats st = sched_.stats();
        if (sched_.idle()) {
            // Nothing is locked when idle but what streaming sessions hold: every other slot is
            // free or evictable cache.
            EXPECT_EQ(st.available_tokens + st.evictable_tokens + st.streaming_session_held_tokens,
                      st.max_total_num_tokens);
        }
    }

    double now_ = 0.0;  // before sched_: its constructor reads the clock
    FakeRunner runner_;
    Scheduler sched_;
    std::map<std::string, Result> results_;
    std::vector<std::string> finish_order_;
    std::int64_t max_running_ = 0;
};

Tokens prompt(std::int32_t seed, std::int64_t n) {
    Tokens t(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>((seed * 7919 + i * 104729) % kVocab);
    return t;
}

Req make_req(std::string rid, Tokens input, std::int64_t max_new, bool ignore_eos = true) {
    Req r;
    r.rid = std::move(rid);
    r.input_ids = std::move(input);
    r.max_new_tokens = max_new;
    r.ignore_eos = ignore_eos;
    return r;
}

// What the request must produce: the history hash, step by step.
Tokens expected(const Req& req) {
    Tokens history = req.input_ids;
    Tokens out;
    for (std::int64_t k = 0; k < req.max_new_tokens; ++k) {
        const std::int32_t t = reference_next(history);
        out.push_back(t);
        history.push_back(t);
        if (!req.ignore_eos && (std::count(req.eos_token_ids.begin(), req.eos_token_ids.end(), t) ||
                                std::count(req.stop_token_ids.begin(), req.stop_token_ids.end(), t)))
            break;
    }
    return out;
}

// Request "stop", whose eos id is the token it produces k-th (from 0): it stops after k + 1.
Req stops_at(std::size_t k) {
    Req r = make_req("stop", prompt(31, 12), 10, /*ignore_eos=*/false);
    r.eos_token_ids = {expected(make_req("p", prompt(31, 12), 10))[k]};
    return r;
}

SchedulerConfig roomy(std::int64_t page) {
    return {.max_total_num_tokens = 4096, .page_size = page, .max_running_requests = 64,
            .decode_log_interval = 5};
}

// roomy() with overlap scheduling.
SchedulerConfig overlapped(std::int64_t page) {
    SchedulerConfig cfg = roomy(page);
    cfg.overlap_schedule = true;
    return cfg;
}

std::vector<Req> workload(int n, std::int64_t base_len, std::int64_t max_new) {
    std::vector<Req> reqs;
    for (int i = 0; i < n; ++i)
        reqs.push_back(make_req("r" + std::to_string(i), prompt(i + 1, base_len + 3 * i), max_new + i % 5));
    return reqs;
}

class SchedulerTest : public ::testing::TestWithParam<std::int64_t> {
 protected:
    std::int64_t page() const { return GetParam(); }
    // Runs `reqs` under `cfg` and checks every output against the reference.
    std::map<std::string, Result> run_and_check(const SchedulerConfig& cfg, const std::vector<Req>& reqs,
                                                Harness** keep = nullptr, bool queued = false) {
        auto h = std::make_unique<Harness>(cfg, queued);
        for (const Req& r : reqs) h->add(r);
        h->run();
        for (const Req& r : reqs) {
            const Result& got = h->results_[r.rid];
            EXPECT_EQ(got.tokens, expected(r)) << r.rid;
            EXPECT_NE(got.reason, FinishReason::kNone) << r.rid;
        }
        auto results = h->results_;
        last_ = std::move(h);
        if (keep) *keep = last_.get();
        return results;
    }
    std::unique_ptr<Harness> last_;
};

TEST_P(SchedulerTest, GeneratesTheReferenceTokens) {
    auto reqs = workload(6, 10, 12);
    auto res = run_and_check(roomy(page()), reqs);
    for (const Req& r : reqs) EXPECT_EQ(res[r.rid].reason, FinishReason::kLength);
    EXPECT_EQ(last_->sched_.stats().generation_tokens_total + 6,
              std::accumulate(reqs.begin(), reqs.end(), std::int64_t{0},
                              [](std::int64_t a, const Req& r) { return a + r.max_new_tokens; }));
}

TEST_P(SchedulerTest, ChunkedPrefillGivesTheSameTokensAsUnchunked) {
    std::vector<Req> reqs = {make_req("long", prompt(42, 300), 8), make_req("short", prompt(43, 20), 8)};
    SchedulerConfig whole = roomy(page());
    auto a = run_and_check(whole, reqs);
    EXPECT_EQ(last_->runner_.n_partial_chunks, 0);
    SchedulerConfig chunked = roomy(page());
    chunked.chunked_prefill_size = 64;
    auto b = run_and_check(chunked, reqs);
    EXPECT_GE(last_->runner_.n_partial_chunks, 4);  // 300 tokens in chunks of 64
    for (const Req& r : reqs) EXPECT_EQ(a[r.rid].tokens, b[r.rid].tokens);
    // Same without a radix tree (the chunked request keeps its own slots between chunks).
    chunked.disable_radix_cache = true;
    auto c = run_and_check(chunked, reqs);
    for (const Req& r : reqs) EXPECT_EQ(a[r.rid].tokens, c[r.rid].tokens);
}

TEST_P(SchedulerTest, RetractionUnderPressureResumesWithTheSameOutputs) {
    auto reqs = workload(8, 24, 60);
    auto free_run = run_and_check(roomy(page()), reqs);
    EXPECT_EQ(last_->sched_.stats().total_retracted_reqs, 0);

    SchedulerConfig tight = roomy(page());
    tight.max_total_num_tokens = 256;
    tight.new_token_ratio.schedule_conservativeness = 0.3;  // admit aggressively
    auto pressed = run_and_check(tight, reqs);
    EXPECT_GT(last_->sched_.stats().total_retracted_reqs, 0);
    for (const Req& r : reqs) EXPECT_EQ(free_run[r.rid].tokens, pressed[r.rid].tokens) << r.rid;
    // A retraction raises the ratio above its decayed value; idling resets it.
    EXPECT_GT(last_->sched_.stats().new_token_ratio, 0.21);
    EXPECT_EQ(last_->sched_.step(), StepKind::kIdle);
    EXPECT_DOUBLE_EQ(last_->sched_.stats().new_token_ratio, 0.21);
}

TEST_P(SchedulerTest, OneRequestThatCannotFitIsAbortedNotStalled) {
    SchedulerConfig tiny = roomy(page());
    tiny.max_total_num_tokens = 64;
    tiny.clip_max_new_tokens = 1;  // make admission optimistic
    tiny.new_token_ratio.schedule_conservativeness = 0.0;
    Harness h(tiny);
    h.add(make_req("big", prompt(5, 20), 30));
    h.add(make_req("big2", prompt(6, 20), 30));
    h.run();
    int aborted = 0;
    for (auto& [rid, r] : h.results_) aborted += r.reason == FinishReason::kAbort;
    EXPECT_GE(h.sched_.stats().total_retracted_reqs + aborted, 1);
    for (auto& [rid, r] : h.results_) {
        if (r.reason != FinishReason::kAbort) {
            EXPECT_EQ(r.tokens.size(), 30u) << rid;
        }
    }
}

TEST_P(SchedulerTest, LongestPrefixMatchIsAdmittedFirst) {
    for (const SchedulePolicy policy : {SchedulePolicy::kFcfs, SchedulePolicy::kLpm}) {
        SchedulerConfig cfg = roomy(page());
        cfg.schedule_policy = policy;
        cfg.prefill_max_requests = 1;
        Harness h(cfg);
        const Tokens shared = prompt(77, 64);
        h.add(make_req("warm", shared, 2));
        h.run();
        Tokens y = shared;
        y.insert(y.end(), {1, 2, 3, 4, 5});
        h.add(make_req("x", prompt(78, 69), 2));
        h.add(make_req("y", y, 2));
        const auto n_before = h.runner_.batches.size();
        h.run();
        const std::string first = h.runner_.batches[n_before].front();
        EXPECT_EQ(first, policy == SchedulePolicy::kLpm ? "y" : "x");
        EXPECT_EQ(h.results_["y"].cached_tokens, 64);
    }
}

TEST_P(SchedulerTest, MaxRunningRequestsIsRespected) {
    SchedulerConfig cfg = roomy(page());
    cfg.max_running_requests = 3;
    auto reqs = workload(10, 8, 6);
    Harness* h = nullptr;
    run_and_check(cfg, reqs, &h);
    EXPECT_LE(h->max_running_, 3);
    EXPECT_EQ(h->max_running_, 3);
    for (const auto& b : h->runner_.batches) EXPECT_LE(b.size(), 3u);
}

// A request's prompt log-probabilities from logprob_start_len: one event, the prompt's
// tokens from there, and every later position's value and best ones, in order.
void expect_input_logprobs(const Req& req, const Result& got) {
    SCOPED_TRACE(req.rid);
    const auto n = static_cast<std::int64_t>(req.input_ids.size());
    ASSERT_EQ(got.input_logprob_events, 1);
    EXPECT_EQ(got.input_tokens, Tokens(req.input_ids.begin() + req.logprob_start_len, req.input_ids.end()));
    std::vector<float> want, want_chosen;
    std::vector<std::pair<std::int32_t, float>> want_top;
    for (std::int64_t pos = req.logprob_start_len; pos + 1 < n; ++pos) {
        want.push_back(fake_logprob(pos, req.input_ids[pos + 1]));
        for (int t = 0; t < req.input_top_logprobs; ++t) want_top.emplace_back(pos, static_cast<float>(t));
        for (std::int32_t id : req.logprob_token_ids) want_chosen.push_back(fake_logprob(pos, id));
    }
    EXPECT_EQ(got.input_logprobs, want);
    EXPECT_EQ(got.input_top, want_top);
    EXPECT_EQ(got.input_chosen, want_chosen);
    // Every output token (prefill's and decode's) has token_ids_logprob's values.
    const std::vector<float> ids(req.logprob_token_ids.begin(), req.logprob_token_ids.end());
    for (const std::vector<float>& values : got.chosen) EXPECT_EQ(values, ids);
}

TEST_P(SchedulerTest, PromptLogprobsCoverEveryPositionFromTheStartThroughChunksAndTheCache) {
    const Tokens long_prompt = prompt(5, 150);
    std::vector<Req> reqs;
    for (const std::int64_t start : {0, 1, 37, 148, 149, 150}) {
        Req r = make_req("from" + std::to_string(start), long_prompt, 3);
        r.logprob_start_len = start;
        r.input_top_logprobs = start % 2 == 0 ? 2 : 0;
        if (start == 37) r.logprob_token_ids = {4, 11, 0};
        reqs.push_back(std::move(r));
    }
    for (const bool queued : {false, true}) {
        SchedulerConfig cfg = roomy(page());
        cfg.chunked_prefill_size = 32;
        if (queued) cfg.max_in_flight_steps = 3;
        Harness h(cfg, queued);
        // The whole prompt is cached first: a request still computes its positions from
        // logprob_start_len on.
        h.add(make_req("warm", long_prompt, 1));
        h.run();
        for (const Req& r : reqs) h.add(r);
        h.run();
        for (const Req& r : reqs) {
            const Result& got = h.results_[r.rid];
            EXPECT_EQ(got.tokens, expected(r)) << r.rid;
            expect_input_logprobs(r, got);
            EXPECT_LE(got.cached_tokens, std::min<std::int64_t>(r.logprob_start_len, 149)) << r.rid;
        }
        EXPECT_EQ(h.results_["from150"].cached_tokens, 149 / page() * page());
        EXPECT_EQ(h.results_["warm"].input_logprob_events, 0);
    }
}

// A step's scored rows are bounded (each is a vocab-sized logits row): while a request that
// scores its prompt waits or is prefilled, prefill steps take at most max_scored_rows_per_step
// tokens; the others keep the configured chunk size.
TEST_P(SchedulerTest, ScoredPromptsArePrefilledInBoundedSteps) {
    for (const std::int64_t chunked : {-1, 64}) {
        SchedulerConfig cfg = roomy(page());
        cfg.chunked_prefill_size = chunked;
        cfg.max_scored_rows_per_step = 32;
        Harness h(cfg);
        Req scored = make_req("scored", prompt(3, 100), 2);
        scored.logprob_start_len = 0;
        h.add(scored);
        h.run();
        expect_input_logprobs(scored, h.results_["scored"]);
        std::int64_t steps = 0;
        for (const ForwardBatch& b : h.runner_.launched) {
            if (b.seqs.empty() || b.seqs[0].tokens.size() < 2) continue;  // a decode step
            EXPECT_LE(b.total_new_tokens(), cfg.max_scored_rows_per_step) << "chunked " << chunked;
            ++steps;
        }
        EXPECT_GE(steps, 100 / cfg.max_scored_rows_per_step) << "chunked " << chunked;
        // A plain prompt after it is not bounded.
        const std::size_t before = h.runner_.launched.size();
        h.add(make_req("plain", prompt(4, 100), 2));
        h.run();
        EXPECT_EQ(h.runner_.launched[before].total_new_tokens(), chunked > 0 ? chunked : 100) << "chunked " << chunked;
    }
    SchedulerConfig bad = roomy(16);
    bad.max_scored_rows_per_step = 24;
    EXPECT_FALSE(bad.validate().ok());
}

TEST_P(SchedulerTest, MaxNewTokensZeroEndsWithThePromptAndItsLogprobs) {
    Req r = make_req("score", prompt(8, 40), 0);
    r.logprob_start_len = 0;
    SchedulerConfig cfg = roomy(page());
    cfg.chunked_prefill_size = 16;
    Harness h(cfg);
    h.add(r);
    h.run();
    const Result& got = h.results_["score"];
    EXPECT_TRUE(got.tokens.empty());
    EXPECT_EQ(got.reason, FinishReason::kLength);
    EXPECT_EQ(got.n_events, 1);
    expect_input_logprobs(r, got);
    // Its prompt stays cached for the next one.
    h.add(make_req("next", prompt(8, 40), 2));
    h.run();
    EXPECT_EQ(h.results_["next"].cached_tokens, 39 / page() * page());
}

TEST_P(SchedulerTest, PromptLogprobsSurviveRetraction) {
    auto reqs = workload(8, 24, 60);
    for (Req& r : reqs) r.logprob_start_len = 5;
    SchedulerConfig tight = roomy(page());
    tight.max_total_num_tokens = 256;
    tight.new_token_ratio.schedule_conservativeness = 0.3;
    auto pressed = run_and_check(tight, reqs);
    EXPECT_GT(last_->sched_.stats().total_retracted_reqs, 0);
    for (const Req& r : reqs) expect_input_logprobs(r, pressed[r.rid]);
}

TEST_P(SchedulerTest, RepeatedPrefixIsServedFromTheCache) {
    const Tokens system = prompt(9, 96);
    Tokens a = system, b = system;
    a.insert(a.end(), {11, 12, 13});
    b.insert(b.end(), {21, 22, 23, 24});
    Harness h(roomy(page()));
    h.add(make_req("a", a, 4));
    h.run();
    EXPECT_EQ(h.results_["a"].cached_tokens, 0);
    h.add(make_req("b", b, 4));
    h.run();
    EXPECT_EQ(h.results_["b"].cached_tokens, 96);
    EXPECT_EQ(h.results_["b"].tokens, expected(make_req("b", b, 4)));
    EXPECT_EQ(h.sched_.stats().cached_tokens_total, 96);
    // hit / (hit + page-ceiled new tokens): 96 / (96 + 4) with page 1, 96 / (96 + 16) with 16.
    EXPECT_DOUBLE_EQ(h.sched_.stats().cache_hit_rate, page() == 1 ? 0.96 : 96.0 / 112.0);
    // With the radix cache off nothing is reused.
    SchedulerConfig off = roomy(page());
    off.disable_radix_cache = true;
    off.schedule_policy = SchedulePolicy::kLpm;  // falls back to fcfs
    Harness h2(off);
    h2.add(make_req("a", a, 4));
    h2.run();
    h2.add(make_req("b", b, 4));
    h2.run();
    EXPECT_EQ(h2.results_["b"].cached_tokens, 0);
    EXPECT_EQ(h2.results_["b"].tokens, expected(make_req("b", b, 4)));
}

// An embedding request ends with its prompt: one event carrying the last position's row, finish
// "length" and no output token, after every chunk of a chunked prompt; its prompt stays in the
// prefix cache for the next one.
TEST_P(SchedulerTest, EmbeddingRequestsEndWithTheirPromptsRow) {
    SchedulerConfig cfg = roomy(page());
    cfg.chunked_prefill_size = 32;
    Harness h(cfg);
    h.runner_.embedding = true;
    const Tokens long_prompt = prompt(5, 100), short_prompt = prompt(6, 7);
    h.add(make_req("long", long_prompt, 0));
    h.add(make_req("short", short_prompt, 0));
    h.run();
    for (const auto& [rid, input] : {std::pair{"long", long_prompt}, std::pair{"short", short_prompt}}) {
        const Result& got = h.results_[rid];
        EXPECT_EQ(got.reason, FinishReason::kLength) << rid;
        EXPECT_TRUE(got.tokens.empty()) << rid;
        EXPECT_EQ(got.n_events, 1) << rid;
        EXPECT_EQ(got.embedding, (std::vector<float>{static_cast<float>(reference_next(input)), 1.0f})) << rid;
    }
    EXPECT_GT(h.runner_.n_partial_chunks, 0);  // the long prompt ran in chunks
    h.add(make_req("again", long_prompt, 0));
    h.run();
    EXPECT_GT(h.results_["again"].cached_tokens, 0);
    EXPECT_EQ(h.results_["again"].embedding, h.results_["long"].embedding);
}

// --enable-request-time-stats-logging: one line per finished request, SGLang's format.
TEST_P(SchedulerTest, RequestTimeStatsAreLoggedWhenAsked) {
    for (bool on : {true, false}) {
        SchedulerConfig cfg = roomy(page());
        cfg.log_request_time_stats = on;
        Harness h(cfg);
        testing::internal::CaptureStderr();
        h.add(make_req("timed", prompt(3, 12), 3));
        h.run();
        const std::string log = testing::internal::GetCapturedStderr();
        const std::regex line(R"(ReqTimeStats\(rid=timed, input_len=12, cached_input_len=0, output_len=3, )"
                              R"(type=unified\): queue_duration=\d+\.\d\dms, forward_duration=\d+\.\d\dms, )"
                              R"(start_time=\d+\.\d{3})");
        EXPECT_EQ(std::regex_search(log, line), on) << log;
    }
}

// A request with a think-end token counts its output tokens up to and with that token as
// reasoning; with --strip-thinking-cache such a request leaves only its prompt in the cache.
TEST_P(SchedulerTest, ReasoningTokensAndStripThinkingCache) {
    const Tokens input = prompt(8, 40);
    const Tokens out = expected(make_req("x", input, 30));  // past the next 16-token page
    for (bool strip : {false, true}) {
        SchedulerConfig cfg = roomy(page());
        cfg.strip_thinking_cache = strip;
        Harness h(cfg);
        Req r = make_req("think", input, 30);
        r.think_end_id = out[2];  // the third output token ends the reasoning
        h.add(r);
        h.run();
        EXPECT_EQ(h.results_["think"].tokens, out);
        EXPECT_EQ(h.results_["think"].reasoning_tokens, 3);
        // The follow-up prompt holds the whole first exchange: its cached share shows what stayed.
        Tokens follow = input;
        follow.insert(follow.end(), out.begin(), out.end());
        follow.push_back(7);
        h.add(make_req("follow", follow, 1));
        h.run();
        const std::int64_t cached = h.results_["follow"].cached_tokens;
        const std::int64_t prompt_pages = static_cast<std::int64_t>(input.size()) / page() * page();
        if (strip) {
            EXPECT_EQ(cached, prompt_pages) << "only the prompt was cached";
        } else {
            EXPECT_GT(cached, prompt_pages) << "the output was cached too";
        }
    }
}

// --enable-return-routed-experts: the events of a request that asks carry, in order, the
// routing of every position but the last token's, from routed_experts_start_len on; a prefix
// served from the cache brings the rows recorded when another request computed it.
TEST_P(SchedulerTest, RoutedExpertsFollowTheirPositionsThroughTheCache) {
    for (bool overlap : {false, true}) {
        SchedulerConfig cfg = roomy(page());
        cfg.routed_experts_width = 2;  // the fake's rows: {token, position}
        cfg.chunked_prefill_size = 16 / page() * page();
        cfg.overlap_schedule = overlap;
        Harness h(cfg, /*queued=*/overlap);
        const Tokens input = prompt(21, 40);
        h.add(make_req("first", input, 5));  // not asking: its rows are recorded all the same
        h.run();
        Tokens follow(input.begin(), input.begin() + 35);
        follow.push_back(3);
        Req r = make_req("follow", follow, 6);
        r.return_routed_experts = true;
        r.routed_experts_start_len = 2;
        h.add(r);
        h.run();
        const Result& got = h.results_["follow"];
        ASSERT_GT(got.cached_tokens, 0);
        Tokens fill = follow;
        fill.insert(fill.end(), got.tokens.begin(), got.tokens.end() - 1);
        std::vector<std::int32_t> want;
        for (std::size_t p = 2; p < fill.size(); ++p) {
            want.push_back(fill[p]);
            want.push_back(static_cast<std::int32_t>(p));
        }
        EXPECT_EQ(got.routed_experts, want) << "overlap " << overlap;
        EXPECT_TRUE(h.results_["first"].routed_experts.empty());
    }
}

// --max-cached-tokens: distinct prompts one after another would fill the pool with cache;
// capped, the cache keeps the most recent ones only, the allocator's touched region stays
// near the working set, and a prefix still in the cache is still reused.
// --min-free-slots-delay: while requests run, the waiting ones are admitted only once enough
// slots are free, several at once; without it each slot refills as soon as it frees.
TEST_P(SchedulerTest, MinFreeSlotsDelayAdmitsNewRequestsTogether) {
    for (std::int64_t delay : {0, 4}) {
        SchedulerConfig cfg = roomy(page());
        cfg.max_running_requests = 8;
        cfg.min_free_slots = delay;
        Harness h(cfg);
        for (int i = 0; i < 8; ++i) h.add(make_req("first" + std::to_string(i), prompt(40 + i, 20), 10 + i));
        for (int i = 0; i < 8; ++i) h.add(make_req("later" + std::to_string(i), prompt(60 + i, 20), 5));
        h.run();
        // How many of the later requests each batch starts.
        std::set<std::string> seen;
        std::vector<int> started;
        for (const auto& batch : h.runner_.batches) {
            int n = 0;
            for (const std::string& rid : batch)
                if (rid.starts_with("later") && seen.insert(rid).second) ++n;
            if (n > 0) started.push_back(n);
        }
        ASSERT_FALSE(started.empty());
        if (delay == 0) {
            EXPECT_EQ(started.front(), 1) << "one slot freed, one request in";
        } else {
            EXPECT_EQ(started.front(), 4) << "four slots freed, four requests in";
        }
        for (int i = 0; i < 8; ++i) EXPECT_EQ(h.results_["later" + std::to_string(i)].tokens.size(), 5u);
    }
}

TEST_P(SchedulerTest, CachedTokensStayUnderTheCap) {
    SchedulerConfig cfg = roomy(page());
    cfg.max_cached_tokens = 256;
    Harness h(cfg);
    for (int i = 0; i < 40; ++i) {
        h.add(make_req("r" + std::to_string(i), prompt(100 + i, 90), 6));
        h.run();
        EXPECT_LE(h.sched_.stats().evictable_tokens, 256) << "after request " << i;
    }
    // The last prompt is cached (the least recently used ones went first).
    Tokens again = prompt(139, 90);
    again.push_back(5);
    h.add(make_req("again", again, 3));
    h.run();
    EXPECT_EQ(h.results_["again"].cached_tokens, 90 / page() * page());
    EXPECT_EQ(h.results_["again"].tokens, expected(make_req("again", again, 3)));
    // 40 requests of ~96 tokens went through a 4096-slot pool, one at a time.
    EXPECT_LE(h.sched_.stats().touched_tokens, 2 * (256 + 96 + 16) + 256 + 96);

    // Without the cap the same sequence keeps everything and touches more of the pool.
    Harness uncapped(roomy(page()));
    for (int i = 0; i < 40; ++i) {
        uncapped.add(make_req("r" + std::to_string(i), prompt(100 + i, 90), 6));
        uncapped.run();
    }
    EXPECT_GE(uncapped.sched_.stats().evictable_tokens, 40 * 80);  // whole pages of 95 tokens each
    EXPECT_GE(uncapped.sched_.stats().touched_tokens, 40 * 80);
}

// --radix-eviction-policy through the scheduler: a 90-token prompt of priority 9 cached
// first, then twelve of 30 tokens of priority 0, under a cap that holds about half of them. LRU lets the first go; priority keeps it; LFU keeps it when it was computed twice. In
// chunks of 32 tokens (the others fit in one) its chunks' inserts are no hits: computed once,
// it ties with the others and goes as the oldest.
TEST_P(SchedulerTest, EvictionPolicyChoosesWhatTheCapKeeps) {
    const auto cached_again = [&](kvcache::EvictionPolicy policy, int first_runs, std::int64_t chunk) {
        SchedulerConfig cfg = roomy(page());
        cfg.max_cached_tokens = 200;
        cfg.radix_eviction_policy = policy;
        cfg.chunked_prefill_size = chunk;
        Harness h(cfg);
        for (int run = 0; run < first_runs; ++run) {
            Req first = make_req("first" + std::to_string(run), prompt(500, 90), 4);
            first.priority = 9;
            h.add(std::move(first));
            h.run();
        }
        for (int i = 0; i < 12; ++i) {
            h.add(make_req("r" + std::to_string(i), prompt(100 + i, 30), 4));
            h.run();
        }
        Tokens again = prompt(500, 90);
        again.push_back(7);
        h.add(make_req("again", again, 3));
        h.run();
        EXPECT_EQ(h.results_["again"].tokens, expected(make_req("again", again, 3)));
        return h.results_["again"].cached_tokens;
    };
    const std::int64_t whole = 90 / page() * page();
    EXPECT_EQ(cached_again(kvcache::EvictionPolicy::kLru, 1, -1), 0);
    EXPECT_EQ(cached_again(kvcache::EvictionPolicy::kPriority, 1, -1), whole);
    EXPECT_EQ(cached_again(kvcache::EvictionPolicy::kLfu, 1, -1), 0);
    EXPECT_EQ(cached_again(kvcache::EvictionPolicy::kLfu, 2, -1), whole);
    EXPECT_EQ(cached_again(kvcache::EvictionPolicy::kLfu, 1, 32), 0);
}

// --prefill-decode-interval 2: after each prefill step the running requests decode twice
// before the queue's next request is prefilled (one per prefill here); at 0 the queue goes
// first. A prompt alone, in chunks, has nothing to decode between them and is not held up.
TEST_P(SchedulerTest, PrefillDecodeIntervalPutsDecodeStepsBetweenPrefills) {
    const auto kinds = [&](std::int64_t interval, std::int64_t chunk, const std::vector<Req>& reqs,
                           bool overlap = false) {
        SchedulerConfig cfg = overlap ? overlapped(page()) : roomy(page());
        cfg.prefill_max_requests = 1;
        cfg.prefill_decode_interval = interval;
        cfg.chunked_prefill_size = chunk;
        Harness h(cfg, /*queued=*/overlap);
        for (const Req& r : reqs) h.add(r);
        std::string seen;
        for (int i = 0; i < 1000 && !h.sched_.idle(); ++i) {
            const StepKind k = h.sched_.step();
            seen += k == StepKind::kPrefill ? 'P' : k == StepKind::kDecode ? 'D' : '.';
        }
        EXPECT_TRUE(h.sched_.idle());
        h.expect_pool_whole();
        for (const Req& r : reqs) EXPECT_EQ(h.results_[r.rid].tokens, expected(r)) << r.rid;
        return seen;
    };
    std::vector<Req> reqs = {make_req("long", prompt(1, 20), 12)};
    for (int i = 0; i < 3; ++i) reqs.push_back(make_req("w" + std::to_string(i), prompt(10 + i, 20), 3));
    EXPECT_EQ(kinds(2, -1, reqs).substr(0, 10), "PDDPDDPDDP");
    EXPECT_EQ(kinds(0, -1, reqs).substr(0, 5), "PPPPD");
    const std::string alone = kinds(3, 64, {make_req("chunky", prompt(3, 200), 4)});
    EXPECT_EQ(alone.substr(0, 4), "PPPP") << alone;
    EXPECT_EQ(alone.find('.'), std::string::npos) << alone;
    // With overlap scheduling (a prefill in flight while the next step is chosen) nothing stalls.
    kinds(2, -1, reqs, /*overlap=*/true);
    kinds(3, 64, {make_req("chunky", prompt(3, 200), 4)}, /*overlap=*/true);
    // Under DP-attention a decode round in which another group prefilled arms the interval
    // too (SGLang's is_extend_in_batch): a request arriving then waits two decode steps.
    for (bool other : {false, true}) {
        SchedulerConfig cfg = roomy(page());
        cfg.prefill_decode_interval = 2;
        Harness h(cfg);
        const Req running = make_req("running", prompt(5, 20), 12), late = make_req("late", prompt(6, 20), 3);
        h.add(running);
        ASSERT_EQ(h.sched_.step(), StepKind::kPrefill);
        for (int i = 0; i < 3; ++i) ASSERT_EQ(h.sched_.step(), StepKind::kDecode);  // two owed, one more
        h.runner_.other_group_prefilled = other;
        ASSERT_EQ(h.sched_.step(), StepKind::kDecode);
        h.runner_.other_group_prefilled = false;
        h.add(late);
        std::string seen;
        for (int i = 0; i < 3; ++i) seen += h.sched_.step() == StepKind::kPrefill ? 'P' : 'D';
        EXPECT_EQ(seen, other ? "DDP" : "PDD") << "another group prefilled: " << other;
        h.run();
        EXPECT_EQ(h.results_["late"].tokens, expected(late));
        EXPECT_EQ(h.results_["running"].tokens, expected(running));
    }
    // Pipelined as under PP (three steps in flight), a long prompt's chunks still overlap.
    SchedulerConfig piped = roomy(page());
    piped.chunked_prefill_size = 48;
    piped.max_in_flight_steps = 3;
    piped.prefill_decode_interval = 3;
    Harness h(piped, /*queued=*/true);
    const Req long_prompt = make_req("long", prompt(4, 300), 4);
    h.add(long_prompt);
    h.run();
    EXPECT_GT(h.runner_.overlapped_chunks, 0);
    EXPECT_EQ(h.results_["long"].tokens, expected(long_prompt));
}

TEST_P(SchedulerTest, IdenticalPromptsInFlightTogetherShareOneCachedCopy) {
    // Computed side by side, the second insert finds the tokens cached and returns its own
    // slots; the request must continue on the tree's copy.
    std::vector<Req> reqs;
    for (int i = 0; i < 4; ++i) reqs.push_back(make_req("same" + std::to_string(i), prompt(5, 150), 12));
    SchedulerConfig cfg = roomy(page());
    run_and_check(cfg, reqs);
    cfg.chunked_prefill_size = 48;  // chunks of the same prompt in the same batches
    cfg.max_prefill_tokens = 96;
    auto res = run_and_check(cfg, reqs);
    for (const Req& r : reqs) EXPECT_EQ(res[r.rid].tokens, res["same0"].tokens);
    // Pipelined, a chunk's insert would meet the copy of an identical prompt and swap the
    // request's slots under its next chunk, already in flight; the insert must wait.
    cfg.max_in_flight_steps = 3;
    auto piped = run_and_check(cfg, reqs, nullptr, /*queued=*/true);
    EXPECT_GT(last_->runner_.overlapped_chunks, 0);
    EXPECT_EQ(last_->runner_.chunk_mismatches, 0);
    for (const Req& r : reqs) EXPECT_EQ(piped[r.rid].tokens, res["same0"].tokens);
}

TEST_P(SchedulerTest, AbortFreesKvInEveryState) {
    SchedulerConfig cfg = roomy(page());
    cfg.chunked_prefill_size = 64;
    Harness h(cfg);
    h.add(make_req("decoding", prompt(1, 30), 1000));
    h.add(make_req("chunked", prompt(2, 400), 10));
    h.add(make_req("waiting", prompt(3, 10), 10));
    for (int i = 0; i < 3; ++i) h.sched_.step();
    EXPECT_TRUE(h.sched_.abort("chunked"));
    h.expect_pool_whole();
    EXPECT_TRUE(h.sched_.abort("waiting"));
    EXPECT_FALSE(h.sched_.abort("waiting"));
    for (int i = 0; i < 5; ++i) h.sched_.step();
    EXPECT_TRUE(h.sched_.abort("decoding"));
    EXPECT_TRUE(h.sched_.idle());
    h.expect_pool_whole();
    for (const char* rid : {"decoding", "chunked", "waiting"}) {
        EXPECT_EQ(h.results_[rid].reason, FinishReason::kAbort) << rid;
    }
    EXPECT_GT(h.results_["decoding"].tokens.size(), 0u);
    EXPECT_TRUE(h.sched_.flush_cache());
    EXPECT_EQ(h.sched_.stats().available_tokens, cfg.max_total_num_tokens);
}

// /abort_request (scheduler.py abort_request): every request whose rid starts with the prefix,
// running or waiting; "" is all of them.
TEST_P(SchedulerTest, AbortPrefixedEndsTheMatchingRequests) {
    Harness h(roomy(page()));
    h.add(make_req("job-1", prompt(1, 30), 1000));
    h.add(make_req("job-2", prompt(2, 30), 1000));
    h.add(make_req("other", prompt(3, 30), 1000));
    h.sched_.step();
    h.add(make_req("job-3", prompt(4, 30), 1000));  // still waiting
    EXPECT_EQ(h.sched_.abort_prefixed("job-"), 3);
    EXPECT_EQ(h.sched_.abort_prefixed("job-"), 0);
    for (const char* rid : {"job-1", "job-2", "job-3"}) EXPECT_EQ(h.results_[rid].reason, FinishReason::kAbort) << rid;
    EXPECT_EQ(h.results_["other"].reason, FinishReason::kNone);
    EXPECT_EQ(h.sched_.abort_prefixed(""), 1);
    EXPECT_EQ(h.results_["other"].reason, FinishReason::kAbort);
    EXPECT_TRUE(h.sched_.idle());
    h.expect_pool_whole();
}

// A turn of a streaming session.
Req turn(std::string rid, Tokens input, std::int64_t max_new) {
    Req r = make_req(std::move(rid), std::move(input), max_new);
    r.streaming_session = "s";
    return r;
}

// The next turn's prompt: the last one's prompt and output, then `more`.
Tokens after(const Req& last, const Tokens& more) {
    Tokens t = last.input_ids;
    const Tokens out = expected(last);
    t.insert(t.end(), out.begin(), out.end());
    t.insert(t.end(), more.begin(), more.end());
    return t;
}

TEST_P(SchedulerTest, StreamingSessionHoldsItsLastTurnUntilReleased) {
    SchedulerConfig cfg = roomy(page());
    cfg.enable_streaming_session = true;
    cfg.max_cached_tokens = 0;  // the cache keeps nothing no request or session holds
    const auto whole_pages = [&](std::int64_t n) { return n / page() * page(); };
    Harness h(cfg);
    const Req t1 = turn("t1", prompt(5, 60), 6);
    h.add(t1);
    h.run();
    // Its KV: the prompt and all outputs but the last (never fed back).
    EXPECT_EQ(h.sched_.stats().num_streaming_sessions, 1);
    EXPECT_EQ(h.sched_.stats().streaming_session_held_tokens, whole_pages(65));
    // The same tokens as an ordinary request find nothing: the cache kept none of its own.
    h.add(make_req("plain", after(t1, {1, 2}), 3));
    h.run();
    EXPECT_EQ(h.results_["plain"].cached_tokens, whole_pages(65)) << "the session's hold serves everyone";
    const Req t2 = turn("t2", after(t1, {7, 8, 9}), 5);
    h.add(t2);
    h.run();
    EXPECT_EQ(h.results_["t2"].cached_tokens, whole_pages(65));
    EXPECT_EQ(h.results_["t2"].tokens, expected(t2));
    EXPECT_EQ(h.sched_.stats().streaming_session_held_tokens, whole_pages(73));  // moved to t2
    // An aborted turn leaves the hold on the last turn that ended well.
    h.add(turn("t3", after(t2, {4}), 50));
    for (int i = 0; i < 4; ++i) h.sched_.step();
    EXPECT_TRUE(h.sched_.abort("t3"));
    h.run();
    EXPECT_EQ(h.sched_.stats().streaming_session_held_tokens, whole_pages(73));
    const Req t4 = turn("t4", after(t2, {3}), 2);
    h.add(t4);
    h.run();
    EXPECT_EQ(h.results_["t4"].cached_tokens, whole_pages(73));
    EXPECT_EQ(h.results_["t4"].tokens, expected(t4));
    // Released, it goes like any cache entry (here at once: the cap is 0).
    h.sched_.release_session("s");
    h.add(make_req("late", after(t4, {1}), 1));
    h.run();
    EXPECT_EQ(h.results_["late"].cached_tokens, 0);
    EXPECT_EQ(h.sched_.stats().num_streaming_sessions, 0);
    EXPECT_EQ(h.sched_.stats().available_tokens, cfg.max_total_num_tokens);
    // /flush_cache drops what a session holds.
    h.add(turn("t5", prompt(6, 40), 2));
    h.run();
    EXPECT_GT(h.sched_.stats().streaming_session_held_tokens, 0);
    EXPECT_TRUE(h.sched_.flush_cache());
    EXPECT_EQ(h.sched_.stats().streaming_session_held_tokens, 0);
    EXPECT_EQ(h.sched_.stats().available_tokens, cfg.max_total_num_tokens);
}

// SGLang's locked streaming sessions can fill the pool until nothing runs; here the oldest
// hold gives way when the queue's head cannot fit otherwise.
TEST_P(SchedulerTest, HeldSessionKvGivesWayWhenNothingElseCanRun) {
    SchedulerConfig cfg = roomy(page());
    cfg.max_total_num_tokens = 256;
    cfg.enable_streaming_session = true;
    Harness h(cfg);
    h.add(turn("t1", prompt(5, 150), 4));
    h.run();
    ASSERT_EQ(h.sched_.stats().num_streaming_sessions, 1);
    const Req big = make_req("big", prompt(6, 180), 8);
    h.add(big);
    h.run();
    EXPECT_EQ(h.results_["big"].tokens, expected(big));
    EXPECT_EQ(h.sched_.stats().num_streaming_sessions, 0);
    // A session turn that fits beside the hold leaves it alone.
    h.add(turn("t2", prompt(7, 40), 4));
    h.run();
    h.add(make_req("small", prompt(8, 60), 4));
    h.run();
    EXPECT_EQ(h.sched_.stats().num_streaming_sessions, 1);
}

TEST_P(SchedulerTest, StreamingSessionsKeepTheirKvWithTheRadixCacheOff) {
    SchedulerConfig cfg = roomy(page());
    cfg.enable_streaming_session = true;
    cfg.disable_radix_cache = true;
    Harness h(cfg);
    const Req t1 = turn("t1", prompt(5, 60), 6);
    h.add(t1);
    h.run();
    const Req t2 = turn("t2", after(t1, {7}), 4);
    h.add(t2);
    h.add(make_req("plain", after(t1, {8}), 4));  // shares nothing: the cache is off for it
    h.run();
    EXPECT_EQ(h.results_["t2"].cached_tokens, 65 / page() * page());
    EXPECT_EQ(h.results_["t2"].tokens, expected(t2));
    EXPECT_EQ(h.results_["plain"].cached_tokens, 0);
    EXPECT_EQ(h.results_["plain"].tokens, expected(make_req("plain", after(t1, {8}), 4)));
    h.sched_.release_session("s");
    EXPECT_EQ(h.sched_.stats().evictable_tokens, 0);
    EXPECT_EQ(h.sched_.stats().available_tokens, cfg.max_total_num_tokens);
    // A turn running when its session closes ends as an ordinary request, holding nothing.
    h.add(turn("t3", prompt(9, 30), 20));
    for (int i = 0; i < 3; ++i) h.sched_.step();
    h.sched_.release_session("s");
    h.run();
    EXPECT_EQ(h.results_["t3"].tokens, expected(turn("t3", prompt(9, 30), 20)));
    EXPECT_EQ(h.sched_.stats().num_streaming_sessions, 0);
    EXPECT_EQ(h.sched_.stats().available_tokens, cfg.max_total_num_tokens);
}

TEST_P(SchedulerTest, SessionReferencedTurnsAreEvictedAfterTheRest) {
    const auto whole_pages = [&](std::int64_t n) { return n / page() * page(); };
    const auto session_turn = [](std::string rid, Tokens input) {
        Req r = make_req(std::move(rid), std::move(input), 4);
        r.radix_session = "s";
        return r;
    };
    // The same traffic with and without session references: one session turn, then three
    // other requests that push the cache over its cap, then the session's next turn.
    for (const bool references : {true, false}) {
        SchedulerConfig cfg = roomy(page());
        cfg.enable_session_radix_cache = references;
        cfg.max_cached_tokens = 160;
        Harness h(cfg);
        const Req t1 = session_turn("t1", prompt(5, 60));
        h.add(t1);
        h.run();
        for (int i = 0; i < 3; ++i) {
            h.add(make_req("p" + std::to_string(i), prompt(50 + i, 60), 4));
            h.run();
        }
        const Req t2 = session_turn("t2", after(t1, {7}));
        h.add(t2);
        h.run();
        EXPECT_EQ(h.results_["t2"].tokens, expected(t2));
        // 63 tokens of KV: the prompt and all outputs but the last.
        EXPECT_EQ(h.results_["t2"].cached_tokens, references ? whole_pages(63) : 0) << "references " << references;
        EXPECT_EQ(h.sched_.stats().num_referencing_sessions, references ? 1 : 0);
    }
    // Closed, the session's turns are plain cache entries again; /flush_cache drops references too.
    SchedulerConfig cfg = roomy(page());
    cfg.enable_session_radix_cache = true;
    Harness h(cfg);
    h.add(session_turn("t1", prompt(5, 60)));
    h.run();
    h.sched_.release_session("s");
    EXPECT_EQ(h.sched_.stats().num_referencing_sessions, 0);
    h.add(session_turn("t2", prompt(6, 60)));
    h.run();
    EXPECT_TRUE(h.sched_.flush_cache());
    EXPECT_EQ(h.sched_.stats().num_referencing_sessions, 0);
    EXPECT_EQ(h.sched_.stats().available_tokens, cfg.max_total_num_tokens);
    h.sched_.release_session("s");  // nothing left to drop
}

TEST_P(SchedulerTest, StopsOnEosUnlessIgnored) {
    Req probe = make_req("p", prompt(31, 12), 10);
    const Tokens ref = expected(probe);
    Req stop = make_req("stop", prompt(31, 12), 10, /*ignore_eos=*/false);
    stop.eos_token_ids = {ref[3]};
    Req user_stop = make_req("user_stop", prompt(31, 12), 10, false);
    user_stop.stop_token_ids = {ref[5]};
    Req ignored = make_req("ignored", prompt(31, 12), 10, true);
    ignored.eos_token_ids = {ref[3]};
    auto res = run_and_check(roomy(page()), {stop, user_stop, ignored});
    EXPECT_EQ(res["stop"].tokens.size(), 4u);
    EXPECT_EQ(res["stop"].reason, FinishReason::kStop);
    EXPECT_EQ(res["user_stop"].tokens.size(), 6u);
    EXPECT_EQ(res["ignored"].tokens.size(), 10u);
    EXPECT_EQ(res["ignored"].reason, FinishReason::kLength);
}

TEST_P(SchedulerTest, RunnerFailureAbortsTheBatchAndFreesKv) {
    Harness h(roomy(page()));
    h.add(make_req("a", prompt(1, 20), 10));
    h.add(make_req("b", prompt(2, 20), 10));
    h.sched_.step();  // prefill
    h.runner_.fail_next = true;
    h.sched_.step();  // decode fails
    EXPECT_TRUE(h.sched_.idle());
    h.expect_pool_whole();
    EXPECT_EQ(h.results_["a"].reason, FinishReason::kAbort);
    EXPECT_EQ(h.results_["b"].reason, FinishReason::kAbort);
}

// ---- several steps in flight (pipeline parallelism) ------------------------------------

bool is_decode(const ForwardBatch& b) {
    return std::all_of(b.seqs.begin(), b.seqs.end(),
                       [](const auto& s) { return s.tokens.size() == 1 && s.start_pos > 0; });
}

// The sizes of the prefill chunks launched for `rid`, in order.
std::vector<std::int64_t> prefill_chunks(const FakeRunner& runner, const std::string& rid, std::int64_t n_input) {
    std::vector<std::int64_t> out;
    for (const ForwardBatch& b : runner.launched)
        for (const auto& s : b.seqs)
            if (s.rid == rid && s.start_pos < n_input) out.push_back(static_cast<std::int64_t>(s.tokens.size()));
    return out;
}

TEST_P(SchedulerTest, PipelinedStepsGiveTheSerialOutputs) {
    std::vector<Req> reqs = workload(8, 10, 12);
    reqs.push_back(make_req("long", prompt(50, 200), 9));
    reqs.push_back(stops_at(3));
    SchedulerConfig cfg = roomy(page());
    cfg.chunked_prefill_size = 64;
    const auto serial = run_and_check(cfg, reqs, nullptr, /*queued=*/true);
    EXPECT_EQ(last_->runner_.max_in_flight, 1);

    cfg.max_in_flight_steps = 3;
    auto piped = run_and_check(cfg, reqs, nullptr, /*queued=*/true);
    const FakeRunner& runner = last_->runner_;
    EXPECT_EQ(runner.max_in_flight, 3);
    EXPECT_EQ(runner.dependency_violations, 0);
    EXPECT_GT(runner.overlapped_chunks, 0);
    EXPECT_EQ(runner.chunk_mismatches, 0);
    EXPECT_EQ(piped["stop"].reason, FinishReason::kStop);
    for (const Req& r : reqs) {
        EXPECT_EQ(piped[r.rid].tokens, serial.at(r.rid).tokens) << r.rid;
        EXPECT_EQ(piped[r.rid].reason, serial.at(r.rid).reason) << r.rid;
    }
    // A runner that computes each step at launch sees the same schedule work as well.
    auto eager = run_and_check(cfg, reqs);
    for (const Req& r : reqs) EXPECT_EQ(eager[r.rid].tokens, serial.at(r.rid).tokens) << r.rid;
}

TEST_P(SchedulerTest, PipelinedRetractionResumesWithTheSameOutputs) {
    auto reqs = workload(8, 24, 60);
    auto free_run = run_and_check(roomy(page()), reqs);
    // A micro-batch of one that does not fit makes others retract; it is not aborted.
    for (const std::int64_t cap : {0, 3, 1}) {
        SchedulerConfig tight = roomy(page());
        tight.max_total_num_tokens = 256;
        tight.new_token_ratio.schedule_conservativeness = 0.3;
        tight.max_in_flight_steps = 3;
        tight.max_micro_batch_size = cap;
        auto pressed = run_and_check(tight, reqs, nullptr, /*queued=*/true);
        EXPECT_GT(last_->sched_.stats().total_retracted_reqs, 0) << "cap " << cap;
        EXPECT_EQ(last_->runner_.dependency_violations, 0) << "cap " << cap;
        for (const Req& r : reqs) EXPECT_EQ(free_run[r.rid].tokens, pressed[r.rid].tokens) << r.rid << " cap " << cap;
    }
}

TEST_P(SchedulerTest, ChunksOfOneLongPromptArePipelined) {
    const std::vector<Req> reqs = {make_req("long", prompt(42, 300), 8)};
    for (const bool radix : {true, false}) {
        SchedulerConfig cfg = roomy(page());
        cfg.chunked_prefill_size = 64;
        cfg.disable_radix_cache = !radix;
        auto serial = run_and_check(cfg, reqs, nullptr, /*queued=*/true);
        EXPECT_EQ(last_->runner_.overlapped_chunks, 0);
        cfg.max_in_flight_steps = 2;
        auto piped = run_and_check(cfg, reqs, nullptr, /*queued=*/true);
        const FakeRunner& runner = last_->runner_;
        // 300 tokens in chunks of 64: each later chunk is launched while the one before it
        // is in flight, and continues it exactly.
        EXPECT_EQ(prefill_chunks(runner, "long", 300), (std::vector<std::int64_t>{64, 64, 64, 64, 44}));
        EXPECT_EQ(runner.overlapped_chunks, 4) << "radix " << radix;
        EXPECT_EQ(runner.chunk_mismatches, 0) << "radix " << radix;
        EXPECT_EQ(runner.max_in_flight, 2);
        EXPECT_EQ(piped["long"].tokens, serial["long"].tokens) << "radix " << radix;
    }
    // While its last chunk is in flight the request counts as running.
    SchedulerConfig cfg = roomy(page());
    cfg.chunked_prefill_size = 64;
    cfg.max_in_flight_steps = 2;
    Harness h(cfg, /*queued=*/true);
    h.add(reqs.front());
    bool seen = false;
    for (int i = 0; i < 100 && !h.sched_.idle(); ++i) {
        h.sched_.step();
        if (h.runner_.in_flight("long", /*token_only=*/true) == 0) continue;
        seen = true;
        EXPECT_EQ(h.sched_.stats().num_running_reqs, 1);
    }
    EXPECT_TRUE(seen);
}

TEST_P(SchedulerTest, MicroBatchSizeCapsDecodeSteps) {
    SchedulerConfig cfg = roomy(page());
    cfg.max_in_flight_steps = 3;
    cfg.max_micro_batch_size = 2;
    Harness* h = nullptr;
    run_and_check(cfg, workload(6, 8, 10), &h, /*queued=*/true);
    std::size_t largest = 0;
    int n_decode = 0;
    for (const ForwardBatch& b : h->runner_.launched) {
        if (!is_decode(b)) continue;
        ++n_decode;
        largest = std::max(largest, b.seqs.size());
    }
    EXPECT_GT(n_decode, 0);
    EXPECT_EQ(largest, 2u);
    EXPECT_EQ(h->runner_.max_in_flight, 3);
    EXPECT_EQ(h->runner_.dependency_violations, 0);
    EXPECT_EQ(h->max_running_, 6);  // requests awaiting their token count as running
}

TEST_P(SchedulerTest, AbortWithStepsInFlightIgnoresTheirResults) {
    SchedulerConfig cfg = roomy(page());
    cfg.max_in_flight_steps = 3;
    cfg.max_micro_batch_size = 1;
    cfg.chunked_prefill_size = 32;
    Harness h(cfg, /*queued=*/true);
    const Req a = make_req("a", prompt(1, 10), 40);
    h.add(a);
    h.add(make_req("b", prompt(2, 10), 40));
    ASSERT_TRUE(h.step_until([&] { return h.results_["b"].tokens.size() >= 3 && h.runner_.in_flight("b") > 0; }));
    EXPECT_FALSE(h.sched_.idle());
    EXPECT_FALSE(h.sched_.flush_cache());
    const std::size_t n_b = h.results_["b"].tokens.size();
    EXPECT_TRUE(h.sched_.abort("b"));
    h.expect_pool_whole();

    // The rid is free again at once, while the old request's step is still in flight.
    const Req b2 = make_req("b", prompt(3, 40), 6);
    h.add(b2, "b2");
    h.add(make_req("long", prompt(4, 200), 5));
    ASSERT_TRUE(h.step_until([&] { return h.runner_.in_flight("long") >= 2; }));
    EXPECT_TRUE(h.sched_.abort("long"));
    h.expect_pool_whole();
    h.run();

    EXPECT_EQ(h.results_["b"].reason, FinishReason::kAbort);
    EXPECT_EQ(h.results_["b"].tokens.size(), n_b);
    EXPECT_EQ(h.results_["b"].n_events, static_cast<int>(n_b) + 1);
    EXPECT_EQ(h.results_["long"].reason, FinishReason::kAbort);
    EXPECT_TRUE(h.results_["long"].tokens.empty());
    EXPECT_EQ(h.results_["b2"].tokens, expected(b2));
    EXPECT_EQ(h.results_["a"].tokens, expected(a));
    EXPECT_EQ(h.runner_.chunk_mismatches, 0);
    EXPECT_TRUE(h.sched_.flush_cache());
    EXPECT_EQ(h.sched_.stats().available_tokens, cfg.max_total_num_tokens);
}

TEST_P(SchedulerTest, FailedPipelinedStepAbortsOnlyItsRequests) {
    SchedulerConfig cfg = roomy(page());
    cfg.max_in_flight_steps = 3;
    cfg.max_micro_batch_size = 1;
    Harness h(cfg, /*queued=*/true);
    const std::vector<Req> reqs = workload(3, 10, 20);
    for (const Req& r : reqs) h.add(r);
    EXPECT_EQ(h.sched_.step(), StepKind::kPrefill);  // all three in one prefill batch
    h.runner_.fail_next = true;                      // the next collected step: r0's decode
    EXPECT_EQ(h.sched_.step(), StepKind::kDecode);
    EXPECT_EQ(h.results_["r0"].reason, FinishReason::kAbort);
    h.run();
    EXPECT_EQ(h.results_["r0"].tokens.size(), 1u);
    for (int i = 1; i < 3; ++i) EXPECT_EQ(h.results_[reqs[i].rid].tokens, expected(reqs[i])) << i;
}

TEST_P(SchedulerTest, FailedChunkLeavesNothingInTheCache) {
    // Had a prompt been inserted in the tree while chunks of it were in flight (at a chunk's
    // collect, or at an abort), the tree would serve positions a failed chunk never wrote.
    for (const bool abort_first : {false, true}) {
        SchedulerConfig cfg = roomy(page());
        cfg.max_in_flight_steps = 3;
        cfg.chunked_prefill_size = 48;
        Harness h(cfg, /*queued=*/true);
        const Tokens text = prompt(12, 150);
        h.add(make_req("first", text, 4));
        h.sched_.step();  // chunks 0-2 launched, chunk 0 collected
        if (abort_first) {
            EXPECT_TRUE(h.sched_.abort("first"));
        }
        h.runner_.fail_next = true;  // chunk 1 fails
        h.sched_.step();
        EXPECT_EQ(h.results_["first"].reason, FinishReason::kAbort);
        EXPECT_EQ(h.results_["first"].n_events, 1);
        h.run();
        const Req again = make_req("again", text, 4);
        h.add(again);
        h.run();
        EXPECT_EQ(h.results_["again"].tokens, expected(again)) << "abort " << abort_first;
        EXPECT_EQ(h.results_["again"].cached_tokens, 0) << "abort " << abort_first;
    }
}

TEST_P(SchedulerTest, DynamicChunkingSizesEachChunkByItsHistory) {
    auto predictor = ChunkSizePredictor::create(
        {.a = 2e-3, .b = 0.05, .c = 3.0},
        {.initial_chunk_size = 256, .smooth_factor = 0.75, .page_size = static_cast<int>(page()),
         .context_len = 4096, .max_prefill_tokens = 16384});
    ASSERT_TRUE(predictor.ok()) << predictor.status().to_string();
    constexpr std::int64_t kLen = 1500;
    std::vector<std::int64_t> want;
    std::int64_t last_budget = 0;
    for (std::int64_t history = 0; history < kLen;) {
        last_budget = predictor->next_chunk(history).value_or(256);
        want.push_back(std::min(last_budget, kLen - history));
        history += want.back();
    }
    // The model makes later chunks smaller; fixed chunks would all be 256.
    ASSERT_GE(std::set<std::int64_t>(want.begin(), want.end() - 1).size(), 3u);

    SchedulerConfig cfg = roomy(page());
    cfg.chunked_prefill_size = 256;
    cfg.dynamic_chunking = *predictor;
    cfg.max_in_flight_steps = 2;
    const Req long_req = make_req("long", prompt(8, kLen), 4);
    Harness* h = nullptr;
    run_and_check(cfg, {long_req}, &h, /*queued=*/true);
    EXPECT_EQ(prefill_chunks(h->runner_, "long", kLen), want);
    EXPECT_EQ(h->runner_.overlapped_chunks, static_cast<int>(want.size()) - 1);
    EXPECT_EQ(h->runner_.chunk_mismatches, 0);
    EXPECT_EQ(h->sched_.stats().prefill_chunk_size, last_budget);
}

// Two requests fill the running batch (max_running_requests 2) and decode; a third arrives
// with priority `incoming`. Returns the harness after everything finished, outputs checked.
std::unique_ptr<Harness> run_priority_case(std::int64_t page, bool overlap, bool preemption, std::int64_t incoming) {
    SchedulerConfig cfg = roomy(page);
    cfg.max_running_requests = 2;
    cfg.overlap_schedule = overlap;
    cfg.enable_priority_scheduling = true;
    cfg.enable_priority_preemption = preemption;
    auto h = std::make_unique<Harness>(cfg, /*queued=*/true);
    std::vector<Req> reqs = {make_req("low", prompt(1, 20), 40), make_req("mid", prompt(2, 20), 40),
                             make_req("high", prompt(3, 20), 8)};
    reqs[0].priority = 0;
    reqs[1].priority = 5;
    reqs[2].priority = incoming;
    h->add(reqs[0]);
    h->add(reqs[1]);
    EXPECT_TRUE(h->step_until([&] { return h->results_["low"].tokens.size() >= 4 && h->results_["mid"].tokens.size() >= 4; }));
    h->add(reqs[2]);
    h->run();
    for (const Req& r : reqs) {
        EXPECT_EQ(h->results_[r.rid].tokens, expected(r)) << r.rid;
        EXPECT_EQ(h->results_[r.rid].reason, FinishReason::kLength) << r.rid;
    }
    EXPECT_LE(h->max_running_, 2);
    EXPECT_EQ(h->runner_.dependency_violations, 0);
    return h;
}

TEST_P(SchedulerTest, PriorityPreemptionMakesRoomAndThePreemptedResume) {
    for (const bool overlap : {false, true}) {
        // 20 − 0 > 10: the worst running request ("low") gives its place and KV, queues again,
        // and finishes with the tokens it would have produced anyway.
        auto h = run_priority_case(page(), overlap, /*preemption=*/true, 20);
        EXPECT_EQ(h->sched_.stats().total_preempted_reqs, 1) << "overlap " << overlap;
        EXPECT_EQ(h->finish_order_, (std::vector<std::string>{"high", "mid", "low"})) << "overlap " << overlap;
        // Not beyond the threshold (10 − 0 is not > 10), or preemption off: "high" waits.
        for (const auto& [preemption, incoming] : {std::pair{true, std::int64_t{10}}, std::pair{false, std::int64_t{20}}}) {
            h = run_priority_case(page(), overlap, preemption, incoming);
            EXPECT_EQ(h->sched_.stats().total_preempted_reqs, 0) << "overlap " << overlap;
            EXPECT_EQ(h->finish_order_.back(), "high") << "overlap " << overlap;
        }
    }
}

TEST_P(SchedulerTest, QueuedRequestsBeyondTheCapAreRefusedOrDisplaceAWorseOne) {
    for (const bool priority : {false, true}) {
        SchedulerConfig cfg = roomy(page());
        cfg.max_running_requests = 1;
        cfg.max_queued_requests = 2;
        cfg.enable_priority_scheduling = priority;
        Harness h(cfg);
        Req running = make_req("running", prompt(1, 10), 30);
        h.add(running);
        ASSERT_TRUE(h.step_until([&] { return !h.results_["running"].tokens.empty(); }));
        std::vector<Req> queued = {make_req("a", prompt(2, 10), 4), make_req("b", prompt(3, 10), 4)};
        queued[0].priority = 5;
        queued[1].priority = 1;
        for (const Req& r : queued) h.add(r);
        Req equal = make_req("equal", prompt(4, 10), 4);
        equal.priority = 1;  // not better than the worst waiting one ("b")
        const Status full = h.sched_.add_request(equal);
        EXPECT_EQ(full.code(), StatusCode::kUnavailable);
        EXPECT_EQ(full.message(), "The request queue is full.");
        Req better = make_req("better", prompt(5, 10), 4);
        better.priority = 2;
        if (!priority) {
            EXPECT_EQ(h.sched_.add_request(better).message(), "The request queue is full.");
            h.run();
            EXPECT_EQ(h.results_["b"].reason, FinishReason::kLength);
            continue;
        }
        h.add(better);  // displaces "b", which finishes aborted with SGLang's message
        EXPECT_EQ(h.results_["b"].reason, FinishReason::kAbort);
        h.run();
        for (const Req& r : {running, queued[0], better}) EXPECT_EQ(h.results_[r.rid].tokens, expected(r)) << r.rid;
        EXPECT_EQ(h.finish_order_, (std::vector<std::string>{"b", "running", "a", "better"}));
    }
}

TEST(SchedulerValidationTest, RejectsBadRequestsAndConfigs) {
    SchedulerConfig cfg = roomy(1);
    cfg.context_len = 64;
    FakeRunner runner(cfg.max_total_num_tokens + 1);
    Scheduler s(cfg, runner);
    EXPECT_EQ(s.max_req_len(), 63);
    EXPECT_FALSE(s.add_request(make_req("", prompt(1, 4), 4)).ok());
    EXPECT_FALSE(s.add_request(make_req("e", {}, 4)).ok());
    const Status too_long = s.add_request(make_req("long", prompt(1, 63), 4));
    EXPECT_NE(too_long.message().find("exceeds the maximum allowed length (62 tokens)"), std::string::npos);
    EXPECT_TRUE(s.add_request(make_req("ok", prompt(1, 60), 100)).ok());
    EXPECT_FALSE(s.add_request(make_req("ok", prompt(1, 4), 4)).ok());  // duplicate rid
    Req past_prompt = make_req("past", prompt(1, 4), 4);
    past_prompt.logprob_start_len = 5;
    const Status past = s.add_request(past_prompt);
    EXPECT_NE(past.message().find("logprob_start_len=5 is higher than the number of input tokens 4"),
              std::string::npos) << past.to_string();
    past_prompt.logprob_start_len = -2;
    EXPECT_FALSE(s.add_request(past_prompt).ok());
    while (!s.idle()) s.step();

    SchedulerConfig bad = roomy(16);
    bad.max_total_num_tokens = 1000;
    EXPECT_FALSE(bad.validate().ok());
    bad = roomy(16);
    bad.chunked_prefill_size = 8;
    EXPECT_FALSE(bad.validate().ok());
    bad = roomy(16);
    bad.max_in_flight_steps = 0;
    EXPECT_FALSE(bad.validate().ok());
    bad = roomy(16);
    bad.max_micro_batch_size = -1;
    EXPECT_FALSE(bad.validate().ok());
    bad = roomy(16);
    bad.max_cached_tokens = -2;
    EXPECT_FALSE(bad.validate().ok());
    auto predictor = ChunkSizePredictor::create({.a = 1e-6, .b = 0.05, .c = 3.0},
                                                {.initial_chunk_size = 256, .context_len = 4096,
                                                 .max_prefill_tokens = 16384});
    ASSERT_TRUE(predictor.ok());
    bad = roomy(16);
    bad.dynamic_chunking = *predictor;
    EXPECT_FALSE(bad.validate().ok());  // needs chunked prefill
    bad.chunked_prefill_size = 256;
    EXPECT_TRUE(bad.validate().ok());
}

// Launched steps that compute a chunk of `prefilling`'s prompt, and of them those that also
// carry a sequence of `decoding`.
std::pair<int, int> steps_carrying(const FakeRunner& runner, const std::string& prefilling,
                                   const std::string& decoding) {
    int chunks = 0, carrying = 0;
    for (const ForwardBatch& batch : runner.launched) {
        bool chunk = false, has_decoding = false;
        for (const auto& q : batch.seqs) {
            chunk = chunk || (q.rid == prefilling && q.tokens.size() > 1);
            has_decoding = has_decoding || q.rid == decoding;
        }
        chunks += chunk ? 1 : 0;
        carrying += chunk && has_decoding ? 1 : 0;
    }
    return {chunks, carrying};
}

// --enable-mixed-chunk: a prompt arriving while another request decodes is prefilled in steps
// that also carry the running request's decode token, with the chunk budget lowered by one
// token per running request; every output still equals the reference chain. Without the flag
// the same prompt's chunks run alone and the decoding request waits.
TEST_P(SchedulerTest, MixedChunkCarriesTheRunningBatch) {
    for (const bool mixed : {true, false}) {
        SchedulerConfig cfg = roomy(page());
        cfg.chunked_prefill_size = 64;
        cfg.enable_mixed_chunk = mixed;
        Harness h(cfg);
        const Req a = make_req("a", prompt(3, 20), 30);
        const Req b = make_req("b", prompt(4, 150), 6);
        h.add(a);
        EXPECT_EQ(h.sched_.step(), StepKind::kPrefill);
        EXPECT_EQ(h.sched_.step(), StepKind::kDecode);
        h.add(b);
        EXPECT_EQ(h.sched_.step(), StepKind::kPrefill);
        const ForwardBatch& first_chunk = h.runner_.launched.back();
        if (mixed) {
            ASSERT_EQ(first_chunk.seqs.size(), 2u);
            EXPECT_EQ(first_chunk.seqs[0].rid, "b");
            // 64 − 1 decode token, in whole pages.
            EXPECT_EQ(static_cast<std::int64_t>(first_chunk.seqs[0].tokens.size()), (63 / page()) * page());
            EXPECT_EQ(first_chunk.seqs[1].rid, "a");
            EXPECT_EQ(first_chunk.seqs[1].tokens.size(), 1u);
            EXPECT_TRUE(first_chunk.seqs[1].need_token);
            EXPECT_EQ(h.results_["a"].tokens.size(), 3u);  // prefill, decode, the mixed step
        } else {
            ASSERT_EQ(first_chunk.seqs.size(), 1u);
            EXPECT_EQ(static_cast<std::int64_t>(first_chunk.seqs[0].tokens.size()), 64);
            EXPECT_EQ(h.results_["a"].tokens.size(), 2u);
        }
        h.run();
        EXPECT_EQ(h.results_["a"].tokens, expected(a)) << "mixed " << mixed;
        EXPECT_EQ(h.results_["b"].tokens, expected(b)) << "mixed " << mixed;
        // While b's prompt was computed, a decoded in every step (mixed) or in none.
        const auto [b_prefill_steps, a_steps_during_b_prefill] = steps_carrying(h.runner_, "b", "a");
        EXPECT_EQ(b_prefill_steps, 3);  // 150 tokens in chunks of at most 63 (mixed) or 64
        EXPECT_EQ(a_steps_during_b_prefill, mixed ? b_prefill_steps : 0);
    }
}

// Decode sequences launched per rid.
std::map<std::string, int> decode_seqs(const FakeRunner& runner) {
    std::map<std::string, int> n;
    for (const ForwardBatch& b : runner.launched)
        for (const auto& q : b.seqs)
            if (q.tokens.size() == 1 && q.need_token && q.start_pos > 0) ++n[q.rid];
    return n;
}

// Launched prefill steps (a sequence of more than one token) that also carry a decode token
// fed from the step in flight, and all launched prefill steps.
std::pair<int, int> mixed_future_steps(const FakeRunner& runner) {
    int fed = 0, prefill = 0;
    for (const ForwardBatch& batch : runner.launched) {
        bool chunk = false, future = false;
        for (const auto& q : batch.seqs) {
            chunk = chunk || q.tokens.size() > 1;
            future = future || q.tokens == Tokens{executor::kFutureToken};
        }
        prefill += chunk ? 1 : 0;
        fed += chunk && future ? 1 : 0;
    }
    return {fed, prefill};
}

// --enable-mixed-chunk with overlap scheduling: while a prompt is computed in chunks, every
// chunk's step also carries the running request's decode token, fed the token the step in
// flight samples; outputs equal the reference chain.
TEST_P(SchedulerTest, OverlapMixedChunkCarriesTheRunningBatch) {
    SchedulerConfig cfg = overlapped(page());
    cfg.chunked_prefill_size = 64;
    cfg.enable_mixed_chunk = true;
    Harness h(cfg, /*queued=*/true);
    const Req a = make_req("a", prompt(3, 20), 30);
    const Req b = make_req("b", prompt(4, 150), 6);
    h.add(a);
    for (int i = 0; i < 4; ++i) h.sched_.step();
    ASSERT_GT(h.results_["a"].tokens.size(), 1u);
    h.add(b);
    h.run();
    EXPECT_EQ(h.results_["a"].tokens, expected(a));
    EXPECT_EQ(h.results_["b"].tokens, expected(b));
    EXPECT_EQ(h.runner_.dependency_violations, 0);
    EXPECT_EQ(h.runner_.max_in_flight, 2);
    const auto [b_prefill_steps, a_steps_during_b_prefill] = steps_carrying(h.runner_, "b", "a");
    EXPECT_EQ(b_prefill_steps, 3);  // 150 tokens in chunks of at most 63
    EXPECT_EQ(a_steps_during_b_prefill, b_prefill_steps);
    EXPECT_EQ(mixed_future_steps(h.runner_).first, b_prefill_steps);
}

// A workload whose prompts arrive while others decode gives the serial loop's outputs with
// mixed chunks and overlap together, and its mixed steps are fed future tokens.
TEST_P(SchedulerTest, OverlapWithMixedChunksGivesTheSerialOutputs) {
    std::vector<Req> reqs = workload(8, 40, 12);
    reqs.push_back(make_req("long", prompt(50, 200), 9));
    reqs.push_back(make_req("one", prompt(51, 9), 1));
    reqs.push_back(stops_at(3));
    SchedulerConfig cfg = roomy(page());
    cfg.chunked_prefill_size = 64;
    const auto serial = run_and_check(cfg, reqs, nullptr, /*queued=*/true);

    cfg.enable_mixed_chunk = true;
    cfg.overlap_schedule = true;
    auto both = run_and_check(cfg, reqs, nullptr, /*queued=*/true);
    const FakeRunner& runner = last_->runner_;
    EXPECT_EQ(runner.dependency_violations, 0);
    EXPECT_EQ(runner.chunk_mismatches, 0);
    for (const Req& r : reqs) {
        EXPECT_EQ(both[r.rid].tokens, serial.at(r.rid).tokens) << r.rid;
        EXPECT_EQ(both[r.rid].reason, serial.at(r.rid).reason) << r.rid;
    }
    const auto [fed, prefill] = mixed_future_steps(runner);
    EXPECT_GT(fed, 0);
    EXPECT_LE(fed, prefill);
    // No step is launched past a request's length limit.
    const auto n_decode = decode_seqs(runner);
    for (const Req& r : reqs) {
        if (r.rid == "stop") continue;
        EXPECT_EQ(n_decode.count(r.rid) ? n_decode.at(r.rid) : 0, r.max_new_tokens - 1) << r.rid;
    }
}

TEST_P(SchedulerTest, OverlapScheduleGivesTheSerialOutputs) {
    std::vector<Req> reqs = workload(8, 10, 12);
    reqs.push_back(make_req("long", prompt(50, 200), 9));
    reqs.push_back(make_req("one", prompt(51, 9), 1));
    reqs.push_back(make_req("two", prompt(52, 9), 2));
    reqs.push_back(stops_at(3));
    SchedulerConfig cfg = roomy(page());
    cfg.chunked_prefill_size = 64;
    const auto serial = run_and_check(cfg, reqs, nullptr, /*queued=*/true);
    EXPECT_EQ(last_->runner_.future_fed, 0);

    cfg.overlap_schedule = true;
    auto overlapped = run_and_check(cfg, reqs, nullptr, /*queued=*/true);
    const FakeRunner& runner = last_->runner_;
    EXPECT_EQ(runner.max_in_flight, 2);
    EXPECT_EQ(runner.dependency_violations, 0);
    EXPECT_GT(runner.future_fed, 20);
    EXPECT_GT(runner.future_fed_after_prefill, 0);  // new requests decode in the step after their prompt
    for (const Req& r : reqs) {
        EXPECT_EQ(overlapped[r.rid].tokens, serial.at(r.rid).tokens) << r.rid;
        EXPECT_EQ(overlapped[r.rid].reason, serial.at(r.rid).reason) << r.rid;
    }
    EXPECT_EQ(overlapped["stop"].reason, FinishReason::kStop);
    ASSERT_EQ(overlapped["stop"].tokens.size(), 4u);
    // No step is launched past a request's length limit; a stop token costs one step at most.
    const auto n_decode = decode_seqs(runner);
    for (const Req& r : reqs) {
        if (r.rid == "stop") continue;
        EXPECT_EQ(n_decode.count(r.rid) ? n_decode.at(r.rid) : 0, r.max_new_tokens - 1) << r.rid;
    }
    EXPECT_LE(n_decode.at("stop"), 4);
    EXPECT_GE(n_decode.at("stop"), 3);
}

TEST_P(SchedulerTest, OverlapCachesAStoppedRequestAsTheSerialLoopDoes) {
    // When the eos token comes, the next decode step is already in flight: the K/V it writes
    // (of the eos token) is not the request's, and the tree keeps what serial decoding keeps.
    // Also when the eos is the prompt's own token, sampled by the prefill step.
    for (const std::size_t eos_at : {3u, 0u}) {
        const Req stop = stops_at(eos_at);
        std::int64_t cached[2] = {};
        for (const bool overlap : {false, true}) {
            SchedulerConfig cfg = roomy(page());
            cfg.overlap_schedule = overlap;
            auto results = run_and_check(cfg, {stop}, nullptr, /*queued=*/true);
            ASSERT_EQ(results["stop"].tokens.size(), eos_at + 1);
            if (overlap) {
                EXPECT_GT(last_->runner_.future_fed, 0);  // a wasted step was launched
            }
            cached[overlap] = last_->sched_.stats().evictable_tokens;
        }
        EXPECT_EQ(cached[1], cached[0]) << eos_at;
        EXPECT_EQ(cached[1], (12 + static_cast<std::int64_t>(eos_at)) / page() * page()) << eos_at;
    }
}

TEST_P(SchedulerTest, OverlapCachesOnlyComputedPositionsOfAPrompt) {
    // When a prompt's step is collected, the request's first decode step is already in flight
    // and holds the slot past the prompt. Had the tree taken that slot, a failed decode step
    // would leave it unwritten for the next request with the same text.
    Harness h(overlapped(page()), /*queued=*/true);
    const Req a = make_req("a", prompt(7, 31), 20);
    h.add(a);
    h.sched_.step();  // a's prompt collected; its first decode step in flight
    ASSERT_EQ(h.results_["a"].tokens.size(), 1u);
    ASSERT_EQ(h.runner_.in_flight("a"), 1);
    h.runner_.fail_next = true;
    h.sched_.step();  // that step fails
    EXPECT_EQ(h.results_["a"].reason, FinishReason::kAbort);
    h.run();
    Tokens text = a.input_ids;
    text.push_back(h.results_["a"].tokens[0]);
    for (int i = 0; i < 9; ++i) text.push_back(100 + i);
    const Req b = make_req("b", text, 5);
    h.add(b);
    h.run();  // FakeRunner checks that b reads no unwritten slot
    EXPECT_EQ(h.results_["b"].tokens, expected(b));
    EXPECT_EQ(h.results_["b"].cached_tokens, 31 / page() * page());
}

TEST_P(SchedulerTest, OverlapRetractionResumesWithTheSameOutputs) {
    auto reqs = workload(8, 24, 60);
    auto free_run = run_and_check(roomy(page()), reqs);
    SchedulerConfig tight = roomy(page());
    tight.max_total_num_tokens = 256;
    tight.new_token_ratio.schedule_conservativeness = 0.3;
    tight.overlap_schedule = true;
    auto pressed = run_and_check(tight, reqs, nullptr, /*queued=*/true);
    EXPECT_GT(last_->sched_.stats().total_retracted_reqs, 0);
    EXPECT_GT(last_->runner_.future_fed, 0);
    for (const Req& r : reqs) EXPECT_EQ(free_run[r.rid].tokens, pressed[r.rid].tokens) << r.rid;
}

TEST_P(SchedulerTest, OverlapAbortAndFailureOfAStepFedAFutureToken) {
    Harness h(overlapped(page()), /*queued=*/true);
    const Req a = make_req("a", prompt(1, 10), 40);
    h.add(a);
    h.add(make_req("b", prompt(2, 10), 40));
    // Between steps one step is in flight: the decode step launched, fed a future token,
    // while the one before it ran.
    ASSERT_TRUE(h.step_until([&] { return h.results_["b"].tokens.size() >= 3 && h.runner_.in_flight("b") == 1; }));
    EXPECT_EQ(h.runner_.launched.back().seqs.back().tokens, Tokens{executor::kFutureToken});
    const std::size_t n_b = h.results_["b"].tokens.size();
    EXPECT_TRUE(h.sched_.abort("b"));
    h.expect_pool_whole();
    const Req b2 = make_req("b", prompt(3, 40), 6);  // the rid again, while the old steps run
    h.add(b2, "b2");
    h.run();
    EXPECT_EQ(h.results_["b"].reason, FinishReason::kAbort);
    EXPECT_EQ(h.results_["b"].tokens.size(), n_b);
    EXPECT_EQ(h.results_["a"].tokens, expected(a));
    EXPECT_EQ(h.results_["b2"].tokens, expected(b2));

    // A failed step fails the step fed its tokens too; both requests end, the pool is whole,
    // and the loop goes on.
    h.add(make_req("c", prompt(4, 10), 30));
    ASSERT_TRUE(h.step_until([&] { return h.results_["c"].tokens.size() >= 2 && h.runner_.in_flight("c") == 1; }));
    h.runner_.fail_next = true;
    h.sched_.step();
    EXPECT_EQ(h.results_["c"].reason, FinishReason::kAbort);
    h.run();
    const Req d = make_req("d", prompt(5, 10), 8);
    h.add(d);
    h.run();
    EXPECT_EQ(h.results_["d"].tokens, expected(d));
}

TEST(SchedulerConfigTest, OverlapNeedsOneStepInFlight) {
    SchedulerConfig cfg = roomy(1);
    cfg.overlap_schedule = true;
    EXPECT_TRUE(cfg.validate().ok());
    cfg.max_in_flight_steps = 2;
    EXPECT_FALSE(cfg.validate().ok());
    cfg.max_in_flight_steps = 1;
    cfg.chunked_prefill_size = 64;
    cfg.enable_mixed_chunk = true;
    EXPECT_TRUE(cfg.validate().ok());
}

TEST(SchedulerConfigTest, MixedChunkNeedsOneStepInFlight) {
    SchedulerConfig cfg = roomy(1);
    cfg.chunked_prefill_size = 64;
    cfg.enable_mixed_chunk = true;
    EXPECT_TRUE(cfg.validate().ok());
    cfg.max_in_flight_steps = 3;
    EXPECT_FALSE(cfg.validate().ok());
}

INSTANTIATE_TEST_SUITE_P(PageSizes, SchedulerTest, ::testing::Values(1, 16));

// Constrained decoding with a stand-in constraint: `length` even tokens (4 or more), then the
// stop token 2. It records what it was told.
class EvenTokens final : public TokenConstraint {
 public:
    explicit EvenTokens(int length, bool fail = false) : length_(length), fail_(fail) {}
    StatusOr<std::shared_ptr<const std::vector<std::uint32_t>>> allowed_tokens() override {
        if (fail_ && static_cast<int>(accepted.size()) == 1) return Status::ResourceExhausted("too many states");
        auto mask = std::make_shared<std::vector<std::uint32_t>>((kVocab + 31) / 32, 0u);
        const bool done = static_cast<int>(accepted.size()) == length_;
        for (std::int32_t t = done ? 2 : 4; t < (done ? 3 : kVocab); t += 2) (*mask)[t >> 5] |= 1u << (t & 31);
        return std::shared_ptr<const std::vector<std::uint32_t>>(std::move(mask));
    }
    bool accept(std::int32_t token) override {
        const bool done = static_cast<int>(accepted.size()) == length_;
        if (done ? token != 2 : (token % 2 != 0 || token < 4)) return false;
        accepted.push_back(token);
        terminated_ = done;
        return true;
    }
    bool terminated() const override { return terminated_; }
    std::vector<std::int32_t> accepted;

 private:
    int length_;
    bool fail_;
    bool terminated_ = false;
};

TEST(ConstrainedDecodingTest, EveryTokenIsMaskedAndToldAndTheMatchStops) {
    for (const bool overlap : {false, true}) {
        SCOPED_TRACE(overlap ? "overlap" : "plain");
        Harness h(overlap ? overlapped(1) : roomy(1), /*queued=*/overlap);
        auto constraint = std::make_shared<EvenTokens>(5);
        Req req = make_req("c", prompt(3, 20), 40, /*ignore_eos=*/false);
        req.constraint = constraint;
        h.add(req);
        h.add(make_req("free", prompt(4, 9), 12));  // unconstrained, decoding beside it
        h.run();
        const Result& got = h.results_["c"];
        EXPECT_EQ(got.reason, FinishReason::kStop);
        ASSERT_EQ(got.tokens.size(), 6u);
        EXPECT_EQ(got.tokens, constraint->accepted);
        EXPECT_EQ(got.tokens.back(), 2);
        for (std::size_t i = 0; i + 1 < got.tokens.size(); ++i) EXPECT_EQ(got.tokens[i] % 2, 0) << i;
        EXPECT_EQ(h.runner_.masked_samples, 6);
        EXPECT_EQ(h.results_["free"].tokens, expected(make_req("free", prompt(4, 9), 12)));
        // Under overlap the constrained request waited for each token; the other did not.
        EXPECT_EQ(h.runner_.dependency_violations, 0);
        if (overlap) {
            EXPECT_GT(h.runner_.future_fed, 0);
        }
    }
}

TEST(ConstrainedDecodingTest, TheStopTokenEndsTheMatchEvenWithIgnoreEos) {
    Harness h(roomy(1));
    Req req = make_req("c", prompt(5, 8), 40, /*ignore_eos=*/true);
    req.constraint = std::make_shared<EvenTokens>(2);
    h.add(req);
    h.run();
    EXPECT_EQ(h.results_["c"].reason, FinishReason::kStop);
    EXPECT_EQ(h.results_["c"].tokens.size(), 3u);
}

TEST(ConstrainedDecodingTest, AFailingConstraintAbortsTheRequestAndFreesItsKv) {
    Harness h(roomy(4));
    Req req = make_req("c", prompt(6, 13), 40, /*ignore_eos=*/false);
    req.constraint = std::make_shared<EvenTokens>(5, /*fail=*/true);
    h.add(req);
    h.run();
    const Result& got = h.results_["c"];
    EXPECT_EQ(got.reason, FinishReason::kAbort);
    EXPECT_EQ(got.error, "constrained decoding failed: too many states");
    EXPECT_EQ(got.tokens.size(), 1u);  // the second token's mask failed: that token is not sent
}

TEST(ConstrainedDecodingTest, ReasoningComesFirstUnconstrained) {
    Harness h(roomy(1));
    const Tokens input = prompt(7, 10);
    // The think-end token is the request's second unconstrained token.
    const std::int32_t first = reference_next(input);
    Tokens history = input;
    history.push_back(first);
    const std::int32_t think_end = reference_next(history);
    auto constraint = std::make_shared<EvenTokens>(3);
    Req req = make_req("c", input, 40, /*ignore_eos=*/false);
    req.think_end_id = think_end;
    req.constraint = constraint;
    h.add(req);
    h.run();
    const Result& got = h.results_["c"];
    ASSERT_EQ(got.tokens.size(), 6u);
    EXPECT_EQ(got.tokens[0], first);
    EXPECT_EQ(got.tokens[1], think_end);
    EXPECT_EQ(constraint->accepted, Tokens(got.tokens.begin() + 2, got.tokens.end()));
    EXPECT_EQ(got.reason, FinishReason::kStop);
    EXPECT_EQ(h.runner_.masked_samples, 4);
}

// --enable-strict-thinking: inside the reasoning the filter holds (the fake's first choice is
// banned), at the budget only the think-end token may come, after it nothing is filtered; with
// overlap a filtered request waits for its token instead of following.
TEST(StrictThinkingTest, TheReasoningIsFilteredAndEndsAtItsBudget) {
    for (const bool overlap : {false, true}) {
        Harness h(overlap ? overlapped(1) : roomy(1), /*queued=*/overlap);
        const Tokens input = prompt(13, 10);
        const std::int32_t natural = reference_next(input);
        const std::int32_t think_end = (natural + 7) % kVocab;
        auto filter = std::make_shared<std::vector<std::uint32_t>>((kVocab + 31) / 32, ~0u);
        (*filter)[natural / 32] &= ~(1u << (natural % 32));
        Req req = make_req("t", input, 8);
        req.think_end_id = think_end;
        req.thinking_allowed = filter;
        req.thinking_budget = 3;
        h.add(req);
        h.run();
        const Result& got = h.results_["t"];
        ASSERT_EQ(got.tokens.size(), 8u);
        for (int i = 0; i < 3; ++i) EXPECT_NE(got.tokens[i], natural) << i << " overlap " << overlap;
        EXPECT_EQ(got.tokens[3], think_end) << "the budget of 3 is spent";
        EXPECT_EQ(got.reasoning_tokens, 4);
        EXPECT_EQ(h.runner_.masked_samples, 4) << "nothing filtered after the think-end token";
        EXPECT_EQ(h.runner_.dependency_violations, 0);
    }
}

// ---- /pause_generation: in place and retract ------------------------------------------------

TEST(SchedulerPauseTest, PausedNothingRunsAndEveryRequestFinishesAfterResume) {
    for (const bool retract : {false, true}) {
        for (const bool overlap : {false, true}) {
            SchedulerConfig cfg = overlap ? overlapped(1) : roomy(1);
            cfg.chunked_prefill_size = 16;  // the long prompt is mid-chunk when paused
            Harness h(cfg, /*queued=*/overlap);
            std::vector<Req> reqs = workload(3, 10, 12);
            reqs.push_back(make_req("long", prompt(9, 60), 6));
            for (const Req& r : reqs) h.add(r);
            for (int i = 0; i < 3; ++i) h.sched_.step();
            h.sched_.pause(retract);  // runs what is in flight to its end
            const std::size_t launched = h.runner_.launched.size() + h.runner_.batches.size();
            EXPECT_TRUE(h.sched_.check_invariants().ok());
            const SchedulerStats paused = h.sched_.stats();
            if (retract) {
                EXPECT_EQ(paused.num_running_reqs, 0) << "overlap " << overlap;
                EXPECT_EQ(paused.available_tokens + paused.evictable_tokens, paused.max_total_num_tokens)
                    << "every running request gave up its KV";
                EXPECT_GE(paused.total_retracted_reqs, 1);
            }
            h.add(make_req("late", prompt(11, 8), 4));
            for (int i = 0; i < 5; ++i) EXPECT_EQ(h.sched_.step(), StepKind::kIdle);
            EXPECT_EQ(h.runner_.launched.size() + h.runner_.batches.size(), launched) << "nothing ran while paused";
            EXPECT_TRUE(h.sched_.paused());
            h.sched_.resume();
            h.run();
            reqs.push_back(make_req("late", prompt(11, 8), 4));
            for (const Req& r : reqs) {
                EXPECT_EQ(h.results_[r.rid].tokens, expected(r)) << r.rid << " retract " << retract;
                EXPECT_EQ(h.results_[r.rid].reason, FinishReason::kLength) << r.rid;
            }
        }
    }
}

// ---- /update_weights_from_disk: held admission, then the update alone ----------------------

TEST(SchedulerWeightUpdateTest, HeldAdmissionDrainsTheRunningBatchThenTheUpdateRunsAlone) {
    for (const bool overlap : {false, true}) {
        SchedulerConfig cfg = overlap ? overlapped(1) : roomy(1);
        cfg.chunked_prefill_size = 16;  // "long" is mid-prompt when admission is held
        Harness h(cfg, /*queued=*/overlap);
        std::vector<Req> running = workload(3, 10, 12);
        running.push_back(make_req("long", prompt(9, 60), 6));
        for (const Req& r : running) h.add(r);
        for (int i = 0; i < 3; ++i) h.sched_.step();
        h.sched_.hold_admission(true);
        const Req late = make_req("late", prompt(11, 8), 4);
        h.add(late);
        int steps = 0;
        while (!h.sched_.nothing_running() && steps++ < 200) h.sched_.step();
        ASSERT_TRUE(h.sched_.nothing_running()) << "overlap " << overlap;
        for (const Req& r : running) EXPECT_EQ(h.results_[r.rid].tokens, expected(r)) << r.rid << " finished first";
        EXPECT_TRUE(h.results_["late"].tokens.empty()) << "admitted while held";
        EXPECT_FALSE(h.sched_.idle()) << "late still waits";

        ASSERT_TRUE(h.sched_.run_weight_update({.model_path = "/ckpt/step-1"}).ok());
        EXPECT_EQ(h.runner_.weight_loads, (std::vector<std::string>{"load /ckpt/step-1", "commit /ckpt/step-1"}));
        // A failed load is answered, and every rank drops what it loaded.
        EXPECT_EQ(h.sched_.run_weight_update({.model_path = "/bad"}).message(), "no such folder");
        EXPECT_EQ(h.runner_.weight_loads.back(), "discard /bad");
        EXPECT_TRUE(h.sched_.drop_cache_after_weight_update()) << "a waiting request holds no cache";
        EXPECT_EQ(h.sched_.stats().evictable_tokens, 0) << "the old weights' KV is gone";
        EXPECT_TRUE(h.sched_.check_invariants().ok());
        h.sched_.hold_admission(false);
        h.run();
        EXPECT_EQ(h.results_["late"].tokens, expected(late));
    }
}

TEST(SchedulerWeightUpdateTest, TheCacheStaysWhileAPausedRequestRunsOnIt) {
    Harness h(roomy(1));
    const Req r = make_req("r", prompt(3, 12), 20);
    h.add(r);
    for (int i = 0; i < 3; ++i) h.sched_.step();
    h.sched_.pause(/*retract=*/false);
    EXPECT_FALSE(h.sched_.nothing_running());
    ASSERT_TRUE(h.sched_.run_weight_update({.model_path = "/ckpt"}).ok());
    EXPECT_FALSE(h.sched_.drop_cache_after_weight_update());
    h.sched_.resume();
    h.run();
    EXPECT_EQ(h.results_["r"].tokens.size(), 20u);
    EXPECT_TRUE(h.sched_.check_invariants().ok());
}

// ---- /release_memory_occupation -------------------------------------------------------------

// Refused while any request waits or runs (SGLang asserts an idle server); then the prefix
// cache goes with the KV cache, the touched pages are forgotten, and one step tells the ranks.
// Without a release (no --enable-memory-saver) no step runs, and the cache still goes when
// asked.
TEST(SchedulerMemoryReleaseTest, RefusedUntilIdleThenTheCacheGoesAndOneStepTellsTheRanks) {
    for (const bool overlap : {false, true}) {
        Harness h(overlap ? overlapped(1) : roomy(1), /*queued=*/overlap);
        const Req r = make_req("r", prompt(3, 40), 6);
        h.add(r);
        h.sched_.step();
        const Status busy = h.sched_.run_memory_release({.weights = true, .kv_cache = true}, false);
        EXPECT_EQ(busy.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(busy.message().find("should be called only when server is idle"), std::string::npos)
            << busy.message();
        EXPECT_TRUE(h.runner_.releases.empty());
        h.run();
        EXPECT_EQ(h.results_["r"].tokens, expected(r)) << "the refused release changed nothing";
        ASSERT_GT(h.sched_.stats().evictable_tokens, 0) << "the finished prompt is cached";

        ASSERT_TRUE(h.sched_.run_memory_release({}, /*drop_cache=*/false).ok());
        EXPECT_GT(h.sched_.stats().evictable_tokens, 0) << "nothing asked, nothing dropped";
        ASSERT_TRUE(h.sched_.run_memory_release({}, /*drop_cache=*/true).ok());
        EXPECT_EQ(h.sched_.stats().evictable_tokens, 0);
        EXPECT_TRUE(h.runner_.releases.empty()) << "no step without a release";

        h.add(make_req("again", prompt(3, 40), 6));
        h.run();
        ASSERT_TRUE(h.sched_.run_memory_release({.weights = true, .kv_cache = true}, false).ok());
        ASSERT_EQ(h.runner_.releases.size(), 1u);
        EXPECT_TRUE(h.runner_.releases[0].weights && h.runner_.releases[0].kv_cache);
        EXPECT_EQ(h.sched_.stats().evictable_tokens, 0) << "the KV cache's release drops the prefix cache";
        EXPECT_EQ(h.sched_.stats().touched_tokens, 0) << "its pages were given back";
        EXPECT_TRUE(h.sched_.check_invariants().ok());
        h.add(make_req("after", prompt(3, 40), 6));
        h.run();
        EXPECT_EQ(h.results_["after"].tokens, expected(make_req("after", prompt(3, 40), 6)));
    }
}

// ---- the prefill delayer (SGLang's prefill_delayer.py) through the scheduler -----------------

SchedulerConfig delayed(int max_delay_passes) {
    SchedulerConfig cfg = overlapped(1);
    cfg.prefill_delayer = PrefillDelayerConfig{.max_delay_passes = max_delay_passes, .dp_attention = true,
                                               .dp_size = 2};
    return cfg;
}

// Steps the harness as the engine loop does: a step that launched nothing is followed by an
// idle round of the lockstep (before_round()). Returns the steps until `rid` had a token.
int steps_until_first_token(Harness& h, const std::string& rid) {
    for (int i = 0; i < 100; ++i) {
        const int launched = static_cast<int>(h.runner_.launched.size());
        h.sched_.step();
        if (static_cast<int>(h.runner_.launched.size()) == launched) (void)h.runner_.before_round();
        if (!h.results_[rid].tokens.empty()) return i + 1;
    }
    return -1;
}

std::int64_t outcomes(const SchedulerStats& s, PrefillEstimation e, bool allow, PrefillDelayReason r, bool ran) {
    return s.prefill_delayer->outcomes[static_cast<int>(e)][allow][static_cast<int>(r)][ran];
}

TEST(SchedulerPrefillDelayerTest, ALoneGroupWaitsForTheOthersAtMostMaxDelayPassesMinusOne) {
    Harness h(delayed(4), /*queued=*/true);
    h.runner_.other_groups = [](int) { return std::vector<executor::BatchRunner::PrefillIntent>{{}}; };
    h.add(make_req("a", prompt(1, 20), 3));
    // Three delayed passes, then the fourth admits it (a step prefills and collects).
    EXPECT_EQ(steps_until_first_token(h, "a"), 4);
    const SchedulerStats s = h.sched_.stats();
    ASSERT_TRUE(s.prefill_delayer.has_value());
    EXPECT_EQ(outcomes(s, PrefillEstimation::kMixed, false, PrefillDelayReason::kDelay, false), 3);
    EXPECT_EQ(outcomes(s, PrefillEstimation::kMixed, true, PrefillDelayReason::kWaitTimeout, true), 1);
    EXPECT_EQ(h.runner_.intents.front().prefillable, 1);
    EXPECT_EQ(h.runner_.intents.front().waiting, 1);
    h.run();
    EXPECT_EQ(h.results_["a"].tokens, expected(make_req("a", prompt(1, 20), 3)));
    EXPECT_EQ(h.runner_.launches_without_round, 0);
}

TEST(SchedulerPrefillDelayerTest, ThePrefillRunsOnceEveryGroupHasOne) {
    Harness h(delayed(30), /*queued=*/true);
    // The other group gets a request at its third agreement.
    h.runner_.other_groups = [](int agreement) {
        executor::BatchRunner::PrefillIntent other;
        other.prefillable = agreement >= 2 ? 1 : 0;
        return std::vector<executor::BatchRunner::PrefillIntent>{other};
    };
    h.add(make_req("a", prompt(2, 20), 2));
    EXPECT_EQ(steps_until_first_token(h, "a"), 3);
    const SchedulerStats s = h.sched_.stats();
    EXPECT_EQ(outcomes(s, PrefillEstimation::kAll, true, PrefillDelayReason::kWaitSuccess, true), 1);
    // It waited two passes; the passes with nothing to admit after it still count ("mixed").
    EXPECT_NE(s.prefill_delayer->prometheus("").find("sglang:prefill_delayer_wait_forward_passes_sum 2.0"),
              std::string::npos);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(h.runner_.intents[i].prefillable, 1) << i;
    EXPECT_EQ(h.runner_.intents[3].prefillable, 0);
    h.run();
    EXPECT_EQ(h.runner_.launches_without_round, 0);
}

TEST(SchedulerPrefillDelayerTest, WithoutItNothingIsAgreed) {
    Harness h(overlapped(1), /*queued=*/true);
    h.add(make_req("a", prompt(3, 20), 2));
    EXPECT_EQ(steps_until_first_token(h, "a"), 1);
    EXPECT_FALSE(h.sched_.stats().prefill_delayer.has_value());
    EXPECT_TRUE(h.runner_.intents.empty());
}

}  // namespace
}  // namespace tessera::scheduler
