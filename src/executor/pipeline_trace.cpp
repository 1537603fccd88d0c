#include "executor/pipeline_trace.h"

#include <chrono>

#include <nlohmann/json.hpp>

namespace tessera::executor {

namespace {

// A long-running server must not grow without bound: past this, spans are dropped (and the
// trace says so).
constexpr std::size_t kMaxSpans = 1'000'000;

const char* span_name(SpanKind kind) {
    switch (kind) {
        case SpanKind::kCompute: return "compute";
        case SpanKind::kSend: return "send";
        case SpanKind::kRecv: return "recv";
    }
    return "?";
}

nlohmann::json event(const char* name, int rank, double begin_us, double end_us, nlohmann::json args) {
    return {{"name", name}, {"cat", name}, {"ph", "X"}, {"pid", rank}, {"tid", 0},
            {"ts", begin_us},  {"dur", end_us - begin_us}, {"args", std::move(args)}};
}

}  // namespace

PipelineTrace::PipelineTrace(int rank, std::string label) : rank_(rank), label_(std::move(label)) {}

double PipelineTrace::now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void PipelineTrace::add(SpanKind kind, double begin_us, double end_us, std::int64_t step, std::int64_t tokens) {
    if (spans_.size() >= kMaxSpans) {
        truncated_ = true;
        return;
    }
    spans_.push_back({kind, begin_us, end_us, step, tokens});
}

std::string PipelineTrace::events_json() const {
    nlohmann::json events = nlohmann::json::array();
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", label_}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"sort_index", rank_}}}});
    double last_end = spans_.empty() ? 0.0 : spans_.front().begin_us;
    for (const Span& s : spans_) {
        if (s.begin_us > last_end) events.push_back(event("idle", rank_, last_end, s.begin_us, nlohmann::json::object()));
        events.push_back(event(span_name(s.kind), rank_, s.begin_us, s.end_us, {{"step", s.step}, {"tokens", s.tokens}}));
        last_end = std::max(last_end, s.end_us);
    }
    if (truncated_)
        events.push_back({{"name", "trace truncated"}, {"ph", "i"}, {"pid", rank_}, {"tid", 0}, {"ts", last_end}, {"s", "p"}});
    return events.dump();
}

std::string merge_trace_events(const std::vector<std::string>& per_rank_events) {
    nlohmann::json all = nlohmann::json::array();
    for (const std::string& text : per_rank_events) {
        nlohmann::json events = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (!events.is_array()) continue;
        for (auto& e : events) all.push_back(std::move(e));
    }
    return nlohmann::json{{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace tessera::executor
