#include "executor/model_runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "base/thread_pool.h"
#include "executor/pp_runner.h"
#include "executor/step_codec.h"

namespace tessera::executor {
namespace {

TEST(SampleRowTest, PenaltiesShiftTheChoice) {
    std::vector<std::pair<float, std::int32_t>> scratch;
    SequenceSampling greedy;
    std::vector<float> row = {1.0f, 3.0f, 2.5f};
    EXPECT_EQ(sample_row(row, greedy, {}, scratch).token, 1);
    // Token 1 was produced twice: 3 - 2·0.3 - 0 = 2.4 < 2.5.
    greedy.frequency_penalty = 0.3f;
    row = {1.0f, 3.0f, 2.5f};
    EXPECT_EQ(sample_row(row, greedy, {1, 1}, scratch).token, 2);
    SequenceSampling presence;
    presence.presence_penalty = 0.6f;
    row = {1.0f, 3.0f, 2.5f};
    EXPECT_EQ(sample_row(row, presence, {1}, scratch).token, 2);
}

// OpenAI's logit_bias: -100 bans the argmax, +100 forces a token; it applies before the
// log-probabilities are taken.
TEST(SampleRowTest, LogitBiasBansAndForces) {
    std::vector<std::pair<float, std::int32_t>> scratch;
    SequenceSampling s;  // greedy
    std::vector<float> row = {0.0f, 3.0f, 2.0f, 1.0f};
    s.logit_bias = {{1, -100.0f}};
    EXPECT_EQ(sample_row(row, s, {}, scratch).token, 2);
    row = {0.0f, 3.0f, 2.0f, 1.0f};
    s.logit_bias = {{0, 100.0f}};
    s.logprobs = true;
    const SampledToken t = sample_row(row, s, {}, scratch);
    EXPECT_EQ(t.token, 0);
    EXPECT_GT(t.logprob, -1e-3f) << "the forced token has probability ~1";
}

// Constrained decoding: tokens outside the mask (and past its end) are never drawn, greedy or
// sampled, and the log-probabilities are those of the masked row.
TEST(SampleRowTest, AllowedTokensMaskTheRow) {
    std::vector<std::pair<float, std::int32_t>> scratch;
    SequenceSampling s;  // greedy
    s.allowed_tokens = std::make_shared<std::vector<std::uint32_t>>(std::vector<std::uint32_t>{0b1100});
    std::vector<float> row = {5.0f, 4.0f, 1.0f, 2.0f};
    EXPECT_EQ(sample_row(row, s, {}, scratch).token, 3);
    s.logprobs = true;
    row = {5.0f, 4.0f, 1.0f, 2.0f};
    EXPECT_NEAR(sample_row(row, s, {}, scratch).logprob, 2.0 - std::log(std::exp(1.0) + std::exp(2.0)), 1e-6);
    s.params.temperature = 1.0f;
    std::vector<float> wide(40, 1.0f);  // 40 logits, the mask covers 32 of them
    s.allowed_tokens = std::make_shared<std::vector<std::uint32_t>>(std::vector<std::uint32_t>{1u << 9});
    for (std::uint64_t seed = 0; seed < 50; ++seed) {
        s.params.seed = seed;
        std::vector<float> r = wide;
        EXPECT_EQ(sample_row(r, s, {}, scratch).token, 9);
    }
}

TEST(SampleRowTest, LogprobsAreTheLogSoftmax) {
    std::vector<std::pair<float, std::int32_t>> scratch;
    SequenceSampling s;
    s.logprobs = true;
    s.top_logprobs = 2;
    std::vector<float> row = {0.0f, 2.0f, 1.0f};
    SampledToken t = sample_row(row, s, {}, scratch);
    const double norm = std::log(std::exp(0.0) + std::exp(2.0) + std::exp(1.0));
    EXPECT_EQ(t.token, 1);
    EXPECT_NEAR(t.logprob, 2.0 - norm, 1e-6);
    ASSERT_EQ(t.top_logprobs.size(), 2u);
    EXPECT_EQ(t.top_logprobs[0].first, 1);
    EXPECT_EQ(t.top_logprobs[1].first, 2);
    EXPECT_NEAR(t.top_logprobs[1].second, 1.0 - norm, 1e-6);
}

TEST(SampleRowTest, SeededStepsRepeat) {
    std::vector<std::pair<float, std::int32_t>> scratch;
    SequenceSampling s;
    s.params.temperature = 1.0f;
    s.params.seed = 1234;
    std::vector<std::int32_t> a, b;
    for (int step = 0; step < 20; ++step) {
        std::vector<float> row(50, 0.0f);
        a.push_back(sample_row(row, s, a, scratch).token);
    }
    for (int step = 0; step < 20; ++step) {
        std::vector<float> row(50, 0.0f);
        b.push_back(sample_row(row, s, b, scratch).token);
    }
    EXPECT_EQ(a, b);
    EXPECT_GT(std::set<std::int32_t>(a.begin(), a.end()).size(), 5u) << "uniform logits must spread";
}

TEST(SampleBatchTest, RowsSplitOverThreadsSampleAsOneThreadDoes) {
    constexpr std::int64_t kVocab = 300;
    ForwardBatch batch;
    for (int i = 0; i < 9; ++i) {
        ForwardSequence seq;
        seq.rid = "r" + std::to_string(i);
        seq.need_token = i % 4 != 1;  // rows only for the sequences that sample
        seq.sampling.params.temperature = i % 3 == 0 ? 0.0f : 0.7f;
        seq.sampling.params.seed = static_cast<std::uint64_t>(i);
        seq.sampling.frequency_penalty = i % 2 == 0 ? 0.4f : 0.0f;
        seq.sampling.top_logprobs = i == 4 ? 3 : 0;
        seq.output_ids = {i, 2 * i, 7};
        batch.seqs.push_back(std::move(seq));
    }
    const std::int64_t n_rows = 7;
    std::vector<float> logits(static_cast<std::size_t>(n_rows * kVocab));
    for (std::size_t j = 0; j < logits.size(); ++j) logits[j] = std::sin(0.37f * static_cast<float>(j)) * 4.0f;
    std::vector<float> serial_logits = logits;
    SamplingScratch scratch;
    auto serial = sample_batch(batch, serial_logits, kVocab, nullptr, scratch);
    ThreadPool pool(2);
    auto split = sample_batch(batch, logits, kVocab, &pool, scratch);
    ASSERT_TRUE(serial.ok());
    ASSERT_TRUE(split.ok());
    std::set<std::int32_t> distinct;
    for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
        EXPECT_EQ((*split)[i].token, (*serial)[i].token) << i;
        EXPECT_EQ((*split)[i].top_logprobs, (*serial)[i].top_logprobs) << i;
        EXPECT_EQ((*split)[i].token < 0, !batch.seqs[i].need_token) << i;
        distinct.insert((*split)[i].token);
    }
    EXPECT_GT(distinct.size(), 4u);  // rows are told apart: each sequence reads its own row
    // Row k is the k-th sampling sequence's: r3 (the third; greedy, no penalty) takes row 2's argmax.
    const auto row2 = std::span<const float>(serial_logits).subspan(2 * kVocab, kVocab);
    EXPECT_EQ((*serial)[3].token, std::max_element(row2.begin(), row2.end()) - row2.begin());
    EXPECT_EQ((*split)[4].top_logprobs.size(), 3u);
    std::vector<float> short_logits(static_cast<std::size_t>((n_rows - 1) * kVocab));
    EXPECT_FALSE(sample_batch(batch, short_logits, kVocab, &pool, scratch).ok());
}

// A sequence with prompt log-probability targets has a row per target before the one it
// samples from; each target's value is the row's log-softmax at the target, unpenalised.
TEST(SampleBatchTest, PromptLogprobRowsComeBeforeTheSampledRow) {
    constexpr std::int64_t kVocab = 50;
    ForwardBatch batch;
    batch.seqs.push_back({.rid = "plain", .tokens = {1, 2}, .need_token = true});
    batch.seqs.push_back({.rid = "chunk", .tokens = {3, 4, 5}, .need_token = false});
    batch.seqs.back().input_logprob_row = 1;
    batch.seqs.back().input_logprob_targets = {9, 17};  // rows 1, 2; 17 is the next chunk's first token
    batch.seqs.push_back({.rid = "last", .tokens = {6, 7, 8, 9}, .need_token = true});
    batch.seqs.back().input_logprob_targets = {7, 8, 9};  // rows 0..2, then row 3 samples
    batch.seqs.back().input_top_logprobs = 2;
    batch.seqs.back().logprob_token_ids = {0, 49};  // token_ids_logprob
    batch.seqs.back().sampling.frequency_penalty = 2.0f;  // must not touch the prompt's rows
    batch.seqs.back().output_ids = {7, 8};
    const std::int64_t n_rows = 1 + 2 + 4;
    std::vector<float> logits(static_cast<std::size_t>(n_rows * kVocab));
    for (std::size_t j = 0; j < logits.size(); ++j) logits[j] = std::cos(0.91f * static_cast<float>(j)) * 3.0f;
    const std::vector<float> raw = logits;
    const auto log_softmax = [&](std::int64_t row, std::int32_t token) {
        const auto r = std::span<const float>(raw).subspan(static_cast<std::size_t>(row * kVocab), kVocab);
        double sum = 0.0;
        const float mx = *std::max_element(r.begin(), r.end());
        for (float v : r) sum += std::exp(static_cast<double>(v - mx));
        return r[token] - mx - static_cast<float>(std::log(sum));
    };
    SamplingScratch scratch;
    ThreadPool pool(2);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> work = raw;
        auto got = sample_batch(batch, work, kVocab, p, scratch);
        ASSERT_TRUE(got.ok());
        EXPECT_TRUE((*got)[0].input_logprobs.empty());
        EXPECT_EQ((*got)[1].token, -1);
        ASSERT_EQ((*got)[1].input_logprobs.size(), 2u);
        EXPECT_NEAR((*got)[1].input_logprobs[0], log_softmax(1, 9), 1e-5);
        EXPECT_NEAR((*got)[1].input_logprobs[1], log_softmax(2, 17), 1e-5);
        EXPECT_TRUE((*got)[1].input_top_logprobs.empty());
        ASSERT_EQ((*got)[2].input_logprobs.size(), 3u);
        for (int k = 0; k < 3; ++k) EXPECT_NEAR((*got)[2].input_logprobs[k], log_softmax(3 + k, 7 + k), 1e-5) << k;
        ASSERT_EQ((*got)[2].input_top_logprobs.size(), 6u);
        for (int k = 0; k < 3; ++k) {
            const auto r = std::span<const float>(raw).subspan(static_cast<std::size_t>((3 + k) * kVocab), kVocab);
            const auto best = std::max_element(r.begin(), r.end()) - r.begin();
            EXPECT_EQ((*got)[2].input_top_logprobs[2 * k].first, best) << k;
            EXPECT_NEAR((*got)[2].input_top_logprobs[2 * k].second,
                        log_softmax(3 + k, static_cast<std::int32_t>(best)), 1e-5);
            EXPECT_GE((*got)[2].input_top_logprobs[2 * k].second, (*got)[2].input_top_logprobs[2 * k + 1].second);
        }
        // token_ids_logprob at every prompt row, and at the sampled row after the penalties.
        ASSERT_EQ((*got)[2].input_token_ids_logprobs.size(), 6u);
        for (int k = 0; k < 3; ++k) {
            EXPECT_NEAR((*got)[2].input_token_ids_logprobs[2 * k], log_softmax(3 + k, 0), 1e-5);
            EXPECT_NEAR((*got)[2].input_token_ids_logprobs[2 * k + 1], log_softmax(3 + k, 49), 1e-5);
        }
        ASSERT_EQ((*got)[2].token_ids_logprobs.size(), 2u);
        EXPECT_TRUE((*got)[1].token_ids_logprobs.empty());
        // The rows sampled from: "plain" row 0, "last" row 6 (greedy, penalised in place).
        const auto row6 = std::span<const float>(work).subspan(6 * kVocab, kVocab);
        EXPECT_EQ((*got)[2].token, std::max_element(row6.begin(), row6.end()) - row6.begin());
        double sum6 = 0.0;
        const float max6 = *std::max_element(row6.begin(), row6.end());
        for (float v : row6) sum6 += std::exp(static_cast<double>(v - max6));
        EXPECT_NEAR((*got)[2].token_ids_logprobs[1], row6[49] - max6 - std::log(sum6), 1e-5);
    }
    std::vector<float> short_logits(static_cast<std::size_t>((n_rows - 1) * kVocab));
    EXPECT_FALSE(sample_batch(batch, short_logits, kVocab, nullptr, scratch).ok());
    // The model's view: kAll from the first target's row; rows that do not end the step are refused.
    std::vector<std::int32_t> tokens;
    for (auto& seq : batch.seqs) seq.slots.assign(seq.tokens.size(), 0);
    auto input = batch_input(batch, &tokens);
    ASSERT_TRUE(input.ok());
    EXPECT_EQ(models::logit_rows(input->seqs[0]), 1);
    EXPECT_EQ(models::logit_rows(input->seqs[1]), 2);
    EXPECT_EQ(models::logit_rows(input->seqs[2]), 4);
    batch.seqs[1].input_logprob_row = 0;
    EXPECT_FALSE(batch_input(batch, &tokens).ok());
}

