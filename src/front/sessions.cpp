#include "front/sessions.h"

#include <algorithm>
#include <utility>

namespace tessera::front {

StatusOr<std::string> SessionStore::open(const server::OpenSessionParams& p, std::string generated_id,
                                         Clock::time_point now) {
    if (p.streaming && !allow_streaming_)
        return Status::InvalidArgument("Streaming sessions are disabled. Please relaunch with "
                                       "--enable-streaming-session.");
    std::string id = p.session_id.value_or(std::move(generated_id));
    std::lock_guard<std::mutex> lock(mu_);
    if (find(id, now) != nullptr)
        return Status::InvalidArgument("Failed to open the session. Check if a session with the same id is still "
                                       "open.");
    sessions_[id] = Session{{}, p.timeout_s, now, p.streaming};
    return id;
}

void SessionStore::close(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = sessions_.find(id); it != sessions_.end()) erase(it);
}

bool SessionStore::is_open(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return sessions_.count(id) != 0;
}

bool SessionStore::is_streaming(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = sessions_.find(id);
    return it != sessions_.end() && it->second.streaming;
}

std::vector<std::string> SessionStore::take_closed(Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    // Called every scheduler step: the timeouts are looked at once a second.
    if (now - last_timeout_scan_ >= std::chrono::seconds(1)) {
        last_timeout_scan_ = now;
        std::vector<std::string> ids;
        for (const auto& [id, s] : sessions_) ids.push_back(id);
        for (const std::string& id : ids) find(id, now);
    }
    return std::exchange(closed_, {});
}

void SessionStore::erase(std::unordered_map<std::string, Session>::iterator it) {
    if (it->second.streaming || report_every_close_) closed_.push_back(it->first);
    sessions_.erase(it);
}

SessionStore::Session* SessionStore::find(const std::string& id, Clock::time_point now) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return nullptr;
    Session& s = it->second;
    if (s.timeout_s && now - s.last_used > std::chrono::duration<double>(*s.timeout_s)) {
        erase(it);
        return nullptr;
    }
    return &s;
}

void SessionStore::drop(Session& s, const std::string& rid, std::vector<std::string>& abandoned) {
    auto it = s.nodes.find(rid);
    if (it == s.nodes.end()) return;
    const std::vector<std::string> children = it->second.children;
    if (!it->second.finished) abandoned.push_back(rid);
    if (it->second.parent) {
        if (auto parent = s.nodes.find(*it->second.parent); parent != s.nodes.end())
            std::erase(parent->second.children, rid);
    }
    s.nodes.erase(it);
    for (const std::string& child : children) drop(s, child, abandoned);
}

std::vector<std::int32_t> SessionStore::continuation(const Node& parent, bool drop_output,
                                                     std::optional<std::int64_t> offset,
                                                     std::vector<std::int32_t> new_ids,
                                                     std::optional<std::int32_t> bos) {
    std::vector<std::int32_t> ids = parent.input;
    if (!drop_output) {
        const auto kept = std::min<std::size_t>(parent.output.size(), static_cast<std::size_t>(parent.max_new_tokens));
        ids.insert(ids.end(), parent.output.begin(), parent.output.begin() + static_cast<std::ptrdiff_t>(kept));
    }
    if (offset && *offset != 0) {
        // Python's ids[:offset].
        const auto n = static_cast<std::int64_t>(ids.size());
        const std::int64_t end =
            *offset < 0 ? std::max<std::int64_t>(0, n + *offset) : std::min<std::int64_t>(n, *offset);
        ids.resize(static_cast<std::size_t>(end));
    }
    const bool skip_bos = !ids.empty() && bos && !new_ids.empty() && new_ids.front() == *bos;
    ids.insert(ids.end(), new_ids.begin() + (skip_bos ? 1 : 0), new_ids.end());
    return ids;
}

