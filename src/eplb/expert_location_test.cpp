#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <vector>

#include "eplb/expert_dispatch.h"
#include "eplb/expert_location.h"
#include "eplb/python_random.h"

namespace tessera::eplb {
namespace {

TEST(PythonRandom, DrawsWhatCPythonDraws) {
    // random.Random(42): getrandbits(32) x3, then _randbelow(7) x5.
    PythonRandom r(42);
    EXPECT_EQ(r.getrandbits(32), 2746317213u);
    EXPECT_EQ(r.getrandbits(32), 478163327u);
    EXPECT_EQ(r.getrandbits(32), 107420369u);
    for (std::int64_t v : {5, 2, 1, 1, 1}) EXPECT_EQ(r.randbelow(7), v);
    // random.Random(42): sample([10..16], 4), shuffle(range(9)), sample(range(40), 7).
    PythonRandom s(42);
    EXPECT_EQ(s.sample({10, 11, 12, 13, 14, 15, 16}, 4), (std::vector<std::int32_t>{15, 10, 16, 12}));
    std::vector<std::int32_t> x = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    s.shuffle(x);
    EXPECT_EQ(x, (std::vector<std::int32_t>{7, 6, 2, 4, 0, 5, 1, 8, 3}));
    std::vector<std::int32_t> forty(40);
    for (int i = 0; i < 40; ++i) forty[i] = i;
    EXPECT_EQ(s.sample(forty, 7), (std::vector<std::int32_t>{2, 1, 5, 13, 14, 32, 38}));
}

ExpertLocationShape shape(std::int64_t L, std::int64_t E, std::int64_t P, int ep) {
    ExpertLocationShape s;
    s.num_layers = L;
    s.num_logical = E;
    s.num_physical = P;
    s.ep_size = ep;
    return s;
}

TEST(ExpertLocation, TrivialCopiesTheFirstExperts) {
    auto loc = ExpertLocation::trivial(2, 4, 6, 2);
    ASSERT_TRUE(loc.ok());
    EXPECT_EQ(std::vector<std::int32_t>(loc->phy2log(1), loc->phy2log(1) + 6), (std::vector<std::int32_t>{0, 1, 2, 3, 0, 1}));
    EXPECT_EQ(loc->logcnt(0)[0], 2);
    EXPECT_EQ(loc->logcnt(0)[3], 1);
    EXPECT_EQ(loc->log2phy(0)[0 * 3 + 1], 4);
    EXPECT_EQ(loc->rank_of_physical(2), 0);
    EXPECT_EQ(loc->rank_of_physical(3), 1);
    EXPECT_FALSE(ExpertLocation::trivial(2, 4, 5, 2).ok()) << "5 slots over 2 ranks";
}

TEST(ExpertLocation, InitFromInlineJsonAndFiles) {
    auto map = init_expert_location(R"({"physical_to_logical_map": [[3, 2, 1, 0], [0, 0, 1, 2]]})", shape(2, 3, 4, 2));
    EXPECT_FALSE(map.ok()) << "layer 0 names expert 3 of 3";
    map = init_expert_location(R"({"physical_to_logical_map": [[2, 2, 1, 0], [0, 0, 1, 2]]})", shape(2, 3, 4, 2));
    ASSERT_TRUE(map.ok()) << map.status().message();
    EXPECT_EQ(map->phy2log(0)[0], 2);
    EXPECT_EQ(map->logcnt(0)[2], 2);
    EXPECT_EQ(map->log2phy(1)[0 * 2 + 1], 1) << "copies in ascending slot order";
    EXPECT_FALSE(init_expert_location(R"({"physical_to_logical_map": [[0, 0, 1, 1], [0, 0, 1, 2]]})", shape(2, 3, 4, 2)).ok())
        << "layer 0 places no copy of expert 2";
    EXPECT_FALSE(init_expert_location(R"({"physical_to_logical_map": [0, 1, 2, 0]})", shape(2, 3, 4, 2)).ok());
    EXPECT_FALSE(init_expert_location(R"({"other": 1})", shape(2, 3, 4, 2)).ok());
    EXPECT_FALSE(init_expert_location("{not json", shape(2, 3, 4, 2)).ok());
    auto pt = init_expert_location("/some/where/location.pt", shape(2, 3, 4, 2));
    ASSERT_FALSE(pt.ok());
    EXPECT_NE(pt.status().message().find("JSON"), std::string::npos) << pt.status().message();
    EXPECT_FALSE(init_expert_location("/no/such/file.json", shape(2, 3, 4, 2)).ok());

    // logical_count, as a recorder dump holds it ([passes, layers, experts]), from a file.
    const std::string path = ::testing::TempDir() + "/eplb_location_test.json";
    std::ofstream(path) << R"({"logical_count": [[[1, 1, 50], [9, 0, 0]], [[1, 1, 50], [9, 0, 0]]]})";
    auto balanced = init_expert_location(path, shape(2, 3, 4, 2));
    ASSERT_TRUE(balanced.ok()) << balanced.status().message();
    EXPECT_EQ(balanced->logcnt(0)[2], 2) << "the hot expert gets the redundant slot";
    EXPECT_EQ(balanced->logcnt(1)[0], 2);
    EXPECT_NE(balanced->rank_of_physical(balanced->log2phy(0)[2 * 2 + 0]),
              balanced->rank_of_physical(balanced->log2phy(0)[2 * 2 + 1]))
        << "its two copies sit on different ranks";
    std::remove(path.c_str());
    EXPECT_FALSE(init_expert_location(R"({"logical_count": [[1, 2]]})", shape(2, 3, 4, 2)).ok());
}

TEST(ExpertDispatch, StaticTableMatchesSglang) {
    // The README placement given as a physical_to_logical_map, ep 8: SGLang's
    // compute_logical_to_rank_dispatch_physical_map (random.Random(42)) gives these rows.
    auto loc = init_expert_location(
        R"({"physical_to_logical_map": [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                                         [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]})",
        shape(2, 12, 16, 8));
    ASSERT_TRUE(loc.ok()) << loc.status().message();
    ExpertDispatch dispatch(std::make_shared<ExpertLocation>(*loc), DispatchAlgorithm::kStatic);
    const auto& t = dispatch.static_table();
    auto row = [&](int rank, int layer) {
        return std::vector<std::int32_t>(t.begin() + (rank * 2 + layer) * 12, t.begin() + (rank * 2 + layer + 1) * 12);
    };
    EXPECT_EQ(row(0, 0), (std::vector<std::int32_t>{12, 15, 11, 6, 7, 0, 1, 3, 4, 9, 10, 14}));
    EXPECT_EQ(row(0, 1), (std::vector<std::int32_t>{13, 11, 8, 14, 9, 10, 2, 0, 6, 7, 1, 5}));
    EXPECT_EQ(row(7, 0), (std::vector<std::int32_t>{12, 15, 11, 6, 5, 0, 1, 3, 4, 9, 8, 14}));
    EXPECT_EQ(row(7, 1), (std::vector<std::int32_t>{13, 15, 8, 14, 9, 12, 4, 0, 3, 7, 1, 5}));

    // A token's table row is its owner's: 16 rows over 8 ranks, rows 14 and 15 belong to rank 7.
    std::vector<std::int32_t> ids = {4, 10};
    dispatch.to_physical(0, ids.data(), 1, 2, 15, 16, 0);
    EXPECT_EQ(ids, (std::vector<std::int32_t>{5, 8}));
    ids = {4, 10};
    dispatch.to_physical(0, ids.data(), 1, 2, 0, 16, 0);
    EXPECT_EQ(ids, (std::vector<std::int32_t>{7, 10}));
    // A rank sending its own rows (DP-attention's scattered MoE) uses its own row of the table,
    // wherever its rows sit in the pass.
    ids = {4, 10};
    dispatch.to_physical(0, ids.data(), 1, 2, 0, 16, 0, /*owner=*/7);
    EXPECT_EQ(ids, (std::vector<std::int32_t>{5, 8}));
}

TEST(ExpertDispatch, DynamicUsesEveryCopyAndIsReproducible) {
    auto loc = ExpertLocation::trivial(1, 4, 8, 2);  // every expert has two copies
    ASSERT_TRUE(loc.ok());
    ExpertDispatch dispatch(std::make_shared<ExpertLocation>(*loc), DispatchAlgorithm::kDynamic);
    std::set<std::int32_t> used;
    for (std::int64_t pass = 0; pass < 4; ++pass) {
        std::vector<std::int32_t> ids(64, 1), again(64, 1);
        dispatch.to_physical(0, ids.data(), 64, 1, 0, 64, pass);
        dispatch.to_physical(0, again.data(), 64, 1, 0, 64, pass);
        EXPECT_EQ(ids, again) << "every rank computes the same pick";
        for (std::int32_t p : ids) {
            EXPECT_TRUE(p == 1 || p == 5) << p;
            used.insert(p);
        }
    }
    EXPECT_EQ(used.size(), 2u);
    // One token per pass (decode) still spreads over the copies from pass to pass.
    std::set<std::int32_t> decode;
    for (std::int64_t pass = 0; pass < 16; ++pass) {
        std::int32_t id = 2;
        dispatch.to_physical(0, &id, 1, 1, 0, 1, pass);
        decode.insert(id);
    }
    EXPECT_EQ(decode.size(), 2u);
}

TEST(ExpertDispatch, FakeRouterNoiseIsUniformInFiveToTen) {
    std::vector<float> a(4 * 64), b(4 * 64);
    router_noise(a.data(), 4, 64, 3, 1, 9);
    router_noise(b.data(), 4, 64, 3, 1, 9);
    EXPECT_EQ(a, b);
    double sum = 0;
    for (float v : a) {
        EXPECT_GE(v, 5.0f);
        EXPECT_LE(v, 10.0f);
        sum += v;
    }
    EXPECT_NEAR(sum / a.size(), 7.5, 0.4);
    router_noise(b.data(), 4, 64, 3, 1, 10);
    EXPECT_NE(a, b) << "another pass draws other noise";
    EXPECT_FALSE(parse_dispatch_algorithm("lp").ok());
}

}  // namespace
}  // namespace tessera::eplb