TEST(StepResultsTest, AnEmbeddingModelHandsBackEachSequencesRow) {
    ForwardBatch batch;
    for (int i = 0; i < 3; ++i) batch.seqs.push_back({.rid = "r" + std::to_string(i), .need_token = i != 1});
    loader::ModelConfig config;
    config.hidden_size = 2;
    config.vocab_size = 5;
    config.is_generation = false;
    std::vector<float> rows = {1.0f, 2.0f, 3.0f, 4.0f};  // r0's, then r2's (r1 is a middle chunk)
    SamplingScratch scratch;
    auto results = step_results(batch, {rows, {}, {}}, config, nullptr, scratch);
    ASSERT_TRUE(results.ok());
    EXPECT_EQ((*results)[0].embedding, (std::vector<float>{1.0f, 2.0f}));
    EXPECT_TRUE((*results)[1].embedding.empty());
    EXPECT_EQ((*results)[2].embedding, (std::vector<float>{3.0f, 4.0f}));
    EXPECT_EQ((*results)[2].token, -1);
    rows.resize(3);
    EXPECT_FALSE(step_results(batch, {rows, {}, {}}, config, nullptr, scratch).ok());
}

TEST(StepWireTest, DpAttentionCountsTravelAheadOfTheStep) {
    ForwardBatch batch;
    batch.seqs.push_back({"a", {1, 2, 3}, 0, {9, 8, 7}, true, {}, {}});
    const std::vector<std::uint8_t> step_bytes = encode_step(batch, kStepWithSampling);
    layers::DpAttentionStep dp{{3, 0, 1}, {1, 0, 1}, true};
    const std::vector<std::uint8_t> message = encode_dp_step(dp, step_bytes);
    std::vector<std::uint8_t> rest;
    auto back = decode_dp_step(message, &rest);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->num_tokens, dp.num_tokens);
    EXPECT_EQ(back->num_logit_rows, dp.num_logit_rows);
    EXPECT_TRUE(back->any_extend);
    EXPECT_EQ(rest, step_bytes);
    // Corrupt: a negative count, a prefill flag other than 0 / 1, more groups than bytes.
    std::vector<std::uint8_t> bad = message;
    bad[8 + 7] = 0x80;
    EXPECT_FALSE(decode_dp_step(bad, &rest).ok());
    bad = message;
    bad[8 + 6 * 8] = 2;
    EXPECT_FALSE(decode_dp_step(bad, &rest).ok());
    bad = message;
    bad[2] = 0x10;  // 2^20 groups
    EXPECT_FALSE(decode_dp_step(bad, &rest).ok());
    EXPECT_FALSE(decode_dp_step({}, &rest).ok());
}

