#pragma once
// executor/pipeline_trace.h — a timeline of one rank's pipeline work (--enable-pipeline-trace):
// when it computed a step, posted a hand-off to the next stage, or waited for data, so that
// the bubbles between stages can be seen (Chrome trace / Perfetto "X" events, one process row
// per rank). Gaps between recorded spans are written as "idle". Timestamps are the host's
// monotonic clock, comparable between ranks of one host.
// Not thread-safe: one recorder per rank, used by that rank's model thread.

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::executor {

enum class SpanKind { kCompute, kSend, kRecv };

class PipelineTrace {
 public:
    // `rank`: the global rank (the trace's process id); `label`: e.g. "pp1 tp0".
    PipelineTrace(int rank, std::string label);

    static double now_us();

    // `step`: the step's index in launch order (-1 for work outside the pipeline, e.g.
    // profiling); `tokens`: new tokens of the step.
    void add(SpanKind kind, double begin_us, double end_us, std::int64_t step, std::int64_t tokens);

    // Records [construction, destruction) as one span.
    class Scope {
     public:
        Scope(PipelineTrace* trace, SpanKind kind, std::int64_t step, std::int64_t tokens)
            : trace_(trace), kind_(kind), step_(step), tokens_(tokens), begin_(trace ? now_us() : 0.0) {}
        ~Scope() {
            if (trace_ != nullptr) trace_->add(kind_, begin_, now_us(), step_, tokens_);
        }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

     private:
        PipelineTrace* trace_;
        SpanKind kind_;
        std::int64_t step_;
        std::int64_t tokens_;
        double begin_;
    };

    // This rank's events as a JSON array (process name, its spans, idle gaps).
    std::string events_json() const;
    std::size_t size() const { return spans_.size(); }

 private:
    struct Span {
        SpanKind kind;
        double begin_us;
        double end_us;
        std::int64_t step;
        std::int64_t tokens;
    };
    const int rank_;
    const std::string label_;
    std::vector<Span> spans_;
    bool truncated_ = false;
};

// One Chrome-trace document from the per-rank arrays of events_json().
std::string merge_trace_events(const std::vector<std::string>& per_rank_events);

}  // namespace tessera::executor
