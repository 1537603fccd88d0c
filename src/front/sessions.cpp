#include "front/sessions.h"

#include <algorithm>

namespace tessera::front {

StatusOr<std::string> SessionStore::open(const server::OpenSessionParams& p, std::string generated_id,
                                         Clock::time_point now) {
    if (p.streaming)
        return Status::InvalidArgument("Streaming sessions are disabled. Please relaunch with "
                                       "--enable-streaming-session.");
    std::string id = p.session_id.value_or(std::move(generated_id));
    std::lock_guard<std::mutex> lock(mu_);
    if (find(id, now) != nullptr)
        return Status::InvalidArgument("Failed to open the session. Check if a session with the same id is still "
                                       "open.");
    sessions_[id] = Session{{}, p.timeout_s, now};
    return id;
}

void SessionStore::close(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(id);
}

SessionStore::Session* SessionStore::find(const std::string& id, Clock::time_point now) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return nullptr;
    Session& s = it->second;
    if (s.timeout_s && now - s.last_used > std::chrono::duration<double>(*s.timeout_s)) {
        sessions_.erase(it);
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

StatusOr<std::vector<std::int32_t>> SessionStore::prompt(const server::SessionParams& params,
                                                         std::vector<std::int32_t> new_ids,
                                                         std::optional<std::int32_t> bos,
                                                         std::vector<std::string>& abandoned, Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    Session* s = find(params.id, now);
    if (s == nullptr) return Status::InvalidArgument("Invalid request: session id " + params.id + " does not exist");
    s->last_used = now;
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
    const Node& last = it->second;
    std::vector<std::int32_t> ids = last.input;
    if (!params.drop_previous_output) {
        const auto kept = std::min<std::size_t>(last.output.size(), static_cast<std::size_t>(last.max_new_tokens));
        ids.insert(ids.end(), last.output.begin(), last.output.begin() + static_cast<std::ptrdiff_t>(kept));
    }
    if (params.offset && *params.offset != 0) {
        // Python's ids[:offset].
        const auto n = static_cast<std::int64_t>(ids.size());
        const std::int64_t end = *params.offset < 0 ? std::max<std::int64_t>(0, n + *params.offset)
                                                    : std::min<std::int64_t>(n, *params.offset);
        ids.resize(static_cast<std::size_t>(end));
    }
    const bool skip_bos = !ids.empty() && bos && !new_ids.empty() && new_ids.front() == *bos;
    ids.insert(ids.end(), new_ids.begin() + (skip_bos ? 1 : 0), new_ids.end());
    return ids;
}

Status SessionStore::add(const server::SessionParams& params, const std::string& rid, std::vector<std::int32_t> input,
                         std::int64_t max_new_tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    Session* s = find(params.id, Clock::now());
    if (s == nullptr) return Status::InvalidArgument("Invalid request: session id " + params.id + " does not exist");
    if (params.rid && s->nodes.count(*params.rid) == 0) return Status::InvalidArgument("Invalid request session id");
    if (s->nodes.count(rid) != 0)
        return Status::InvalidArgument("request id " + rid + " is already a request of session " + params.id);
    if (params.rid) s->nodes[*params.rid].children.push_back(rid);
    s->nodes[rid] = Node{std::move(input), {}, params.rid, {}, max_new_tokens, false};
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