TEST(StepWireTest, RoundTripsAndRejectsCorruption) {
    ForwardBatch batch;
    batch.seqs.push_back({"a", {1, 2, 3}, 4, {9, 8, 7, 6, 5, 4, 3}, true, {}, {}});
    batch.seqs.push_back({"b", {7}, 0, {11}, false, {}, {}});
    auto bytes = encode_step(batch);
    auto back = decode_step(bytes);
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(back->seqs.size(), 2u);
    EXPECT_EQ(back->seqs[0].tokens, batch.seqs[0].tokens);
    EXPECT_EQ(back->seqs[0].slots, batch.seqs[0].slots);
    EXPECT_EQ(back->seqs[0].start_pos, 4);
    EXPECT_TRUE(back->seqs[0].need_token);
    EXPECT_FALSE(back->seqs[1].need_token);
    bytes.pop_back();
    EXPECT_FALSE(decode_step(bytes).ok());
    bytes.push_back(0);
    bytes.push_back(0);
    EXPECT_FALSE(decode_step(bytes).ok());
    // Found by fuzz/step_codec_fuzz: a boolean other than 0 or 1 is corruption, so whatever
    // decodes encodes back to the same bytes.
    auto bad = encode_step(batch);
    const std::size_t need_token_at = 6 * 8 + (8 + 3 * 4) + 8 + (8 + 7 * 4);
    ASSERT_EQ(bad[need_token_at], 1);
    bad[need_token_at + 7] = 0x10;
    EXPECT_FALSE(decode_step(bad).ok());
    // Found by fuzz/step_codec_fuzz: a header claiming more sequences than its bytes can hold
    // is refused up front (it used to allocate them all first).
    std::vector<std::uint8_t> huge(6 * 8, 0);
    huge[40 + 2] = 0x10;  // 2^20 sequences, no bytes for them
    auto refused = decode_step(huge);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("sequences in 0 bytes"), std::string::npos) << refused.status().message();
}

