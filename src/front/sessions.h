#pragma once
// front/sessions.h — SGLang's sessions (session/session_controller.py Session): a /generate
// request with session_params continues an earlier request of a session opened with
// /open_session, its prompt rebuilt from that request's prompt and output followed by the new
// tokens; requests of a session form a tree (a branch per continued request). Tokens only: the
// KV of earlier turns is found again in the prefix cache.
//
// With --enable-streaming-session a session opened with "streaming": true is a line, not a
// tree: one turn at a time, each appending to the last one that ended well (rid is ignored;
// replace, offset and drop_previous_output are refused), and the scheduler holds the last
// turn's KV for it (Scheduler::release_session once it closes). Thread-safe.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "server/backend.h"

namespace tessera::front {

class SessionStore {
 public:
    using Clock = std::chrono::steady_clock;

    // allow_streaming: --enable-streaming-session. report_every_close: take_closed() reports
    // every session, not only streaming ones (--enable-session-radix-cache).
    explicit SessionStore(bool allow_streaming = false, bool report_every_close = false)
        : allow_streaming_(allow_streaming), report_every_close_(report_every_close) {}

    // A new session: p.session_id, or `generated_id` when it gives none. Refuses an id already
    // open, and a streaming session unless allowed, in SGLang's words.
    StatusOr<std::string> open(const server::OpenSessionParams& p, std::string generated_id, Clock::time_point now);
    // Closes the session (an unknown id is not an error, as in SGLang).
    void close(const std::string& id);
    bool is_open(const std::string& id) const;
    bool is_streaming(const std::string& id) const;
    // Closes the sessions idle past their timeout, and returns the streaming ones (or all,
    // with report_every_close) closed since the last call, by close() or a timeout: the KV
    // the scheduler keeps for them is to be released.
    std::vector<std::string> take_closed(Clock::time_point now);

    // The prompt of a request continuing `params.rid` of session `params.id`: that request's
    // prompt and output (or only its prompt, with drop_previous_output), cut at `offset` as a
    // Python slice end when offset is given and not 0, then `new_ids` (without a leading `bos`
    // when something comes before them). Without a rid the request starts a new branch; with
    // `replace` what followed rid (without it, the whole session) is dropped, and the requests
    // still running there are added to `abandoned` for the caller to abort.
    StatusOr<std::vector<std::int32_t>> prompt(const server::SessionParams& params, std::vector<std::int32_t> new_ids,
                                               std::optional<std::int32_t> bos, std::vector<std::string>& abandoned,
                                               Clock::time_point now);
    // Request `rid` (its prompt `input`) joins the session under params.rid; Invalid when the
    // session or its parent has gone since prompt().
    Status add(const server::SessionParams& params, const std::string& rid, std::vector<std::int32_t> input,
               std::int64_t max_new_tokens);
    // Request `rid` ended: with its output when it finished, else it leaves the session (an
    // aborted or failed request is no turn of it).
    void end(const std::string& session_id, const std::string& rid, std::vector<std::int32_t> output, bool finished);

    std::size_t size() const;

 private:
    struct Node {
        std::vector<std::int32_t> input, output;
        std::optional<std::string> parent;
        std::vector<std::string> children;
        std::int64_t max_new_tokens = 0;
        bool finished = false;
    };
    struct Session {
        // Streaming: the last turn that ended well, and the one running.
        std::unordered_map<std::string, Node> nodes;
        std::optional<double> timeout_s;
        Clock::time_point last_used;
        bool streaming = false;
    };
    // The open session `id`, or nullptr (one idle past its timeout is closed here).
    Session* find(const std::string& id, Clock::time_point now);
    void erase(std::unordered_map<std::string, Session>::iterator it);
    // A streaming session's next turn, or SGLang's refusal.
    static StatusOr<std::vector<std::int32_t>> streaming_prompt(const Session& s, const server::SessionParams& params,
                                                                std::vector<std::int32_t> new_ids,
                                                                std::optional<std::int32_t> bos);
    // `parent`'s prompt and output (only its prompt with drop_output), cut at `offset` as a
    // Python slice end when it is given and not 0, then `new_ids` without a leading `bos`.
    static std::vector<std::int32_t> continuation(const Node& parent, bool drop_output,
                                                  std::optional<std::int64_t> offset, std::vector<std::int32_t> new_ids,
                                                  std::optional<std::int32_t> bos);
    // Removes `rid` and what followed it, adding the unfinished ones to `abandoned`.
    static void drop(Session& s, const std::string& rid, std::vector<std::string>& abandoned);

    const bool allow_streaming_;
    const bool report_every_close_;
    mutable std::mutex mu_;
    std::unordered_map<std::string, Session> sessions_;  // GUARDED_BY(mu_)
    std::vector<std::string> closed_;                    // GUARDED_BY(mu_): for take_closed()
    Clock::time_point last_timeout_scan_;                 // GUARDED_BY(mu_)
};

}  // namespace tessera::front
