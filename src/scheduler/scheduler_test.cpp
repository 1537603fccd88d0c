// Scheduler tests without a model: FakeRunner computes each next token from the K/V slots it
// is given, the way a model would — every position's entry is a hash chained from the entry
// of the previous position and its own token, and the output reads all entries in order — so
// the result equals a hash of the full token history only if the scheduler's slot and
// position bookkeeping is right. Outputs are
// compared against that history hash computed directly (reference_next).

#include "scheduler/scheduler.h"

#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include <gtest/gtest.h>

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

class FakeRunner final : public executor::BatchRunner {
 public:
    explicit FakeRunner(std::int64_t n_rows) : kv_(static_cast<std::size_t>(n_rows), 0) {}

    std::function<void()> before_run;     // e.g. the scheduler's invariant check
    bool fail_next = false;               // inject one failed step
    std::vector<std::vector<std::string>> batches;  // rids of every batch, in order
    std::int64_t n_partial_chunks = 0;    // sequences run without need_token

    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) override {
        if (before_run) before_run();
        if (fail_next) {
            fail_next = false;
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
                EXPECT_NE(kv_[slot], 0u) << s.rid << ": reads unwritten slot " << slot;
            }
            std::uint64_t h = s.start_pos == 0 ? kChainSeed : kv_[s.slots[s.start_pos - 1]];
            for (std::size_t i = 0; i < s.tokens.size(); ++i) {
                const std::int64_t pos = s.start_pos + static_cast<std::int64_t>(i);
                h = mix(h, s.tokens[i], pos);
                kv_[s.slots[pos]] = h;
            }
            if (!s.need_token) ++n_partial_chunks;
            std::uint64_t acc = 0;
            for (const std::int32_t slot : s.slots) acc = attend(acc, kv_[slot]);
            out.push_back({.token = s.need_token ? to_token(acc) : -1});
        }
        batches.push_back(std::move(rids));
        return out;
    }

 private:
    std::vector<std::uint64_t> kv_;  // per slot: the chained hash standing in for K/V
};

struct Result {
    std::vector<std::int32_t> tokens;
    FinishReason reason = FinishReason::kNone;
    std::int64_t cached_tokens = -1;
    int n_events = 0;
};

// Drives a scheduler to completion, checking the KV invariants before every batch and the
// allocator at the end.
class Harness {
 public:
    Harness(const SchedulerConfig& cfg)
        : runner_(cfg.max_total_num_tokens + cfg.page_size),
          sched_(cfg, runner_, [this] { return now_ += 0.01; }) {
        runner_.before_run = [this] {
            const Status s = sched_.check_invariants();
            EXPECT_TRUE(s.ok()) << s.to_string();
        };
    }
    void add(Req req) {
        const std::string rid = req.rid;
        req.sink = [this, rid](const ReqEvent& ev) {
            Result& r = results_[rid];
            ++r.n_events;
            EXPECT_EQ(ev.rid, rid);
            if (ev.token) r.tokens.push_back(ev.token->token);
            if (ev.finished) {
                EXPECT_EQ(r.reason, FinishReason::kNone) << rid << " finished twice";
                r.reason = ev.finish_reason;
                r.cached_tokens = ev.cached_tokens;
                EXPECT_EQ(ev.completion_tokens, static_cast<std::int64_t>(r.tokens.size()));
            }
        };
        ASSERT_TRUE(sched_.add_request(std::move(req)).ok());
    }
    void run(int max_steps = 100000) {
        for (int i = 0; i < max_steps && !sched_.idle(); ++i) {
            sched_.step();
            const SchedulerStats st = sched_.stats();
            max_running_ = std::max(max_running_, st.num_running_reqs);
        }
        ASSERT_TRUE(sched_.idle());
        expect_pool_whole();
    }
    void expect_pool_whole() {
        const Status s = sched_.check_invariants();
        EXPECT_TRUE(s.ok()) << s.to_string();
        const SchedulerStats st = sched_.stats();
        if (sched_.idle()) {
            // Nothing is locked when idle: every slot is free or evictable cache.
            EXPECT_EQ(st.available_tokens + st.evictable_tokens, st.max_total_num_tokens);
        }
    }

    double now_ = 0.0;  // before sched_: its constructor reads the clock
    FakeRunner runner_;
    Scheduler sched_;
    std::map<std::string, Result> results_;
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

SchedulerConfig roomy(std::int64_t page) {
    return {.max_total_num_tokens = 4096, .page_size = page, .max_running_requests = 64,
            .decode_log_interval = 5};
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
                                                Harness** keep = nullptr) {
        auto h = std::make_unique<Harness>(cfg);
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
    while (!s.idle()) s.step();

    SchedulerConfig bad = roomy(16);
    bad.max_total_num_tokens = 1000;
    EXPECT_FALSE(bad.validate().ok());
    bad = roomy(16);
    bad.chunked_prefill_size = 8;
    EXPECT_FALSE(bad.validate().ok());
}

INSTANTIATE_TEST_SUITE_P(PageSizes, SchedulerTest, ::testing::Values(1, 16));

}  // namespace
}  // namespace tessera::scheduler