// /update_weights_from_disk's control step: the folder and format reach every rank, and a
// folder name longer than the message is corruption.
TEST(StepWireTest, CarriesAWeightsFolder) {
    ForwardBatch batch;
    EXPECT_FALSE(decode_step(encode_step(batch))->load_weights.has_value());
    batch.load_weights = models::WeightsSource{"/models/qwen3 step 200", "safetensors", models::WeightsPhase::kCommit,
                                               false};
    auto back = decode_step(encode_step(batch));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_TRUE(back->load_weights.has_value());
    EXPECT_EQ(back->load_weights->model_path, "/models/qwen3 step 200");
    EXPECT_EQ(back->load_weights->load_format, "safetensors");
    EXPECT_EQ(back->load_weights->phase, models::WeightsPhase::kCommit);
    EXPECT_FALSE(back->load_weights->earlier_stages_loaded);
    EXPECT_TRUE(back->seqs.empty());
    std::vector<std::int32_t> tokens;
    auto input = batch_input(*back, &tokens);
    ASSERT_TRUE(input.ok());
    ASSERT_NE(input->load_weights, nullptr);
    EXPECT_EQ(input->load_weights->model_path, "/models/qwen3 step 200");

    auto bad = encode_step(batch);
    bad[4 * 8] = 0xFF;  // the folder name's length
    EXPECT_FALSE(decode_step(bad).ok());
}

