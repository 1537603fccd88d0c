#include "kernels/attention.h"
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/attention_decode.h"
#include "kernels/batch_invariance.h"
#include "kernels/isa.h"
#include "tensor/dtype.h"

namespace tessera::kernels {
namespace {

struct Case {
    std::int64_t n_heads, n_kv_heads, head_dim, start_pos, n_q;
};

TEST(AttentionTest, FlashMatchesReferenceOnOddShapes) {
    ThreadPool pool(2);
    const Case cases[] = {
        {1, 1, 1, 0, 1},     {4, 2, 5, 0, 9},    {6, 3, 33, 0, 70},  {4, 1, 64, 100, 1},
        {8, 8, 17, 3, 131},  {2, 2, 130, 65, 7}, {16, 8, 128, 0, 67}, {3, 1, 12, 200, 1},
    };
    std::mt19937 gen(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (const Case& c : cases) {
        AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim,
                             1.0f / std::sqrt(static_cast<float>(c.head_dim))};
        const std::int64_t n_kv = c.start_pos + c.n_q;
        // A padded KV row (stride larger than the data) checks that strides are honoured.
        const std::int64_t kv_stride = c.n_kv_heads * c.head_dim + 3;
        std::vector<float> q(c.n_q * c.n_heads * c.head_dim), k(n_kv * kv_stride),
            v(n_kv * kv_stride);
        for (auto& x : q) x = 2.0f * dist(gen);
        for (auto& x : k) x = dist(gen);
        for (auto& x : v) x = dist(gen);
        std::vector<float> out(q.size()), expected(q.size());
        AttentionArgs args{q.data(), k.data(), v.data(), out.data(), c.n_q, c.start_pos, 0,
                           kv_stride};
        attention(args, shape, &pool);
        args.out = expected.data();
        attention_reference(args, shape);
        for (std::size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], expected[i], 2e-5) << "heads " << c.n_heads << " dim " << c.head_dim
                                                  << " n_q " << c.n_q << " at " << i;
        // Single-threaded gives the same numbers.
        std::vector<float> single(q.size());
        args.out = single.data();
        attention(args, shape, nullptr);
        ASSERT_EQ(single, out);
    }
}

TEST(AttentionTest, SlotIndexedCacheEqualsContiguousCache) {
    const AttentionShape shape{6, 2, 20, 0.2f};
    const std::int64_t n = 75, start = 30;
    std::mt19937 gen(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const std::int64_t row = 2 * 20;
    std::vector<float> q(n * 6 * 20), k((start + n) * row), v((start + n) * row);
    for (auto* vec : {&q, &k, &v})
        for (auto& x : *vec) x = dist(gen);
    // The same rows scattered over a larger pool in a shuffled order.
    const std::int64_t pool_rows = 3 * (start + n);
    std::vector<std::int32_t> slots(static_cast<std::size_t>(start + n));
    for (std::int64_t i = 0; i < start + n; ++i) slots[i] = static_cast<std::int32_t>((i * 11 + 3) % pool_rows);  // 11 is coprime with 315: distinct
    std::vector<float> kp(pool_rows * row, NAN), vp(pool_rows * row, NAN);
    for (std::int64_t i = 0; i < start + n; ++i) {
        std::copy(k.begin() + i * row, k.begin() + (i + 1) * row, kp.begin() + slots[i] * row);
        std::copy(v.begin() + i * row, v.begin() + (i + 1) * row, vp.begin() + slots[i] * row);
    }
    std::vector<float> contiguous(q.size()), paged(q.size()), reference(q.size());
    AttentionArgs args{q.data(), k.data(), v.data(), contiguous.data(), n, start};
    attention(args, shape, nullptr);
    AttentionArgs paged_args{q.data(), kp.data(), vp.data(), paged.data(), n, start, 0, 0, slots.data()};
    attention(paged_args, shape, nullptr);
    paged_args.out = reference.data();
    attention_reference(paged_args, shape);
    for (std::size_t i = 0; i < q.size(); ++i) {
        ASSERT_EQ(paged[i], contiguous[i]) << i;
        ASSERT_NEAR(reference[i], contiguous[i], 2e-5) << i;
    }
    // Decode (one query, the few-row path) through the slot table too.
    const float* last_q = q.data() + (n - 1) * 6 * 20;
    std::vector<float> decode(6 * 20);
    attention({last_q, kp.data(), vp.data(), decode.data(), 1, start + n - 1, 0, 0, slots.data()}, shape, nullptr);
    for (int i = 0; i < 6 * 20; ++i) ASSERT_NEAR(decode[i], contiguous[(n - 1) * 6 * 20 + i], 1e-5) << i;
}

TEST(AttentionTest, Bf16CacheEqualsF32CacheOfTheRoundedValues) {
    const AttentionShape shape{8, 2, 24, 0.2f};
    std::mt19937 gen(13);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (std::int64_t n_q : {1, 2, 70}) {
        const std::int64_t start = 37, n_kv = start + n_q, row = 2 * 24;
        std::vector<float> q(n_q * 8 * 24), kf(n_kv * row), vf(n_kv * row);
        std::vector<std::uint16_t> kb(kf.size()), vb(vf.size());
        for (auto& x : q) x = dist(gen);
        for (std::size_t i = 0; i < kf.size(); ++i) {
            kb[i] = f32_to_bf16(dist(gen));
            vb[i] = f32_to_bf16(dist(gen));
            kf[i] = bf16_to_f32(kb[i]);
            vf[i] = bf16_to_f32(vb[i]);
        }
        std::vector<float> from_f32(q.size()), from_bf16(q.size()), reference(q.size());
        attention({q.data(), kf.data(), vf.data(), from_f32.data(), n_q, start}, shape, nullptr);
        AttentionArgs bf16_args{q.data(), kb.data(), vb.data(), from_bf16.data(), n_q, start};
        bf16_args.kv_dtype = DType::kBF16;
        attention(bf16_args, shape, nullptr);
        bf16_args.out = reference.data();
        attention_reference(bf16_args, shape);
        for (std::size_t i = 0; i < q.size(); ++i) {
            ASSERT_NEAR(from_bf16[i], from_f32[i], 1e-5) << "n_q " << n_q << " at " << i;
            ASSERT_NEAR(reference[i], from_f32[i], 2e-5) << "n_q " << n_q << " at " << i;
        }
    }
}

// K/V values stored as `type`: the encoded bytes and the values they decode to.
struct StoredKv {
    std::vector<std::uint8_t> bytes;
    std::vector<float> values;
};

StoredKv store_kv(std::int64_t n, DType type, std::mt19937& gen) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    StoredKv s;
    s.bytes.resize(static_cast<std::size_t>(n) * dtype_size(type));
    s.values.resize(static_cast<std::size_t>(n));
    std::vector<float> raw(static_cast<std::size_t>(n));
    for (auto& x : raw) x = dist(gen);
    store_kv_row(raw.data(), s.bytes.data(), 0, n, type);
    convert_to_f32(s.bytes.data(), type, s.values.data(), s.values.size());
    return s;
}

// An fp8 cache (e4m3, e5m2) gives what an f32 cache of its decoded values gives, on the
// decode, few-row and block paths.
TEST(AttentionTest, Fp8CacheEqualsF32CacheOfTheDecodedValues) {
    const AttentionShape shape{8, 2, 32, 0.2f};
    std::mt19937 gen(31);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (DType type : {DType::kF8E4M3, DType::kF8E5M2}) {
        for (std::int64_t n_q : {1, 2, 3, 70}) {
            const std::int64_t start = 41, n_kv = start + n_q, row = 2 * 32;
            std::vector<float> q(n_q * 8 * 32);
            for (auto& x : q) x = dist(gen);
            const StoredKv k = store_kv(n_kv * row, type, gen), v = store_kv(n_kv * row, type, gen);
            std::vector<float> from_f32(q.size()), from_fp8(q.size()), reference(q.size());
            attention({q.data(), k.values.data(), v.values.data(), from_f32.data(), n_q, start}, shape, nullptr);
            AttentionArgs args{q.data(), k.bytes.data(), v.bytes.data(), from_fp8.data(), n_q, start};
            args.kv_dtype = type;
            attention(args, shape, nullptr);
            args.out = reference.data();
            attention_reference(args, shape);
            for (std::size_t i = 0; i < q.size(); ++i) {
                ASSERT_NEAR(from_fp8[i], from_f32[i], 1e-5) << dtype_name(type) << " n_q " << n_q << " at " << i;
                ASSERT_NEAR(reference[i], from_f32[i], 2e-5) << dtype_name(type) << " n_q " << n_q << " at " << i;
            }
        }
    }
}

// Storing clamps to the format's range (a plain cast would give NaN) and rounds to nearest.
TEST(AttentionTest, StoreKvRowClampsFp8) {
    const float row[4] = {1000.0f, -1e6f, 0.3f, 1.0f};
    std::uint8_t e4m3[4], e5m2[4];
    store_kv_row(row, e4m3, 0, 4, DType::kF8E4M3);
    store_kv_row(row, e5m2, 0, 4, DType::kF8E5M2);
    EXPECT_EQ(fp8_e4m3_to_f32(e4m3[0]), 448.0f);
    EXPECT_EQ(fp8_e4m3_to_f32(e4m3[1]), -448.0f);
    EXPECT_EQ(fp8_e4m3_to_f32(e4m3[2]), 0.3125f);
    EXPECT_EQ(fp8_e5m2_to_f32(e5m2[1]), -57344.0f);
    EXPECT_EQ(fp8_e5m2_to_f32(e5m2[3]), 1.0f);
}

TEST(AttentionTest, DecodeOfAPrefixEqualsTheLastRowOfPrefill) {
    const AttentionShape shape{4, 2, 16, 0.25f};
    const std::int64_t n = 37;
    std::mt19937 gen(9);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> q(n * 4 * 16), k(n * 2 * 16), v(n * 2 * 16);
    for (auto* vec : {&q, &k, &v})
        for (auto& x : *vec) x = dist(gen);
    std::vector<float> prefill(q.size()), decode(4 * 16);
    attention({q.data(), k.data(), v.data(), prefill.data(), n, 0}, shape, nullptr);
    attention({q.data() + (n - 1) * 64, k.data(), v.data(), decode.data(), 1, n - 1}, shape, nullptr);
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(decode[i], prefill[(n - 1) * 64 + i], 1e-6);
}

// A decode batch (one or two new tokens per sequence, sequences of different lengths in one
// shared slot pool) through attention_batch: the kernel that streams each cache row once per
// token and serves every query head of a group from it. GQA groups 1-4 (odd groups pair a
// head with a scratch partner), head_dim with and without a 32-wide tail, f32 and bf16 cache;
// the results must not depend on how heads are split over workers.
TEST(AttentionTest, DecodeBatchMatchesReference) {
    struct DecodeCase {
        std::int64_t n_heads, n_kv_heads, head_dim;
        DType kv;
    };
    const DecodeCase cases[] = {{16, 8, 128, DType::kBF16}, {16, 8, 128, DType::kF32},   {6, 2, 48, DType::kBF16},
                                {4, 4, 16, DType::kF32},    {8, 2, 64, DType::kBF16},    {12, 4, 32, DType::kBF16},
                                {16, 8, 128, DType::kF8E4M3}, {6, 2, 48, DType::kF8E5M2}};
    const std::int64_t lengths[] = {1, 5, 33, 64, 65, 200, 31, 7};
    ThreadPool pool(2);
    std::mt19937 gen(17);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (const DecodeCase& c : cases) {
        const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
        const std::int64_t row = c.n_kv_heads * c.head_dim;
        std::int64_t total = 0;
        for (std::int64_t len : lengths) total += len + 1;
        // Positions of all sequences interleaved over one pool (a shuffled slot table).
        std::vector<std::int32_t> all_slots(static_cast<std::size_t>(total));
        for (std::int64_t i = 0; i < total; ++i) all_slots[i] = static_cast<std::int32_t>((i * 37 + 5) % total);
        const StoredKv k = store_kv(total * row, c.kv, gen), v = store_kv(total * row, c.kv, gen);
        std::vector<AttentionArgs> batch;
        std::vector<std::vector<float>> queries, outputs, serial, expected;
        std::int64_t first_slot = 0;
        for (std::size_t s = 0; s < std::size(lengths); ++s) {
            const std::int64_t n_q = s % 3 == 2 ? 2 : 1;  // some sequences check two new tokens
            const std::int64_t start = lengths[s] + 1 - n_q;
            queries.emplace_back(n_q * c.n_heads * c.head_dim);
            for (auto& x : queries.back()) x = 2.0f * dist(gen);
            outputs.emplace_back(queries.back().size());
            AttentionArgs a{queries.back().data(), k.bytes.data(), v.bytes.data(), nullptr, n_q, start, 0, 0,
                            all_slots.data() + first_slot, c.kv};
            batch.push_back(a);
            first_slot += lengths[s] + 1;
        }
        for (std::size_t s = 0; s < batch.size(); ++s) {
            outputs[s].assign(queries[s].size(), NAN);
            batch[s].out = outputs[s].data();
        }
        attention_batch(batch, shape, &pool);
        for (std::size_t s = 0; s < batch.size(); ++s) {
            AttentionArgs a = batch[s];
            serial.emplace_back(queries[s].size());
            a.out = serial.back().data();
            attention(a, shape, nullptr);  // one sequence alone: heads split differently
            expected.emplace_back(queries[s].size());
            a.out = expected.back().data();
            attention_reference(a, shape);
            for (std::size_t i = 0; i < expected.back().size(); ++i) {
                ASSERT_NEAR(outputs[s][i], expected.back()[i], 2e-5)
                    << "heads " << c.n_heads << "/" << c.n_kv_heads << " dim " << c.head_dim << " " << dtype_name(c.kv)
                    << " seq " << s << " at " << i;
                ASSERT_EQ(outputs[s][i], serial.back()[i]) << "seq " << s << " at " << i;
            }
        }
    }
}

// Deterministic inference: with the switch on, a position's output is the same bits whether
// it was computed in one prefill, in a chunk of any size after a cached prefix, or decoded,
// alone or beside other sequences, with or without workers. Shapes cover the decode kernels
// (bf16 AVX-512, f32, fp8) and a head_dim they do not take (the per-row direct kernel).
TEST(AttentionTest, BatchInvariantRowsEqualWhateverTheBatch) {
    struct InvariantCase {
        std::int64_t n_heads, n_kv_heads, head_dim;
        DType kv;
    };
    struct Invariant {
        Invariant() { set_batch_invariant(true); }
        ~Invariant() { set_batch_invariant(false); }
    } invariant;
    const InvariantCase cases[] = {
        {16, 8, 128, DType::kBF16}, {6, 2, 48, DType::kF32}, {4, 4, 20, DType::kF32}, {8, 2, 64, DType::kF8E4M3}};
    constexpr std::int64_t kLen = 600, kOtherLen = 90;  // the long one's keys fold in three parts
    ThreadPool pool(2);
    std::mt19937 gen(23);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (const InvariantCase& c : cases) {
        const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim,
                                   1.0f / std::sqrt(static_cast<float>(c.head_dim))};
        const std::int64_t q_row = c.n_heads * c.head_dim, kv_row = c.n_kv_heads * c.head_dim;
        const std::int64_t total = kLen + kOtherLen;
        std::vector<std::int32_t> slots(static_cast<std::size_t>(total));  // both sequences shuffled over one pool
        for (std::int64_t i = 0; i < total; ++i) slots[i] = static_cast<std::int32_t>((i * 53 + 11) % total);
        const StoredKv k = store_kv(total * kv_row, c.kv, gen), v = store_kv(total * kv_row, c.kv, gen);
        std::vector<float> q(kLen * q_row), other_q(kOtherLen * q_row);
        for (auto* vec : {&q, &other_q})
            for (auto& x : *vec) x = 2.0f * dist(gen);
        const auto args = [&](std::int64_t start, std::int64_t n_q, float* out) {
            return AttentionArgs{q.data() + start * q_row, k.bytes.data(), v.bytes.data(), out, n_q, start, 0, 0,
                                 slots.data(), c.kv};
        };
        // The other sequence, beside each call: n_q rows at its end.
        std::vector<float> other_out(kOtherLen * q_row);
        const auto other = [&](std::int64_t n_q) {
            return AttentionArgs{other_q.data(), k.bytes.data(), v.bytes.data(), other_out.data(), n_q,
                                 kOtherLen - n_q, 0, 0, slots.data() + kLen, c.kv};
        };
        std::vector<float> whole(kLen * q_row);
        attention(args(0, kLen, whole.data()), shape, &pool);
        const auto expect_rows = [&](const std::vector<float>& got, std::int64_t start, std::int64_t n_q,
                                     const char* how) {
            for (std::int64_t i = 0; i < n_q * q_row; ++i)
                ASSERT_EQ(got[i], whole[start * q_row + i])
                    << how << ": heads " << c.n_heads << "/" << c.n_kv_heads << " dim " << c.head_dim << " "
                    << dtype_name(c.kv) << " position " << start + i / q_row;
        };
        std::int64_t start = 0;
        for (std::int64_t chunk : {7, 64, 129, 95, 300}) {  // chunked prefill, beside a prefill or a decode
            std::vector<float> out(chunk * q_row);
            const AttentionArgs batch[] = {other(chunk % 2 == 0 ? 1 : 33), args(start, chunk, out.data())};
            attention_batch(batch, shape, chunk % 2 == 0 ? &pool : nullptr);
            expect_rows(out, start, chunk, "chunk");
            start += chunk;
        }
        for (std::int64_t pos = kLen - 5; pos < kLen; ++pos) {  // decode, alone and in a batch
            std::vector<float> out(q_row);
            attention(args(pos, 1, out.data()), shape, nullptr);
            expect_rows(out, pos, 1, "decode alone");
            const AttentionArgs batch[] = {other(1), args(pos, 1, out.data()), other(2)};
            attention_batch(batch, shape, &pool);  // few sequences: the parts on different workers
            expect_rows(out, pos, 1, "decode in a batch");
            // Enough sequences: each one's parts on one worker.
            std::vector<std::vector<float>> busy_out(8, std::vector<float>(q_row));
            std::vector<AttentionArgs> busy;
            for (std::vector<float>& o : busy_out) {
                busy.push_back(other(1));
                busy.back().out = o.data();
            }
            busy.push_back(args(pos, 1, out.data()));
            attention_batch(busy, shape, &pool);
            expect_rows(out, pos, 1, "decode in a batch of nine");
        }
    }
}

