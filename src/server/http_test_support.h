#pragma once
// server/http_test_support.h — for the HTTP socket tests only: FakeBackend (a thread that
// emits one token per `interval` for each request) and TestClient (a small blocking HTTP/1.1
// client on raw sockets that understands Content-Length and chunked bodies).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/backend.h"

namespace tessera::server::testing {

// Token k (1-based) of a request is text "t<k> ", id 100 + k. A request ends after
// max_new_tokens tokens ("length"; 8 when max_new_tokens < 0), or with "stop" matched "STOP"
// after token 2 when its prompt contains "STOP". Prompts "__reject__" / "__full__" are
// refused with InvalidArgument / ResourceExhausted.
class FakeBackend : public Backend {
 public:
    explicit FakeBackend(std::chrono::microseconds interval = std::chrono::milliseconds(2))
        : interval_(interval), thread_([this] { loop(); }) {}
    ~FakeBackend() override {
        {
            std::lock_guard lock(mu_);
            quit_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

    // Test knobs.
    void set_ready(bool r) { ready_ = r; }
    void set_stall_health(bool s) { stall_health_ = s; }
    void hold_until_active(std::size_t n) { hold_until_ = n; }  // emit nothing until n streams
    std::vector<std::string> submitted() const {
        std::lock_guard lock(mu_);
        return submitted_;
    }
    std::vector<GenerationRequest> requests() const {
        std::lock_guard lock(mu_);
        return requests_;
    }
    bool was_aborted(const std::string& id) const {
        std::lock_guard lock(mu_);
        return aborted_.count(id) > 0;
    }
    std::size_t n_active() const {
        std::lock_guard lock(mu_);
        return streams_.size();
    }
    std::size_t max_active() const {
        std::lock_guard lock(mu_);
        return max_active_;
    }

    // ---- Backend
    Status submit(GenerationRequest request, EventCallback on_event) override {
        const std::string text = request.input.text.value_or("");
        if (text == "__reject__") return Status::InvalidArgument("fake backend rejects '__reject__'");
        if (text == "__full__") return Status::ResourceExhausted("fake backend queue is full");
        Stream s;
        s.id = request.request_id;
        s.callback = std::move(on_event);
        s.n_tokens = request.params.max_new_tokens < 0 ? 8 : request.params.max_new_tokens;
        s.stop_after = text.find("STOP") != std::string::npos ? 2 : -1;
        s.logprobs = request.params.logprobs;
        s.n_top = request.params.top_logprobs;
        s.prompt_tokens = request.input.input_ids ? static_cast<std::int64_t>(request.input.input_ids->size())
                          : request.input.chat_json ? 10
                                                    : static_cast<std::int64_t>(text.size());
        s.stalled = stall_health_ && request.input.input_ids &&
                    *request.input.input_ids == std::vector<std::int32_t>{0};
        s.next = std::chrono::steady_clock::now() + interval_;
        {
            std::lock_guard lock(mu_);
            submitted_.push_back(s.id);
            requests_.push_back(request);
            streams_.push_back(std::move(s));
            max_active_ = std::max(max_active_, streams_.size());
        }
        cv_.notify_all();
        return Status::Ok();
    }
    void abort(const std::string& request_id) override {
        std::lock_guard lock(mu_);
        aborted_.insert(request_id);
        for (Stream& s : streams_) {
            if (s.id == request_id) s.abort = true;
        }
        cv_.notify_all();
    }
    // /pause_generation and /continue_generation: the modes asked, in order ("continue" for
    // the latter).
    Status pause_generation(PauseMode mode) override {
        std::lock_guard lock(mu_);
        pauses_.push_back(mode == PauseMode::kAbort ? "abort" : mode == PauseMode::kRetract ? "retract" : "in_place");
        return Status::Ok();
    }
    Status continue_generation() override {
        std::lock_guard lock(mu_);
        pauses_.push_back("continue");
        return Status::Ok();
    }
    std::vector<std::string> pauses() const {
        std::lock_guard lock(mu_);
        return pauses_;
    }
    // /update_weights_from_disk: kept until finish_update() answers it from the caller's thread,
    // as the engine's loop answers after the running requests.
    void update_weights_from_disk(const WeightUpdate& update, std::function<void(Status)> done) override {
        std::lock_guard lock(mu_);
        updates_.push_back(update);
        update_done_ = std::move(done);
    }
    void finish_update(Status status) {
        std::function<void(Status)> done;
        {
            std::lock_guard lock(mu_);
            done = std::move(update_done_);
        }
        if (done) done(std::move(status));
    }
    std::vector<WeightUpdate> updates() const {
        std::lock_guard lock(mu_);
        return updates_;
    }
    // /release_memory_occupation and /resume_memory_occupation: recorded ("release" or "resume"
    // with the regions), answered at once with memory_answer.
    void release_memory_occupation(const MemoryRegions& regions, std::function<void(Status)> done) override {
        memory_call("release", regions, std::move(done));
    }
    void resume_memory_occupation(const MemoryRegions& regions, std::function<void(Status)> done) override {
        memory_call("resume", regions, std::move(done));
    }
    Status configure_logging(const LoggingChange& change) override {
        std::lock_guard lock(mu_);
        logging_changes_.push_back(change);
        return Status::Ok();
    }
    std::vector<LoggingChange> logging_changes() const {
        std::lock_guard lock(mu_);
        return logging_changes_;
    }
    std::vector<std::string> memory_calls() const {
        std::lock_guard lock(mu_);
        return memory_calls_;
    }
    Status memory_answer = Status::Ok();
    void abort_prefixed(const std::string& prefix) override {
        std::lock_guard lock(mu_);
        for (Stream& s : streams_) {
            if (s.id.starts_with(prefix) && s.n_tokens >= 0) {
                aborted_.insert(s.id);
                s.abort = true;
            }
        }
        cv_.notify_all();
    }
    // One id per byte; add_special_tokens puts a 1 (a BOS) first; ids above 255 are refused.
    StatusOr<std::vector<std::int32_t>> tokenize(const std::string& text, bool add_special_tokens) const override {
        std::vector<std::int32_t> ids;
        if (add_special_tokens) ids.push_back(1);
        for (const unsigned char c : text) ids.push_back(c);
        return ids;
    }
    StatusOr<std::string> detokenize(const std::vector<std::int32_t>& ids, bool skip_special_tokens) const override {
        std::string text;
        for (const std::int32_t id : ids) {
            if (id < 0 || id > 255) return Status::InvalidArgument("token id " + std::to_string(id) + " is outside");
            if (!(skip_special_tokens && id == 1)) text += static_cast<char>(id);
        }
        return text;
    }
    std::string served_model_name() const override { return "tiny"; }
    std::int64_t max_model_len() const override { return 4096; }
    bool ready() const override { return ready_; }
    nlohmann::json server_info() const override {
        return {{"model_path", "tiny"}, {"version", "fake"}};
    }
    nlohmann::json model_info() const override {
        return {{"model_path", "tiny"}, {"is_generation", true}, {"architectures", {"FakeForCausalLM"}}};
    }
    std::string metrics_text() const override {
        return "# HELP sglang:num_running_reqs Running requests.\n# TYPE sglang:num_running_reqs gauge\n"
               "sglang:num_running_reqs{model_name=\"tiny\"} " +
               std::to_string(n_active()) +
               "\n# TYPE sglang:step_seconds histogram\n"
               "sglang:step_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 0\n"
               "sglang:step_seconds_count{model_name=\"tiny\"} 0\n";
    }
    Status flush_cache() override { return Status::Ok(); }
    StatusOr<std::string> open_session(const OpenSessionParams& p) override {
        std::lock_guard lock(mu_);
        std::string id = p.session_id.value_or("fake-session-" + std::to_string(sessions_opened_));
        if (!open_sessions_.insert(id).second) return Status::InvalidArgument("Failed to open the session.");
        ++sessions_opened_;
        return id;
    }
    void close_session(const std::string& id) override {
        std::lock_guard lock(mu_);
        open_sessions_.erase(id);
    }
    std::set<std::string> open_sessions() const {
        std::lock_guard lock(mu_);
        return open_sessions_;
    }
    Status expert_record(ExpertRecordAction action) override {
        std::lock_guard lock(mu_);
        expert_record_actions.push_back(action);
        return expert_record_status;
    }
    std::vector<ExpertRecordAction> expert_record_actions;  // GUARDED_BY(mu_)
    Status expert_record_status = Status::Ok();
    void drain() override {
        ready_ = false;
        std::unique_lock lock(mu_);
        drain_cv_.wait(lock, [&] { return streams_.empty(); });
    }

 private:
    struct Stream {
        std::string id;
        EventCallback callback;
        std::int64_t n_tokens = 0;
        std::int64_t emitted = 0;
        std::int64_t stop_after = -1;
        std::int64_t prompt_tokens = 0;
        bool logprobs = false;
        int n_top = 0;
        bool abort = false;
        bool stalled = false;
        std::chrono::steady_clock::time_point next;
    };

    void loop() {
        std::unique_lock lock(mu_);
        while (!quit_) {
            const auto now = std::chrono::steady_clock::now();
            std::vector<std::pair<EventCallback, GenerationEvent>> due;
            if (hold_until_ > 0 && streams_.size() >= hold_until_) hold_until_ = 0;  // released once
            const bool hold = hold_until_ > 0;
            for (Stream& s : streams_) {
                if (s.abort) {
                    GenerationEvent e;
                    e.finish_reason = "abort";
                    e.usage = {s.prompt_tokens, s.emitted, 1};
                    due.emplace_back(s.callback, std::move(e));
                    s.n_tokens = -1;
                    continue;
                }
                if (hold || s.stalled || s.next > now) continue;
                GenerationEvent e = next_event(s);
                if (e.finish_reason) s.n_tokens = -1;
                s.next = now + interval_;
                due.emplace_back(s.callback, std::move(e));
            }
            std::erase_if(streams_, [](const Stream& s) { return s.n_tokens < 0; });
            if (!due.empty()) {
                lock.unlock();
                for (auto& [cb, e] : due) cb(std::move(e));
                lock.lock();
                drain_cv_.notify_all();
                continue;
            }
            cv_.wait_for(lock, std::min<std::chrono::microseconds>(interval_, std::chrono::milliseconds(1)));
        }
    }

    static GenerationEvent next_event(Stream& s) {
        GenerationEvent e;
        if (s.n_tokens == 0) {
            e.finish_reason = "length";
            e.usage = {s.prompt_tokens, 0, 1};
            return e;
        }
        const std::int64_t k = ++s.emitted;
        e.text = "t" + std::to_string(k) + " ";
        e.token_ids = {static_cast<std::int32_t>(100 + k)};
        if (s.logprobs) {
            TokenLogprob lp{.token = static_cast<std::int32_t>(100 + k), .text = e.text, .logprob = -0.5f};
            for (int i = 0; i < s.n_top; ++i) lp.top.emplace_back(i == 0 ? e.text : "alt" + std::to_string(i), -0.5f - i);
            e.logprobs.push_back(std::move(lp));
        }
        e.usage = {s.prompt_tokens, k, 1};
        if (k == s.stop_after) {
            e.finish_reason = "stop";
            e.matched_stop = "STOP";
        } else if (k >= s.n_tokens) {
            e.finish_reason = "length";
        }
        return e;
    }

    const std::chrono::microseconds interval_;
    std::atomic<bool> ready_{true};
    std::atomic<bool> stall_health_{false};
    std::atomic<std::size_t> hold_until_{0};
    mutable std::mutex mu_;
    std::vector<std::string> pauses_;  // GUARDED_BY(mu_)
    std::vector<WeightUpdate> updates_;               // GUARDED_BY(mu_)
    std::vector<std::string> memory_calls_;           // GUARDED_BY(mu_)
    std::vector<LoggingChange> logging_changes_;      // GUARDED_BY(mu_)
    void memory_call(const char* what, const MemoryRegions& r, std::function<void(Status)> done) {
        {
            std::lock_guard lock(mu_);
            memory_calls_.push_back(std::string(what) + (r.weights ? " weights" : "") +
                                    (r.kv_cache ? " kv_cache" : "") + (r.cuda_graph ? " cuda_graph" : ""));
        }
        done(memory_answer);
    }
    std::function<void(Status)> update_done_;         // GUARDED_BY(mu_)
    std::condition_variable cv_;
    std::condition_variable drain_cv_;
    bool quit_ = false;
    std::vector<Stream> streams_;
    std::vector<std::string> submitted_;
    std::vector<GenerationRequest> requests_;
    std::set<std::string> aborted_;
    std::set<std::string> open_sessions_;
    int sessions_opened_ = 0;
    std::size_t max_active_ = 0;
    std::thread thread_;  // last: starts after the members above exist
};

struct HttpResponse {
    int status = 0;                              // 0: connection failed / closed early
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;                            // de-chunked

    std::string header(const std::string& name) const {
        auto it = headers.find(name);
        return it == headers.end() ? "" : it->second;
    }
    nlohmann::ordered_json json() const { return nlohmann::ordered_json::parse(body, nullptr, false); }
    // SSE payloads ("data: X\n\n" → X).
    std::vector<std::string> events() const {
        std::vector<std::string> out;
        std::size_t pos = 0;
        while ((pos = body.find("data: ", pos)) != std::string::npos) {
            const std::size_t end = body.find("\n\n", pos);
            if (end == std::string::npos) break;
            out.push_back(body.substr(pos + 6, end - pos - 6));
            pos = end + 2;
        }
        return out;
    }
};

class TestClient {
 public:
    explicit TestClient(int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<std::uint16_t>(port));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        timeval tv{.tv_sec = 10, .tv_usec = 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) close();
    }
    ~TestClient() { close(); }
    TestClient(const TestClient&) = delete;
    TestClient& operator=(const TestClient&) = delete;

    bool connected() const { return fd_ >= 0; }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    bool send_raw(const std::string& bytes) {
        std::size_t off = 0;
        while (off < bytes.size()) {
            const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
            if (n <= 0) return false;
            off += static_cast<std::size_t>(n);
        }
        return true;
    }
    bool send_request(const std::string& method, const std::string& path, const std::string& body = "",
                      const std::string& extra_headers = "") {
        std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers;
        if (!body.empty() || method == "POST") {
            req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
        }
        return send_raw(req + "\r\n" + body);
    }
    HttpResponse request(const std::string& method, const std::string& path, const std::string& body = "",
                         const std::string& extra_headers = "") {
        if (!send_request(method, path, body, extra_headers)) return {};
        return read_response();
    }

    // Reads one full response (Content-Length, chunked, or until close).
    HttpResponse read_response() {
        HttpResponse r;
        std::size_t header_end;
        while ((header_end = buf_.find("\r\n\r\n")) == std::string::npos) {
            if (!fill()) return r;
        }
        const std::string head = buf_.substr(0, header_end);
        buf_.erase(0, header_end + 4);
        r.status = std::atoi(head.substr(head.find(' ') + 1, 3).c_str());
        std::size_t pos = head.find("\r\n");
        while (pos != std::string::npos && pos + 2 < head.size()) {
            const std::size_t next = head.find("\r\n", pos + 2);
            const std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
            const std::size_t colon = line.find(':');
            std::string name = line.substr(0, colon);
            std::transform(name.begin(), name.end(), name.begin(), ::tolower);
            std::string value = line.substr(colon + 1);
            value.erase(0, value.find_first_not_of(' '));
            r.headers[name] = value;
            pos = next;
        }
        if (r.status == 100) return read_response();
        if (r.header("transfer-encoding") == "chunked") {
            for (;;) {
                std::size_t eol;
                while ((eol = buf_.find("\r\n")) == std::string::npos) {
                    if (!fill()) return r;
                }
                const std::size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
                while (buf_.size() < eol + 2 + size + 2) {
                    if (!fill()) return r;
                }
                r.body += buf_.substr(eol + 2, size);
                buf_.erase(0, eol + 2 + size + 2);
                if (size == 0) return r;
            }
        }
        if (!r.header("content-length").empty()) {
            const std::size_t len = std::stoul(r.header("content-length"));
            while (buf_.size() < len) {
                if (!fill()) return r;
            }
            r.body = buf_.substr(0, len);
            buf_.erase(0, len);
            return r;
        }
        while (fill()) {
        }
        r.body = std::move(buf_);
        buf_.clear();
        return r;
    }

    // Reads raw bytes until `needle` has appeared `count` times (streaming, partially).
    bool read_until(const std::string& needle, int count) {
        for (;;) {
            int seen = 0;
            for (std::size_t p = buf_.find(needle); p != std::string::npos; p = buf_.find(needle, p + 1)) ++seen;
            if (seen >= count) return true;
            if (!fill()) return false;
        }
    }
    // True when the server closed the connection (EOF) within the receive timeout.
    bool closed_by_peer() {
        char c;
        return ::recv(fd_, &c, 1, 0) == 0;
    }

 private:
    bool fill() {
        char chunk[16384];
        const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
        if (n <= 0) return false;
        buf_.append(chunk, static_cast<std::size_t>(n));
        return true;
    }

    int fd_ = -1;
    std::string buf_;
};

}  // namespace tessera::server::testing
