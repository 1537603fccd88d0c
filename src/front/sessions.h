#pragma once
// front/sessions.h — SGLang's sessions (session/session_controller.py Session): a /generate
// request with session_params continues an earlier request of a session opened with
// /open_session, its prompt rebuilt from that request's prompt and output followed by the new
// tokens; requests of a session form a tree (a branch per continued request). Tokens only: the
// KV of earlier turns is found again in the prefix cache, as SGLang's sessions without
// --enable-streaming-session find it. Thread-safe.

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

    // A new session: p.session_id, or `generated_id` when it gives none. Refuses a streaming
    // session and an id already open, in SGLang's words.
    StatusOr<std::string> open(const server::OpenSessionParams& p, std::string generated_id, Clock::time_point now);
    // Closes the session (an unknown id is not an error, as in SGLang).
    void close(const std::string& id);

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
        std::unordered_map<std::string, Node> nodes;
        std::optional<double> timeout_s;
        Clock::time_point last_used;
    };
    // The open session `id`, or nullptr (one idle past its timeout is closed here).
    Session* find(const std::string& id, Clock::time_point now);
    // Removes `rid` and what followed it, adding the unfinished ones to `abandoned`.
    static void drop(Session& s, const std::string& rid, std::vector<std::string>& abandoned);

    mutable std::mutex mu_;
    std::unordered_map<std::string, Session> sessions_;  // GUARDED_BY(mu_)
};

}  // namespace tessera::front