TEST(AttentionTest, FewLongSequencesSplitTheirKeys) {
    using attention_detail::decode_key_parts;
    EXPECT_EQ(decode_key_parts(1, 4096, 2), 8);   // 8 tasks wanted for 2 workers
    EXPECT_EQ(decode_key_parts(3, 4096, 2), 3);
    EXPECT_EQ(decode_key_parts(1, 300, 2), 2);    // parts of at least 128 keys
    EXPECT_EQ(decode_key_parts(1, 100, 2), 1);
    EXPECT_EQ(decode_key_parts(8, 4096, 2), 1);   // the batch keeps the workers busy
}

TEST(AttentionTest, LongPromptsTakeLargerPrefillTasks) {
    using attention_detail::bf16_prefill_query_tokens;
    EXPECT_EQ(bf16_prefill_query_tokens(512, 8, 2), 512);   // eight tasks: four per worker
    EXPECT_EQ(bf16_prefill_query_tokens(4096, 8, 2), 512);  // at most 512
    EXPECT_EQ(bf16_prefill_query_tokens(600, 2, 2), 192);   // rounded up to 64 tokens
    EXPECT_EQ(bf16_prefill_query_tokens(600, 2, 1), 320);
    EXPECT_EQ(bf16_prefill_query_tokens(512, 1, 2), 64);    // one KV head (TP over eight): as before
    EXPECT_EQ(bf16_prefill_query_tokens(16, 8, 2), 64);     // at least 64
}