StatusOr<std::vector<std::int32_t>> SessionStore::streaming_prompt(const Session& s,
                                                                   const server::SessionParams& params,
                                                                   std::vector<std::int32_t> new_ids,
                                                                   std::optional<std::int32_t> bos) {
    // SGLang's session_controller.py Session.create_req, its checks in its order.
    const Node* last = nullptr;
    for (const auto& [rid, node] : s.nodes) {
        if (!node.finished) return Status::InvalidArgument("Streaming session already has an active request.");
        last = &node;
    }
    if (params.replace) return Status::InvalidArgument("Streaming sessions do not support replace.");
    if (params.drop_previous_output)
        return Status::InvalidArgument("Streaming sessions do not support drop_previous_output.");
    if (params.offset && *params.offset != 0)
        return Status::InvalidArgument("Streaming sessions do not support offset.");
    if (last == nullptr) return new_ids;
    return continuation(*last, false, std::nullopt, std::move(new_ids), bos);
}

StatusOr<std::vector<std::int32_t>> SessionStore::prompt(const server::SessionParams& params,
                                                         std::vector<std::int32_t> new_ids,
                                                         std::optional<std::int32_t> bos,
                                                         std::vector<std::string>& abandoned, Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    Session* s = find(params.id, now);
    if (s == nullptr) return Status::InvalidArgument("Invalid request: session id " + params.id + " does not exist");
    s->last_used = now;
    if (s->streaming) return streaming_prompt(*s, params, std::move(new_ids), bos);
    if (!params.rid) {
        if (params.replace) {
            std::vector<std::string> roots;
            for (const auto& [rid, node] : s->nodes)
                if (!node.parent) roots.push_back(rid);
            for (const std::string& rid : roots) drop(*s, rid, abandoned);
        }
        return new_ids;
    }
    const auto it = s->nodes.find(*params.rid);
    if (it == s->nodes.end()) return Status::InvalidArgument("Invalid request session id");
    // SGLang aborts a running request that `replace` continues and takes its tokens so far;
    // tessera knows a request's output only once it ends, so it refuses both cases alike.
    if (!it->second.finished)
        return Status::InvalidArgument("Session request is appending to a request that hasn't finished.");
    if (params.replace) {
        for (const std::string& child : std::vector<std::string>(it->second.children)) drop(*s, child, abandoned);
    }
    return continuation(it->second, params.drop_previous_output, params.offset, std::move(new_ids), bos);
}

Status SessionStore::add(const server::SessionParams& params, const std::string& rid, std::vector<std::int32_t> input,
                         std::int64_t max_new_tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    Session* s = find(params.id, Clock::now());
    if (s == nullptr) return Status::InvalidArgument("Invalid request: session id " + params.id + " does not exist");
    std::optional<std::string> parent = params.rid;
    if (s->streaming) {
        // The turn follows the last one that ended well, whatever rid says (as SGLang).
        parent.reset();
        for (const auto& [id, node] : s->nodes) {
            if (!node.finished) return Status::InvalidArgument("Streaming session already has an active request.");
            parent = id;
        }
    }
    if (parent && s->nodes.count(*parent) == 0) return Status::InvalidArgument("Invalid request session id");
    if (s->nodes.count(rid) != 0)
        return Status::InvalidArgument("request id " + rid + " is already a request of session " + params.id);
    if (parent) s->nodes[*parent].children.push_back(rid);
    s->nodes[rid] = Node{std::move(input), {}, parent, {}, max_new_tokens, false};
    return Status::Ok();
}

void SessionStore::end(const std::string& session_id, const std::string& rid, std::vector<std::int32_t> output,
                       bool finished) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return;
    Session& s = it->second;
    const auto node = s.nodes.find(rid);
    if (node == s.nodes.end()) return;
    if (finished) {
        node->second.output = std::move(output);
        node->second.finished = true;
        // A streaming session keeps only its last turn (whose tokens include the earlier ones).
        if (s.streaming && node->second.parent) s.nodes.erase(*std::exchange(node->second.parent, std::nullopt));
        return;
    }
    std::vector<std::string> ignored;
    drop(s, rid, ignored);
}

std::size_t SessionStore::size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sessions_.size();
}

}  // namespace tessera::front