// /release_memory_occupation's control step: which memory every rank gives back, and a value
// outside the two flags is corruption.
TEST(StepWireTest, CarriesAMemoryRelease) {
    ForwardBatch batch;
    EXPECT_FALSE(decode_step(encode_step(batch))->release_memory.any());
    for (const models::MemoryRelease release : {models::MemoryRelease{.weights = true},
                                                models::MemoryRelease{.kv_cache = true},
                                                models::MemoryRelease{.weights = true, .kv_cache = true}}) {
        batch.release_memory = release;
        auto back = decode_step(encode_step(batch));
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(back->release_memory.weights, release.weights);
        EXPECT_EQ(back->release_memory.kv_cache, release.kv_cache);
        std::vector<std::int32_t> tokens;
        auto input = batch_input(*back, &tokens);
        ASSERT_TRUE(input.ok());
        EXPECT_EQ(input->release_memory.weights, release.weights);
        EXPECT_EQ(input->release_memory.kv_cache, release.kv_cache);
    }
    auto bad = encode_step(batch);
    bad[4 * 8] = 4;  // after flags, recorder command, routed experts and no weight update
    EXPECT_EQ(decode_step(bad).status().message(), "corrupt step header: bad release");
}

// Found by fuzz/step_codec_fuzz (UBSan: memcpy into an empty vector's null data()): empty
// token, slot and output lists round-trip.
TEST(StepWireTest, EmptyListsRoundTrip) {
    ForwardBatch batch;
    batch.seqs.push_back({"a", {}, 0, {}, true, {}, {}});
    std::int64_t flags = 0;
    auto back = decode_step(encode_step(batch, kStepWithSampling), &flags);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->seqs.size(), 1u);
    EXPECT_TRUE(back->seqs[0].tokens.empty());
    EXPECT_TRUE(back->seqs[0].output_ids.empty());
}