// One or two decoding sequences with long caches: their keys are split between tasks and the
// parts combined (flash decoding). Odd groups (a query head without a partner), head dims
// from 16 to 128, one and two new tokens, parts that the second token's extra key reaches.
TEST(AttentionTest, KeySplitDecodeMatchesReference) {
    struct SplitCase {
        std::int64_t n_heads, n_kv_heads, head_dim;
        DType kv;
        std::vector<std::int64_t> lengths;
    };
    const SplitCase cases[] = {{16, 8, 128, DType::kBF16, {4097}},      {9, 3, 64, DType::kBF16, {300, 1000}},
                               {6, 2, 48, DType::kBF16, {257}},         {4, 4, 16, DType::kBF16, {1200}},
                               {3, 1, 32, DType::kBF16, {640, 129}},    {16, 8, 128, DType::kF32, {777}},
                               {8, 2, 32, DType::kF8E4M3, {515}},       {2, 2, 144, DType::kBF16, {400}}};
    ThreadPool pool(2);
    std::mt19937 gen(23);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (const SplitCase& c : cases) {
        const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
        const std::int64_t row = c.n_kv_heads * c.head_dim;
        std::vector<AttentionArgs> batch;
        std::vector<StoredKv> keys, values;
        std::vector<std::vector<float>> queries, outputs;
        for (std::size_t s = 0; s < c.lengths.size(); ++s) {
            const std::int64_t n_q = s == 0 ? 2 : 1;
            keys.push_back(store_kv(c.lengths[s] * row, c.kv, gen));
            values.push_back(store_kv(c.lengths[s] * row, c.kv, gen));
            queries.emplace_back(n_q * c.n_heads * c.head_dim);
            for (auto& x : queries.back()) x = 2.0f * dist(gen);
            outputs.emplace_back(queries.back().size(), NAN);
        }
        for (std::size_t s = 0; s < c.lengths.size(); ++s) {
            const auto n_q = static_cast<std::int64_t>(queries[s].size()) / (c.n_heads * c.head_dim);
            AttentionArgs a{queries[s].data(), keys[s].bytes.data(), values[s].bytes.data(), outputs[s].data(), n_q,
                            c.lengths[s] - n_q};
            a.kv_dtype = c.kv;
            batch.push_back(a);
        }
        ASSERT_GT(attention_detail::decode_key_parts(static_cast<std::int64_t>(batch.size()), c.lengths.front(), 2), 1);
        attention_batch(batch, shape, &pool);
        for (std::size_t s = 0; s < batch.size(); ++s) {
            std::vector<float> expected(queries[s].size());
            AttentionArgs a = batch[s];
            a.out = expected.data();
            attention_reference(a, shape);
            for (std::size_t i = 0; i < expected.size(); ++i)
                ASSERT_NEAR(outputs[s][i], expected[i], 2e-5)
                    << "heads " << c.n_heads << "/" << c.n_kv_heads << " dim " << c.head_dim << " "
                    << dtype_name(c.kv) << " seq " << s << " at " << i;
        }
    }
}

