#include "scheduler/dynamic_chunking.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessera::scheduler {
namespace {

// The cost model used throughout: T(l) = 1e-6 l² + 0.05 l + 3 ms, initial chunk C = 8192,
// so target = T(C) − T(0) = 67.108864 + 409.6 = 476.708864 ms.
constexpr double kA = 1e-6;
constexpr double kB = 0.05;
constexpr double kC = 3.0;
constexpr int64_t kChunk = 8192;

QuadraticFit model() { return {.a = kA, .b = kB, .c = kC}; }

ChunkSizePredictor make(double smooth, int page_size, int64_t context_len = 131072,
                        int64_t max_prefill_tokens = 16384) {
    auto p = ChunkSizePredictor::create(model(), {.initial_chunk_size = kChunk,
                                                  .smooth_factor = smooth,
                                                  .page_size = page_size,
                                                  .context_len = context_len,
                                                  .max_prefill_tokens = max_prefill_tokens});
    EXPECT_TRUE(p.ok()) << p.status().message();
    return std::move(p).value();
}

// Feeds each predicted chunk back as history, as the scheduler does for one long prompt.
std::vector<int64_t> chunk_sequence(const ChunkSizePredictor& p, int n) {
    std::vector<int64_t> out;
    int64_t history = 0;
    for (int i = 0; i < n; ++i) {
        std::optional<int64_t> chunk = p.next_chunk(history);
        if (!chunk) break;
        out.push_back(*chunk);
        history += *chunk;
    }
    return out;
}

std::vector<PrefillSample> exact_samples(double a, double b, double c, double warmup_ms) {
    std::vector<PrefillSample> samples;
    for (int len : profile_lengths(static_cast<int>(kChunk))) {
        const double l = len;
        samples.push_back({len, a * l * l + b * l + c});
    }
    samples[0].ms = warmup_ms;  // a cold first run; the fit must ignore it
    return samples;
}

TEST(DynamicChunkingTest, ProfileLengths) {
    // len_i = int(1.25 C − i · floor(1.25 C / 128)), computed by hand.
    std::vector<int> l = profile_lengths(8192);  // 10240, step 80
    ASSERT_EQ(l.size(), 128u);
    EXPECT_EQ(l[0], 10240);
    EXPECT_EQ(l[1], 10160);
    EXPECT_EQ(l[127], 80);
    l = profile_lengths(1000);  // 1250, step floor(9.765625) = 9
    ASSERT_EQ(l.size(), 128u);
    EXPECT_EQ(l[1], 1241);
    EXPECT_EQ(l[127], 107);
    l = profile_lengths(1001);  // 1251.25, step 9: int(1242.25) = 1242
    EXPECT_EQ(l[0], 1251);
    EXPECT_EQ(l[1], 1242);
    l = profile_lengths(100);  // 125, step floor(0.9765625) = 0: the same length 128 times
    ASSERT_EQ(l.size(), 128u);
    EXPECT_EQ(l.front(), 125);
    EXPECT_EQ(l.back(), 125);
    EXPECT_TRUE(profile_lengths(0).empty());  // first length is 0: stop at once
    EXPECT_TRUE(profile_lengths(-8).empty());
}

TEST(DynamicChunkingTest, FitRecoversExactQuadraticAndDropsWarmup) {
    auto fit = fit_prefill_cost(exact_samples(kA, kB, kC, /*warmup_ms=*/1e6));
    ASSERT_TRUE(fit.ok()) << fit.status().message();
    EXPECT_NEAR(fit->a, kA, 1e-9 * kA);
    EXPECT_NEAR(fit->b, kB, 1e-9 * kB);
    EXPECT_NEAR(fit->c, kC, 1e-7);
    EXPECT_TRUE(fit->warning.empty());
    EXPECT_NEAR((*fit)(4096.0), kA * 4096 * 4096 + kB * 4096 + kC, 1e-9);
}

TEST(DynamicChunkingTest, FitNeedsEightSamplesAfterWarmup) {
    std::vector<PrefillSample> s;
    for (int i = 0; i < 9; ++i) s.push_back({1000 * (i + 1), kA * 1e6 * (i + 1) * (i + 1) + 10});
    EXPECT_TRUE(fit_prefill_cost(s).ok());  // 9 samples: 8 remain after the warm-up
    s.pop_back();
    auto fit = fit_prefill_cost(s);
    ASSERT_FALSE(fit.ok());
    EXPECT_NE(fit.status().message().find("(7 < 8)"), std::string::npos) << fit.status().message();

    // Enough samples but only two lengths: a, b, c are not determined.
    std::vector<PrefillSample> two(12, {1000, 5.0});
    for (size_t i = 0; i < two.size(); i += 2) two[i] = {2000, 9.0};
    fit = fit_prefill_cost(two);
    ASSERT_FALSE(fit.ok());
    EXPECT_NE(fit.status().message().find("distinct lengths"), std::string::npos) << fit.status().message();
}

TEST(DynamicChunkingTest, FitRejectsNonPositiveQuadraticTerm) {
    auto fit = fit_prefill_cost(exact_samples(-1e-6, 0.5, 2.0, 0.0));
    ASSERT_FALSE(fit.ok());
    EXPECT_EQ(fit.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(fit.status().message().find("Attention has O(n^2) complexity, so a must be positive"),
              std::string::npos)
        << fit.status().message();
}

TEST(DynamicChunkingTest, FitClampsNegativeLinearTermWithWarning) {
    auto fit = fit_prefill_cost(exact_samples(2e-6, -0.01, 5.0, 0.0));
    ASSERT_TRUE(fit.ok()) << fit.status().message();
    EXPECT_NEAR(fit->a, 2e-6, 1e-15);
    EXPECT_EQ(fit->b, 0.0);
    EXPECT_NE(fit->warning.find("b=-1.00e-02 is negative. Setting b=0."), std::string::npos) << fit->warning;
}

// Expected sequences computed outside the repository with a short Python 3 script that
// transcribes reference §7 (SGLang's predict_next_chunk_size, same double arithmetic):
// target = f(C) − f(0); x = (−B + sqrt(B² + 4·a·target)) / (2a), B = 2aL + b;
// size = max(int(C + s(x − C)), C // 4); align = max(page, 64); floor-align (>= align);
// min(size, context_len − L − 100, max_prefill_tokens); floor-align; < align → None;
// then L += size. context_len 131072, max_prefill_tokens 16384.
// Note the first chunk: x(0) evaluates to 8191.999999999998 in doubles, so int() gives 8191
// and the first chunk is 8128 (8064 with 128-token pages), not 8192.
TEST(DynamicChunkingTest, SequenceWithDefaultSmoothing) {
    const std::vector<int64_t> align64 = {8128, 6912, 6208, 5696, 5312, 5056, 4800, 4608, 4480, 4288};
    EXPECT_EQ(chunk_sequence(make(0.75, 1), 10), align64);
    EXPECT_EQ(chunk_sequence(make(0.75, 16), 10), align64);  // align = max(16, 64) = 64
    EXPECT_EQ(chunk_sequence(make(0.75, 128), 10),
              (std::vector<int64_t>{8064, 6912, 6144, 5632, 5248, 4992, 4736, 4608, 4480, 4352}));
    EXPECT_DOUBLE_EQ(make(0.75, 1).target_ms(), 476.708864);
}

TEST(DynamicChunkingTest, SmoothFactorOneFollowsTheModel) {
    const std::vector<int64_t> align64 = {8128, 6528, 5568, 4992, 4480, 4160, 3904, 3648, 3456, 3328};
    EXPECT_EQ(chunk_sequence(make(1.0, 1), 10), align64);
    EXPECT_EQ(chunk_sequence(make(1.0, 16), 10), align64);
    EXPECT_EQ(chunk_sequence(make(1.0, 128), 10),
              (std::vector<int64_t>{8064, 6528, 5504, 4992, 4480, 4096, 3840, 3584, 3456, 3328}));

    // Whatever the prefix, the chosen chunk costs at most the target and one more alignment
    // unit would reach it (at L = 0 exactly: x(0) is C up to rounding). All these prefixes
    // stay above the C/4 floor (smallest chunk here: 2752 at L = 60000).
    const ChunkSizePredictor p = make(1.0, 1, 1 << 20, 1 << 20);
    const QuadraticFit f = model();
    for (int64_t history : {0, 1000, 8192, 30000, 60000}) {
        const int64_t x = *p.next_chunk(history);
        const double h = static_cast<double>(history);
        EXPECT_LE(f(h + x) - f(h), p.target_ms()) << history;
        EXPECT_GE(f(h + x + 64) - f(h), p.target_ms() - 1e-9) << history;
    }
}

TEST(DynamicChunkingTest, SmoothFactorZeroKeepsTheInitialChunk) {
    // x_s = C for every prefix; C = 8192 is already 64- and 128-aligned.
    for (int page : {1, 16, 128}) {
        const ChunkSizePredictor p = make(0.0, page);
        EXPECT_EQ(chunk_sequence(p, 10), std::vector<int64_t>(10, 8192)) << page;
        EXPECT_EQ(p.next_chunk(100000), 8192);
    }
}

TEST(DynamicChunkingTest, QuarterOfInitialChunkIsTheFloor) {
    // At L = 200000 the root is x = 1056.87 (< C/4 = 2048).
    const int64_t big = 10'000'000;
    EXPECT_EQ(make(1.0, 1, big, big).next_chunk(200000), 2048);
    // s = 0.75: 8192 + 0.75 (1056.87 − 8192) = 2840.65 → 2840 → 2816 (64-aligned), above the floor.
    EXPECT_EQ(make(0.75, 1, big, big).next_chunk(200000), 2816);
}

TEST(DynamicChunkingTest, ContextAndPrefillBudgetClamp) {
    // L = 20000, context 21100: room 21100 − 20000 − 100 = 1000 → 960 (64-aligned).
    EXPECT_EQ(make(0.75, 1, 21100).next_chunk(20000), 960);
    // Room 63 < one alignment unit → None (the caller keeps the fixed size).
    EXPECT_EQ(make(0.75, 1, 20163).next_chunk(20000), std::nullopt);
    // Room 200 with 128-token pages → 128.
    EXPECT_EQ(make(0.75, 128, 20300).next_chunk(20000), 128);
    // History beyond the context: negative room → None.
    EXPECT_EQ(make(0.75, 1, 21100).next_chunk(30000), std::nullopt);
    // --max-prefill-tokens 5000 caps the first chunk 8128 → 5000 → 4992.
    EXPECT_EQ(make(0.75, 1, 131072, 5000).next_chunk(0), 4992);
}

TEST(DynamicChunkingTest, PredictorRejectsBadInputs) {
    const ChunkSizePredictorConfig ok{.initial_chunk_size = kChunk, .page_size = 1, .context_len = 4096,
                                      .max_prefill_tokens = 16384};
    EXPECT_TRUE(ChunkSizePredictor::create(model(), ok).ok());
    auto r = ChunkSizePredictor::create({.a = 0.0, .b = 1.0, .c = 0.0}, ok);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("a must be positive"), std::string::npos);

    ChunkSizePredictorConfig bad = ok;
    bad.initial_chunk_size = 0;
    EXPECT_FALSE(ChunkSizePredictor::create(model(), bad).ok());
    bad = ok;
    bad.smooth_factor = 1.5;
    EXPECT_FALSE(ChunkSizePredictor::create(model(), bad).ok());
    bad = ok;
    bad.page_size = 0;
    EXPECT_FALSE(ChunkSizePredictor::create(model(), bad).ok());
    bad = ok;
    bad.max_prefill_tokens = 0;
    EXPECT_FALSE(ChunkSizePredictor::create(model(), bad).ok());
}

TEST(DynamicChunkingTest, SmoothFactorFromEnvString) {
    EXPECT_EQ(parse_dynamic_chunking_smooth_factor(std::nullopt).value(), 0.75);
    EXPECT_EQ(parse_dynamic_chunking_smooth_factor("0").value(), 0.0);
    EXPECT_EQ(parse_dynamic_chunking_smooth_factor("1").value(), 1.0);
    EXPECT_EQ(parse_dynamic_chunking_smooth_factor(" 0.6 ").value(), 0.6);
    EXPECT_EQ(parse_dynamic_chunking_smooth_factor("8e-1").value(), 0.8);
    for (const char* bad : {"", "abc", "0.5x", "1.5", "-0.1", "nan", "inf"}) {
        auto r = parse_dynamic_chunking_smooth_factor(std::string(bad));
        ASSERT_FALSE(r.ok()) << bad;
        EXPECT_NE(r.status().message().find("SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR"), std::string::npos);
        EXPECT_NE(r.status().message().find("[0, 1]"), std::string::npos);
    }
}

}  // namespace
}  // namespace tessera::scheduler