TEST(StepWireTest, CarriesSamplingForThePipelineAndResultsBack) {
    ForwardBatch batch;
    SequenceSampling sampling;
    sampling.params = {0.7f, 40, 0.9f, 0.05f, 1234567890123ull};
    sampling.frequency_penalty = 0.5f;
    sampling.presence_penalty = -0.25f;
    sampling.top_logprobs = 3;
    sampling.logprobs = true;
    sampling.logit_bias = {{7, -100.0f}, {3, 2.5f}};
    sampling.hidden_states = HiddenCapture::kFirstPass;
    sampling.allowed_tokens = std::make_shared<std::vector<std::uint32_t>>(std::vector<std::uint32_t>{0x5, 0x80000000});
    batch.seqs.push_back({"a", {5}, 2, {1, 2, 3}, true, sampling, {10, 11}});
    batch.seqs.push_back({"b", {6, 7}, 0, {4, 5}, false, {}, {}, 1, {8}, 4, {3, 9}});  // a chunk with prompt logprobs
    std::int64_t flags = 0;
    auto back = decode_step(encode_step(batch, kStepWithSampling | kStepLocalOnly), &flags);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->seqs[1].input_logprob_row, 1);
    EXPECT_EQ(back->seqs[1].input_logprob_targets, (std::vector<std::int32_t>{8}));
    EXPECT_EQ(back->seqs[1].input_top_logprobs, 4);
    EXPECT_EQ(back->seqs[1].logprob_token_ids, (std::vector<std::int32_t>{3, 9}));
    EXPECT_TRUE(back->seqs[0].input_logprob_targets.empty());
    EXPECT_EQ(flags, kStepWithSampling | kStepLocalOnly);
    const SequenceSampling& got = back->seqs[0].sampling;
    EXPECT_EQ(got.params.temperature, 0.7f);
    EXPECT_EQ(got.params.top_k, 40);
    EXPECT_EQ(got.params.top_p, 0.9f);
    EXPECT_EQ(got.params.min_p, 0.05f);
    EXPECT_EQ(got.params.seed, 1234567890123ull);
    EXPECT_EQ(got.frequency_penalty, 0.5f);
    EXPECT_EQ(got.presence_penalty, -0.25f);
    EXPECT_EQ(got.top_logprobs, 3);
    EXPECT_TRUE(got.logprobs);
    EXPECT_EQ(got.logit_bias, sampling.logit_bias);
    EXPECT_EQ(got.hidden_states, HiddenCapture::kFirstPass);
    ASSERT_TRUE(got.allowed_tokens);
    EXPECT_EQ(*got.allowed_tokens, *sampling.allowed_tokens);
    EXPECT_FALSE(back->seqs[1].sampling.allowed_tokens);
    EXPECT_FALSE(back->record_routed_experts);
    batch.record_routed_experts = true;
    EXPECT_TRUE(decode_step(encode_step(batch, kStepWithSampling))->record_routed_experts);
    batch.record_routed_experts = false;
    EXPECT_EQ(back->seqs[0].output_ids, (std::vector<std::int32_t>{10, 11}));
    EXPECT_TRUE(back->seqs[1].output_ids.empty());

    std::vector<SampledToken> tokens(2);
    tokens[0] = {42, -0.5f, {{42, -0.5f}, {7, -1.25f}}};
    auto results = decode_results(encode_results(tokens));
    ASSERT_TRUE(results.ok());
    EXPECT_EQ((*results)[0].token, 42);
    EXPECT_EQ((*results)[0].logprob, -0.5f);
    EXPECT_EQ((*results)[0].top_logprobs, tokens[0].top_logprobs);
    EXPECT_EQ((*results)[1].token, -1);
    EXPECT_TRUE((*results)[0].embedding.empty());

    tokens[1].embedding = {0.6f, -0.8f, 0.0f};  // an embedding model's result travels whole
    results = decode_results(encode_results(tokens));
    ASSERT_TRUE(results.ok());
    EXPECT_EQ((*results)[1].embedding, tokens[1].embedding);
    auto bytes = encode_results(tokens);
    bytes.resize(bytes.size() - 3);
    EXPECT_FALSE(decode_results(bytes).ok());

    tokens[0].hidden_states = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};  // return_hidden_states: 2 rows of 3
    tokens[0].hidden_rows = 2;
    results = decode_results(encode_results(tokens));
    ASSERT_TRUE(results.ok());
    EXPECT_EQ((*results)[0].hidden_states, tokens[0].hidden_states);
    EXPECT_EQ((*results)[0].hidden_rows, 2);
    EXPECT_EQ((*results)[1].hidden_rows, 0);
    tokens[1].input_logprobs = {-0.5f, -2.0f};  // prompt log-probabilities and their best ones
    tokens[1].input_top_logprobs = {{4, -0.25f}, {9, -1.5f}};
    tokens[1].token_ids_logprobs = {-3.0f};
    tokens[1].input_token_ids_logprobs = {-4.0f, -5.0f};
    results = decode_results(encode_results(tokens));
    ASSERT_TRUE(results.ok());
    EXPECT_EQ((*results)[1].token_ids_logprobs, tokens[1].token_ids_logprobs);
    EXPECT_EQ((*results)[1].input_token_ids_logprobs, tokens[1].input_token_ids_logprobs);
    EXPECT_EQ((*results)[1].input_logprobs, tokens[1].input_logprobs);
    EXPECT_EQ((*results)[1].input_top_logprobs, tokens[1].input_top_logprobs);
    EXPECT_TRUE((*results)[0].input_logprobs.empty());
    tokens[1].input_logprobs.clear();
    tokens[1].input_top_logprobs.clear();
    tokens[1].token_ids_logprobs.clear();
    tokens[1].input_token_ids_logprobs.clear();
    tokens[0].hidden_rows = 4;  // rows that do not divide the values: corrupt
    EXPECT_FALSE(decode_results(encode_results(tokens)).ok());
    tokens[0].hidden_rows = 2;
    tokens[1].routed_experts = {3, 1, 0, 7};  // --enable-return-routed-experts
    results = decode_results(encode_results(tokens));
    ASSERT_TRUE(results.ok());
    EXPECT_EQ((*results)[1].routed_experts, tokens[1].routed_experts);
    EXPECT_TRUE((*results)[0].routed_experts.empty());
}

