#include "front/sessions.h"

#include <gtest/gtest.h>

namespace tessera::front {
namespace {

using Clock = SessionStore::Clock;
using Ids = std::vector<std::int32_t>;

server::SessionParams continue_from(std::optional<std::string> rid, std::optional<std::int64_t> offset = std::nullopt,
                                    bool replace = false, bool drop_previous_output = false) {
    return {"s", std::move(rid), offset, replace, drop_previous_output};
}

// One finished turn "a": prompt {1, 2, 3}, output {4, 5} (max_new_tokens 8).
struct SessionStoreTest : ::testing::Test {
    void SetUp() override {
        ASSERT_EQ(store.open({.capacity_of_str_len = 100}, "s", now).value(), "s");
        ASSERT_TRUE(store.add(continue_from(std::nullopt), "a", {1, 2, 3}, 8).ok());
        store.end("s", "a", {4, 5}, /*finished=*/true);
    }
    StatusOr<Ids> prompt(const server::SessionParams& p, Ids new_ids, std::optional<std::int32_t> bos = std::nullopt) {
        abandoned.clear();
        return store.prompt(p, std::move(new_ids), bos, abandoned, now);
    }
    SessionStore store;
    Clock::time_point now = Clock::now();
    std::vector<std::string> abandoned;
};

TEST_F(SessionStoreTest, ATurnContinuesItsParentsPromptAndOutput) {
    EXPECT_EQ(prompt(continue_from("a"), {9}).value(), (Ids{1, 2, 3, 4, 5, 9}));
    EXPECT_EQ(prompt(continue_from("a", std::nullopt, false, /*drop_previous_output=*/true), {9}).value(),
              (Ids{1, 2, 3, 9}));
    // offset: a Python slice end of the parent's tokens; 0 means none.
    EXPECT_EQ(prompt(continue_from("a", -1), {9}).value(), (Ids{1, 2, 3, 4, 9}));
    EXPECT_EQ(prompt(continue_from("a", 2), {9}).value(), (Ids{1, 2, 9}));
    EXPECT_EQ(prompt(continue_from("a", 0), {9}).value(), (Ids{1, 2, 3, 4, 5, 9}));
    EXPECT_EQ(prompt(continue_from("a", -10), {9}).value(), (Ids{9}));
    // The new text's BOS is dropped when something comes before it.
    EXPECT_EQ(prompt(continue_from("a"), {7, 9}, 7).value(), (Ids{1, 2, 3, 4, 5, 9}));
    EXPECT_EQ(prompt(continue_from(std::nullopt), {7, 9}, 7).value(), (Ids{7, 9}));
}

TEST_F(SessionStoreTest, RefusalsInSglangsWords) {
    EXPECT_EQ(prompt({"nope", std::nullopt, {}, false, false}, {1}).status().message(),
              "Invalid request: session id nope does not exist");
    EXPECT_EQ(prompt(continue_from("zz"), {1}).status().message(), "Invalid request session id");
    ASSERT_TRUE(store.add(continue_from("a"), "b", {1, 2, 3, 4, 5, 9}, 8).ok());  // still running
    EXPECT_EQ(prompt(continue_from("b"), {1}).status().message(),
              "Session request is appending to a request that hasn't finished.");
    EXPECT_EQ(store.open({.session_id = "s"}, "x", now).status().message(),
              "Failed to open the session. Check if a session with the same id is still open.");
    EXPECT_EQ(store.open({.streaming = true}, "x", now).status().message(),
              "Streaming sessions are disabled. Please relaunch with --enable-streaming-session.");
    EXPECT_FALSE(store.add(continue_from("a"), "b", {1}, 8).ok()) << "a request id joins once";
}

TEST_F(SessionStoreTest, ReplaceDropsWhatFollowedAndNamesTheRunningRequests) {
    ASSERT_TRUE(store.add(continue_from("a"), "b", {1, 2, 3, 4, 5, 9}, 8).ok());
    store.end("s", "b", {6}, true);
    ASSERT_TRUE(store.add(continue_from("b"), "c", {1, 2, 3, 4, 5, 9, 6, 8}, 8).ok());  // running
    EXPECT_EQ(prompt(continue_from("a", std::nullopt, /*replace=*/true), {9}).value(), (Ids{1, 2, 3, 4, 5, 9}));
    EXPECT_EQ(abandoned, std::vector<std::string>{"c"});
    EXPECT_EQ(prompt(continue_from("b"), {1}).status().message(), "Invalid request session id");
    EXPECT_TRUE(prompt(continue_from("a"), {1}).ok()) << "the replaced request itself stays";
    // Without a rid, replace empties the session.
    EXPECT_EQ(prompt(continue_from(std::nullopt, std::nullopt, true), {3}).value(), (Ids{3}));
    EXPECT_EQ(prompt(continue_from("a"), {1}).status().message(), "Invalid request session id");
}

TEST_F(SessionStoreTest, AnAbortedTurnLeavesTheSessionAndClosingEndsIt) {
    ASSERT_TRUE(store.add(continue_from("a"), "b", {1}, 8).ok());
    store.end("s", "b", {}, /*finished=*/false);
    EXPECT_EQ(prompt(continue_from("b"), {1}).status().message(), "Invalid request session id");
    // The output kept for the next turn is at most max_new_tokens long.
    ASSERT_TRUE(store.add(continue_from("a"), "short", {1, 2, 3, 4, 5}, 1).ok());
    store.end("s", "short", {6, 7}, true);
    EXPECT_EQ(prompt(continue_from("short"), {9}).value(), (Ids{1, 2, 3, 4, 5, 6, 9}));
    store.close("s");
    store.close("s");  // an unknown id is no error
    EXPECT_EQ(prompt(continue_from("a"), {1}).status().message(), "Invalid request: session id s does not exist");
    EXPECT_EQ(store.size(), 0u);
}

TEST_F(SessionStoreTest, AnIdleSessionClosesAfterItsTimeout) {
    ASSERT_TRUE(store.open({.session_id = "t", .timeout_s = 2.0}, "x", now).ok());
    const server::SessionParams t{"t", std::nullopt, {}, false, false};
    abandoned.clear();
    EXPECT_TRUE(store.prompt(t, {1}, std::nullopt, abandoned, now + std::chrono::seconds(1)).ok());
    EXPECT_TRUE(store.prompt(t, {1}, std::nullopt, abandoned, now + std::chrono::seconds(2)).ok()) << "used at 1 s";
    EXPECT_EQ(store.prompt(t, {1}, std::nullopt, abandoned, now + std::chrono::seconds(5)).status().message(),
              "Invalid request: session id t does not exist");
    EXPECT_TRUE(store.open({.session_id = "t"}, "x", now + std::chrono::seconds(5)).ok()) << "its id is free again";
}

TEST(StreamingSessionTest, EachTurnAppendsToTheLastOneThatEndedWell) {
    SessionStore store(/*allow_streaming=*/true);
    const Clock::time_point now = Clock::now();
    ASSERT_TRUE(store.open({.session_id = "s", .streaming = true}, "x", now).ok());
    EXPECT_TRUE(store.is_streaming("s"));
    std::vector<std::string> abandoned;
    const auto turn = [&](server::SessionParams p, Ids ids, std::optional<std::int32_t> bos = std::nullopt) {
        return store.prompt(p, std::move(ids), bos, abandoned, now);
    };
    const server::SessionParams append{"s", std::nullopt, {}, false, false};
    EXPECT_EQ(turn(append, {1, 2}).value(), (Ids{1, 2}));
    ASSERT_TRUE(store.add(append, "a", {1, 2}, 3).ok());
    // One turn at a time, checked first (SGLang's order).
    EXPECT_EQ(turn({"s", std::nullopt, {}, /*replace=*/true, false}, {3}).status().message(),
              "Streaming session already has an active request.");
    EXPECT_EQ(store.add(append, "b", {3}, 3).message(), "Streaming session already has an active request.");
    store.end("s", "a", {5, 6, 7, 8}, /*finished=*/true);  // the fourth output is past max_new_tokens
    // rid is ignored: the next turn follows the last, after its kept output, BOS dropped.
    const server::SessionParams named{"s", "nonexistent", {}, false, false};
    EXPECT_EQ(turn(named, {0, 9}, /*bos=*/0).value(), (Ids{1, 2, 5, 6, 7, 9}));
    ASSERT_TRUE(store.add(named, "b", {1, 2, 5, 6, 7, 9}, 2).ok());
    store.end("s", "b", {4}, /*finished=*/false);  // aborted: the session goes back to "a"
    EXPECT_EQ(turn(append, {3}).value(), (Ids{1, 2, 5, 6, 7, 3}));
    ASSERT_TRUE(store.add(append, "c", {1, 2, 5, 6, 7, 3}, 2).ok());
    store.end("s", "c", {4}, /*finished=*/true);
    EXPECT_EQ(turn(append, {}).value(), (Ids{1, 2, 5, 6, 7, 3, 4}));
    // Appends only.
    EXPECT_EQ(turn({"s", std::nullopt, {}, /*replace=*/true, false}, {3}).status().message(),
              "Streaming sessions do not support replace.");
    EXPECT_EQ(turn({"s", std::nullopt, {}, false, /*drop_previous_output=*/true}, {3}).status().message(),
              "Streaming sessions do not support drop_previous_output.");
    EXPECT_EQ(turn({"s", std::nullopt, -1, false, false}, {3}).status().message(),
              "Streaming sessions do not support offset.");
    EXPECT_TRUE(turn({"s", std::nullopt, 0, false, false}, {3}).ok()) << "offset 0 is none";
    EXPECT_TRUE(abandoned.empty());
}

TEST(StreamingSessionTest, ClosedAndTimedOutStreamingSessionsAreReportedOnce) {
    SessionStore store(/*allow_streaming=*/true);
    const Clock::time_point now = Clock::now();
    ASSERT_TRUE(store.open({.session_id = "a", .streaming = true}, "x", now).ok());
    ASSERT_TRUE(store.open({.session_id = "b", .streaming = true, .timeout_s = 5.0}, "x", now).ok());
    ASSERT_TRUE(store.open({.session_id = "plain", .timeout_s = 5.0}, "x", now).ok());
    EXPECT_FALSE(store.is_streaming("plain"));
    EXPECT_TRUE(store.take_closed(now).empty());
    store.close("a");
    store.close("plain");
    EXPECT_EQ(store.take_closed(now + std::chrono::seconds(1)), std::vector<std::string>{"a"});
    EXPECT_TRUE(store.take_closed(now + std::chrono::seconds(2)).empty());
    EXPECT_EQ(store.take_closed(now + std::chrono::seconds(10)), std::vector<std::string>{"b"});
    EXPECT_EQ(store.size(), 0u);
    EXPECT_FALSE(store.is_streaming("b"));
}

}  // namespace
}  // namespace tessera::front