// Prefill over a bf16 cache, the shapes the BF16 dot-product kernel takes (head_dim 64,
// 128), fresh and after a cached prefix, group 1, 2 and 4, odd lengths (partial key blocks,
// rows that see none of a block). On AVX-512 BF16 machines q and the softmax weights are
// rounded to bf16 there, so outputs (weighted means of N(0,1) values) carry ~1e-3 error;
// elsewhere the f32 kernel must match as tightly as everywhere else.
TEST(AttentionTest, Bf16CachePrefillMatchesReference) {
    struct PrefillCase {
        std::int64_t n_heads, n_kv_heads, head_dim, start_pos, n_q;
    };
    // The last two cut their queries into tasks of more than 64 tokens, in different blocks on
    // two workers (192 tokens) and on one (320).
    const PrefillCase cases[] = {{16, 8, 128, 0, 70}, {16, 8, 128, 37, 45}, {4, 4, 64, 0, 33},
                                 {8, 2, 64, 100, 129}, {8, 2, 64, 0, 600}, {8, 2, 64, 150, 550}};
    const bool bf16_kernel = uses_avx512_bf16(active_isa());
    const float tolerance = bf16_kernel ? 2e-2f : 2e-5f;
    ThreadPool pool(2);
    std::mt19937 gen(23);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (const PrefillCase& c : cases) {
        const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
        const std::int64_t n_kv = c.start_pos + c.n_q, row = c.n_kv_heads * c.head_dim;
        std::vector<float> q(c.n_q * c.n_heads * c.head_dim);
        std::vector<std::uint16_t> k(n_kv * row), v(n_kv * row);
        for (auto& x : q) x = 2.0f * dist(gen);
        for (std::size_t i = 0; i < k.size(); ++i) {
            k[i] = f32_to_bf16(dist(gen));
            v[i] = f32_to_bf16(dist(gen));
        }
        std::vector<float> out(q.size()), single(q.size()), expected(q.size());
        AttentionArgs args{q.data(), k.data(), v.data(), out.data(), c.n_q, c.start_pos};
        args.kv_dtype = DType::kBF16;
        attention(args, shape, &pool);
        args.out = single.data();
        attention(args, shape, nullptr);
        args.out = expected.data();
        attention_reference(args, shape);
        float worst = 0.0f;
        for (std::size_t i = 0; i < q.size(); ++i) {
            worst = std::max(worst, std::fabs(out[i] - expected[i]));
            ASSERT_EQ(out[i], single[i]) << i;  // a row's result does not depend on its task
        }
        EXPECT_LT(worst, tolerance) << "heads " << c.n_heads << "/" << c.n_kv_heads << " dim " << c.head_dim
                                    << " start " << c.start_pos << " n_q " << c.n_q;
        std::printf("bf16 prefill heads %lld/%lld dim %lld: max |diff| %.2e\n", static_cast<long long>(c.n_heads),
                    static_cast<long long>(c.n_kv_heads), static_cast<long long>(c.head_dim), worst);
    }
}

}  // namespace
}  // namespace tessera::kernels