// return_hidden_states: a full request's first sampled token brings every row of its pass, a
// later one (or "last") one row; a middle chunk none.
TEST(StepResultsTest, HiddenStatesGoToTheSequencesThatAskedForThem) {
    ForwardBatch batch;
    SequenceSampling full, last;
    full.hidden_states = HiddenCapture::kFirstPass;
    last.hidden_states = HiddenCapture::kLast;
    batch.seqs.push_back({.rid = "prefill", .tokens = {1, 2, 3}, .need_token = true, .sampling = full});
    batch.seqs.push_back({.rid = "middle", .tokens = {4, 5}, .need_token = false, .sampling = full});
    batch.seqs.push_back({.rid = "plain", .tokens = {6}, .need_token = true});
    batch.seqs.push_back({.rid = "decode", .tokens = {7}, .need_token = true, .sampling = full, .output_ids = {9}});
    batch.seqs.push_back({.rid = "last", .tokens = {8, 9}, .need_token = true, .sampling = last});
    batch.seqs.push_back({.rid = "again", .tokens = {8, 9}, .need_token = true, .sampling = full, .output_ids = {9}});
    EXPECT_EQ(hidden_rows(batch.seqs[0]), 3);
    EXPECT_EQ(hidden_rows(batch.seqs[1]), 0);
    EXPECT_EQ(hidden_rows(batch.seqs[2]), 0);
    EXPECT_EQ(hidden_rows(batch.seqs[3]), 1);
    EXPECT_EQ(hidden_rows(batch.seqs[4]), 1);
    EXPECT_EQ(hidden_rows(batch.seqs[5]), 1);  // a prompt run again after a retraction: its next token's row

    loader::ModelConfig config;
    config.hidden_size = 2;
    config.vocab_size = 3;
    std::vector<float> logits(5 * 3, 0.0f);
    for (int row = 0; row < 5; ++row) logits[row * 3 + row % 3] = 1.0f;
    std::vector<float> hidden;
    for (int v = 0; v < 2 * 6; ++v) hidden.push_back(static_cast<float>(v));
    SamplingScratch scratch;
    auto results = step_results(batch, {logits, hidden, {}}, config, nullptr, scratch);
    ASSERT_TRUE(results.ok()) << results.status().to_string();
    EXPECT_EQ((*results)[0].hidden_rows, 3);
    EXPECT_EQ((*results)[0].hidden_states, (std::vector<float>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ((*results)[1].hidden_rows, 0);
    EXPECT_TRUE((*results)[2].hidden_states.empty());
    EXPECT_EQ((*results)[3].hidden_states, (std::vector<float>{6, 7}));
    EXPECT_EQ((*results)[4].hidden_states, (std::vector<float>{8, 9}));
    EXPECT_EQ((*results)[5].hidden_states, (std::vector<float>{10, 11}));
    EXPECT_EQ((*results)[2].token, 1);  // sampling is untouched: row 1's argmax
    hidden.resize(hidden.size() - 1);
    EXPECT_FALSE(step_results(batch, {logits, hidden, {}}, config, nullptr, scratch).ok());

    // Routed experts: every sequence's tokens' rows, middle chunks included (2 layers, top-1).
    config.num_hidden_layers = 2;
    config.moe.num_experts_per_tok = 1;
    batch.record_routed_experts = true;
    hidden.push_back(11.0f);
    std::vector<std::int32_t> routed;
    for (int t = 0; t < 11; ++t) routed.insert(routed.end(), {t, 100 + t});  // 11 tokens in the batch
    results = step_results(batch, {logits, hidden, routed}, config, nullptr, scratch);
    ASSERT_TRUE(results.ok()) << results.status().to_string();
    EXPECT_EQ((*results)[0].routed_experts, (std::vector<std::int32_t>{0, 100, 1, 101, 2, 102}));
    EXPECT_EQ((*results)[1].routed_experts, (std::vector<std::int32_t>{3, 103, 4, 104}));
    EXPECT_EQ((*results)[5].routed_experts, (std::vector<std::int32_t>{9, 109, 10, 110}));
    routed.pop_back();
    EXPECT_FALSE(step_results(batch, {logits, hidden, routed}, config, nullptr, scratch).ok());
}

// PP: a stage takes the earlier stages' layers from the message and keeps its own; stage 0
// (nothing earlier) and a message without routing leave its own as they are.
TEST(StageRoutingTest, EarlierStagesLayersJoinThisStages) {
    // 2 tokens, 3 layers, top-2; this stage holds layers 2.. .
    std::vector<std::int32_t> earlier = {1, 2, 3, 4, 0, 0, 5, 6, 7, 0, 0, 0};
    std::vector<std::int32_t> own = {0, 0, 0, 0, 8, 9, 0, 0, 0, 0, 4, 5};
    join_earlier_routing(earlier, 2, 2, 2, own);
    EXPECT_EQ(own, (std::vector<std::int32_t>{1, 2, 3, 4, 8, 9, 5, 6, 7, 0, 4, 5}));
    std::vector<std::int32_t> alone = {0, 0, 1, 1};
    join_earlier_routing({}, 1, 1, 2, alone);
    EXPECT_EQ(alone, (std::vector<std::int32_t>{0, 0, 1, 1}));
    std::vector<std::int32_t> none;  // a step that records nothing (a later stage of a MoE model)
    join_earlier_routing({}, 3, 2, 8, none);
    EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace tessera::executor
