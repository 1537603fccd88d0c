#include "executor/step_codec.h"

#include <cstring>
#include <string>

namespace tessera::executor {

namespace {

class Writer {
 public:
    void i64(std::int64_t v) { append(&v, sizeof(v)); }
    void f32(float v) { append(&v, sizeof(v)); }
    void u64(std::uint64_t v) { append(&v, sizeof(v)); }
    // A vector of 32-bit values (token ids, slots, a token mask's words): its length, then the values.
    template <typename T>
    void words(const std::vector<T>& v) {
        static_assert(sizeof(T) == 4);
        i64(static_cast<std::int64_t>(v.size()));
        append(v.data(), v.size() * sizeof(T));
    }
    void i32s(const std::vector<std::int32_t>& v) { words(v); }
    void u32s(const std::vector<std::uint32_t>& v) { words(v); }
    void f32s(const std::vector<float>& v) { words(v); }
    // (token id, value) pairs (logit_bias, top log-probabilities): their count, then each id
    // as an i64 and its value.
    void id_values(const std::vector<std::pair<std::int32_t, float>>& v) {
        i64(static_cast<std::int64_t>(v.size()));
        for (const auto& [id, value] : v) {
            i64(id);
            f32(value);
        }
    }
    void text(const std::string& s) {
        i64(static_cast<std::int64_t>(s.size()));
        append(s.data(), s.size());
    }
    std::vector<std::uint8_t> take() { return std::move(bytes_); }

 private:
    void append(const void* p, std::size_t n) {
        const auto* b = static_cast<const std::uint8_t*>(p);
        bytes_.insert(bytes_.end(), b, b + n);
    }
    std::vector<std::uint8_t> bytes_;
};

class Reader {
 public:
    explicit Reader(const std::vector<std::uint8_t>& b) : bytes_(b) {}
    bool i64(std::int64_t* v) { return take(v, sizeof(*v)); }
    bool f32(float* v) { return take(v, sizeof(*v)); }
    bool u64(std::uint64_t* v) { return take(v, sizeof(*v)); }
    // A boolean is an i64 of 0 or 1; anything else is corruption, not "true".
    bool flag(bool* v) {
        std::int64_t x = 0;
        if (!i64(&x) || (x != 0 && x != 1)) return false;
        *v = x == 1;
        return true;
    }
    bool i32(int* v) {
        std::int64_t x = 0;
        if (!i64(&x) || x < INT32_MIN || x > INT32_MAX) return false;
        *v = static_cast<int>(x);
        return true;
    }
    template <typename T>
    bool words(std::vector<T>* v) {
        static_assert(sizeof(T) == 4);
        std::int64_t n = 0;
        if (!i64(&n) || n < 0 || static_cast<std::size_t>(n) > (bytes_.size() - pos_) / sizeof(T)) return false;
        v->resize(static_cast<std::size_t>(n));
        return take(v->data(), v->size() * sizeof(T));
    }
    bool i32s(std::vector<std::int32_t>* v) { return words(v); }
    bool u32s(std::vector<std::uint32_t>* v) { return words(v); }
    bool f32s(std::vector<float>* v) { return words(v); }
    bool id_values(std::vector<std::pair<std::int32_t, float>>* v) {
        std::int64_t n = 0;
        if (!i64(&n) || n < 0 || static_cast<std::size_t>(n) > remaining() / (sizeof(std::int64_t) + sizeof(float)))
            return false;
        v->resize(static_cast<std::size_t>(n));
        for (auto& [id, value] : *v)
            if (!i32(&id) || !f32(&value)) return false;
        return true;
    }
    bool text(std::string* s) {
        std::int64_t n = 0;
        if (!i64(&n) || n < 0 || static_cast<std::size_t>(n) > remaining()) return false;
        s->resize(static_cast<std::size_t>(n));
        return take(s->data(), s->size());
    }
    bool done() const { return pos_ == bytes_.size(); }
    std::size_t remaining() const { return bytes_.size() - pos_; }

 private:
    bool take(void* out, std::size_t n) {
        if (bytes_.size() - pos_ < n) return false;
        if (n == 0) return true;  // an empty vector's data() may be null: no memcpy (UB even for 0 bytes)
        std::memcpy(out, bytes_.data() + pos_, n);
        pos_ += n;
        return true;
    }
    const std::vector<std::uint8_t>& bytes_;
    std::size_t pos_ = 0;
};

constexpr std::int64_t kMaxCount = 1 << 20;

}  // namespace

std::vector<std::uint8_t> encode_step(const ForwardBatch& batch, std::int64_t flags) {
    Writer w;
    w.i64(flags);
    w.i64(static_cast<std::int64_t>(batch.expert_record));
    w.i64(batch.record_routed_experts ? 1 : 0);
    w.i64(batch.load_weights ? 1 : 0);
    if (batch.load_weights) {
        w.text(batch.load_weights->model_path);
        w.text(batch.load_weights->load_format);
        w.i64(static_cast<std::int64_t>(batch.load_weights->phase));
        w.i64(batch.load_weights->earlier_stages_loaded ? 1 : 0);
    }
    w.i64((batch.release_memory.weights ? 1 : 0) | (batch.release_memory.kv_cache ? 2 : 0));
    w.i64(static_cast<std::int64_t>(batch.seqs.size()));
    for (const auto& s : batch.seqs) {
        w.i32s(s.tokens);
        w.i64(s.start_pos);
        w.i32s(s.slots);
        w.i64(s.need_token ? 1 : 0);
        w.i64(s.input_logprob_row);
        w.i32s(s.input_logprob_targets);
        w.i64(s.input_top_logprobs);
        w.i32s(s.logprob_token_ids);
        if ((flags & kStepWithSampling) == 0 || !s.need_token) continue;
        const SequenceSampling& p = s.sampling;
        w.f32(p.params.temperature);
        w.i64(p.params.top_k);
        w.f32(p.params.top_p);
        w.f32(p.params.min_p);
        w.u64(p.params.seed);
        w.f32(p.frequency_penalty);
        w.f32(p.presence_penalty);
        w.i64(p.top_logprobs);
        w.i64(p.logprobs ? 1 : 0);
        w.id_values(p.logit_bias);
        w.i64(static_cast<std::int64_t>(p.hidden_states));
        w.i64(p.allowed_tokens ? 1 : 0);
        if (p.allowed_tokens) w.u32s(*p.allowed_tokens);
        w.i32s(s.output_ids);
    }
    return w.take();
}

StatusOr<ForwardBatch> decode_step(const std::vector<std::uint8_t>& bytes, std::int64_t* flags_out) {
    Reader r(bytes);
    ForwardBatch batch;
    std::int64_t flags = 0;
    std::int64_t n = 0, record = 0;
    bool load_weights = false;
    if (!r.i64(&flags) || !r.i64(&record) || !r.flag(&batch.record_routed_experts) || !r.flag(&load_weights) ||
        record < 0 || record > 3)
        return Status::DataLoss("corrupt step header");
    if (load_weights) {
        models::WeightsSource& source = batch.load_weights.emplace();
        std::int64_t phase = 0;
        if (!r.text(&source.model_path) || !r.text(&source.load_format) || !r.i64(&phase) || phase < 0 ||
            phase > 2 || !r.flag(&source.earlier_stages_loaded))
            return Status::DataLoss("corrupt step header: bad weight update");
        source.phase = static_cast<models::WeightsPhase>(phase);
    }
    std::int64_t release = 0;
    if (!r.i64(&release) || release < 0 || release > 3) return Status::DataLoss("corrupt step header: bad release");
    batch.release_memory = {.weights = (release & 1) != 0, .kv_cache = (release & 2) != 0};
    if (!r.i64(&n) || n < 0 || n > kMaxCount) return Status::DataLoss("corrupt step header");
    batch.expert_record = static_cast<eplb::ExpertRecordCommand>(record);
    // Every sequence takes at least eight i64 fields: a count the bytes cannot hold is corrupt
    // (and must not allocate a million sequences first).
    if (static_cast<std::size_t>(n) > r.remaining() / (8 * sizeof(std::int64_t)))
        return Status::DataLoss("corrupt step header: " + std::to_string(n) + " sequences in " +
                                std::to_string(r.remaining()) + " bytes");
    batch.seqs.resize(static_cast<std::size_t>(n));
    for (auto& s : batch.seqs) {
        if (!r.i32s(&s.tokens) || !r.i64(&s.start_pos) || !r.i32s(&s.slots) || !r.flag(&s.need_token) ||
            !r.i64(&s.input_logprob_row) || !r.i32s(&s.input_logprob_targets) || !r.i32(&s.input_top_logprobs) ||
            !r.i32s(&s.logprob_token_ids) || s.input_logprob_row < 0 || s.input_top_logprobs < 0)
            return Status::DataLoss("corrupt step");
        if ((flags & kStepWithSampling) == 0 || !s.need_token) continue;
        SequenceSampling& p = s.sampling;
        if (!r.f32(&p.params.temperature) || !r.i32(&p.params.top_k) || !r.f32(&p.params.top_p) ||
            !r.f32(&p.params.min_p) || !r.u64(&p.params.seed) || !r.f32(&p.frequency_penalty) ||
            !r.f32(&p.presence_penalty) || !r.i32(&p.top_logprobs) || !r.flag(&p.logprobs))
            return Status::DataLoss("corrupt sampling parameters in a step");
        if (!r.id_values(&p.logit_bias)) return Status::DataLoss("corrupt logit_bias in a step");
        std::int64_t capture = 0;
        if (!r.i64(&capture) || capture < 0 || capture > static_cast<std::int64_t>(HiddenCapture::kFirstPass))
            return Status::DataLoss("corrupt hidden-state capture in a step");
        p.hidden_states = static_cast<HiddenCapture>(capture);
        bool constrained = false;
        if (!r.flag(&constrained)) return Status::DataLoss("corrupt allowed-token flag in a step");
        if (constrained) {
            auto allowed = std::make_shared<std::vector<std::uint32_t>>();
            if (!r.u32s(allowed.get())) return Status::DataLoss("corrupt allowed tokens in a step");
            p.allowed_tokens = std::move(allowed);
        }
        if (!r.i32s(&s.output_ids)) return Status::DataLoss("corrupt sampling parameters in a step");
    }
    if (!r.done()) return Status::DataLoss("trailing bytes in a step");
    if (flags_out != nullptr) *flags_out = flags;
    return batch;
}

std::vector<std::uint8_t> encode_results(const std::vector<SampledToken>& tokens) {
    Writer w;
    w.i64(static_cast<std::int64_t>(tokens.size()));
    for (const auto& t : tokens) {
        w.i64(t.token);
        w.f32(t.logprob);
        w.id_values(t.top_logprobs);
        w.f32s(t.embedding);
        w.i64(t.hidden_rows);
        w.f32s(t.hidden_states);
        w.i32s(t.routed_experts);
        w.f32s(t.input_logprobs);
        w.id_values(t.input_top_logprobs);
        w.f32s(t.token_ids_logprobs);
        w.f32s(t.input_token_ids_logprobs);
    }
    return w.take();
}

StatusOr<std::vector<SampledToken>> decode_results(const std::vector<std::uint8_t>& bytes) {
    Reader r(bytes);
    std::int64_t n = 0;
    if (!r.i64(&n) || n < 0 || n > kMaxCount) return Status::DataLoss("corrupt sampled-token header");
    std::vector<SampledToken> out(static_cast<std::size_t>(n));
    for (auto& t : out) {
        if (!r.i32(&t.token) || !r.f32(&t.logprob)) return Status::DataLoss("corrupt sampled token");
        if (!r.id_values(&t.top_logprobs)) return Status::DataLoss("corrupt top log-probabilities");
        if (!r.f32s(&t.embedding)) return Status::DataLoss("corrupt embedding");
        if (!r.i64(&t.hidden_rows) || !r.f32s(&t.hidden_states) || t.hidden_rows < 0)
            return Status::DataLoss("corrupt hidden states");
        const auto values = static_cast<std::int64_t>(t.hidden_states.size());
        if (t.hidden_rows == 0 ? values != 0 : values % t.hidden_rows != 0)
            return Status::DataLoss("corrupt hidden states size");
        if (!r.i32s(&t.routed_experts)) return Status::DataLoss("corrupt routed experts");
        if (!r.f32s(&t.input_logprobs)) return Status::DataLoss("corrupt prompt log-probabilities");
        if (!r.id_values(&t.input_top_logprobs)) return Status::DataLoss("corrupt prompt top log-probabilities");
        if (!r.f32s(&t.token_ids_logprobs) || !r.f32s(&t.input_token_ids_logprobs))
            return Status::DataLoss("corrupt token_ids_logprob values");
    }
    if (!r.done()) return Status::DataLoss("trailing bytes in sampled tokens");
    return out;
}

std::vector<std::uint8_t> encode_dp_step(const layers::DpAttentionStep& step, const std::vector<std::uint8_t>& bytes) {
    Writer w;
    w.i64(static_cast<std::int64_t>(step.num_tokens.size()));
    for (std::size_t g = 0; g < step.num_tokens.size(); ++g) {
        w.i64(step.num_tokens[g]);
        w.i64(step.num_logit_rows[g]);
    }
    w.i64(step.any_extend ? 1 : 0);
    std::vector<std::uint8_t> out = w.take();
    out.insert(out.end(), bytes.begin(), bytes.end());
    return out;
}

StatusOr<layers::DpAttentionStep> decode_dp_step(const std::vector<std::uint8_t>& message,
                                                 std::vector<std::uint8_t>* bytes) {
    Reader r(message);
    std::int64_t groups = 0;
    // Two counts per group follow: a claim the bytes cannot hold is refused before allocating.
    if (!r.i64(&groups) || groups < 1 || groups > kMaxCount ||
        static_cast<std::size_t>(groups) > r.remaining() / (2 * sizeof(std::int64_t)))
        return Status::DataLoss("corrupt DP-attention step: bad group count");
    layers::DpAttentionStep step;
    step.num_tokens.resize(static_cast<std::size_t>(groups));
    step.num_logit_rows.resize(static_cast<std::size_t>(groups));
    for (std::int64_t g = 0; g < groups; ++g) {
        if (!r.i64(&step.num_tokens[g]) || !r.i64(&step.num_logit_rows[g]) || step.num_tokens[g] < 0 ||
            step.num_logit_rows[g] < 0)
            return Status::DataLoss("corrupt DP-attention step: bad counts");
    }
    if (!r.flag(&step.any_extend)) return Status::DataLoss("corrupt DP-attention step: bad prefill flag");
    bytes->assign(message.end() - static_cast<std::ptrdiff_t>(r.remaining()), message.end());
    return step;
}

std::int64_t logit_rows(const ForwardSequence& seq) {
    return static_cast<std::int64_t>(seq.input_logprob_targets.size()) + (seq.need_token ? 1 : 0);
}

std::int64_t hidden_rows(const ForwardSequence& seq) {
    if (!seq.need_token || seq.tokens.empty()) return 0;
    switch (seq.sampling.hidden_states) {
        case HiddenCapture::kNone: return 0;
        case HiddenCapture::kLast: return 1;
        case HiddenCapture::kFirstPass:
            return seq.output_ids.empty() ? static_cast<std::int64_t>(seq.tokens.size()) : 1;
    }
    return 0;
}

StatusOr<models::BatchInput> batch_input(const ForwardBatch& batch, std::vector<std::int32_t>* tokens) {
    models::BatchInput input;
    tokens->clear();
    tokens->reserve(static_cast<std::size_t>(batch.total_new_tokens()));
    for (const auto& seq : batch.seqs) {
        const auto n_new = static_cast<std::int64_t>(seq.tokens.size());
        if (static_cast<std::int64_t>(seq.slots.size()) < seq.start_pos + n_new) {
            return Status::Internal("request " + seq.rid + ": " + std::to_string(seq.slots.size()) +
                                    " KV slots for " + std::to_string(seq.start_pos + n_new) + " positions");
        }
        tokens->insert(tokens->end(), seq.tokens.begin(), seq.tokens.end());
        const auto targets = static_cast<std::int64_t>(seq.input_logprob_targets.size());
        if (targets > 0 && seq.input_logprob_row + targets + (seq.need_token ? 1 : 0) != n_new) {
            return Status::Internal("request " + seq.rid + ": prompt log-probabilities of " + std::to_string(targets) +
                                    " rows from row " + std::to_string(seq.input_logprob_row) + " in a step of " +
                                    std::to_string(n_new) + " tokens");
        }
        const models::LogitsMode logits = targets > 0       ? models::LogitsMode::kAll
                                          : seq.need_token ? models::LogitsMode::kLast
                                                           : models::LogitsMode::kNone;
        input.seqs.push_back({n_new, seq.start_pos, seq.slots.data(), logits, hidden_rows(seq), seq.input_logprob_row});
    }
    input.tokens = *tokens;
    input.expert_record = batch.expert_record;
    input.load_weights = batch.load_weights ? &*batch.load_weights : nullptr;
    input.release_memory = batch.release_memory;
    return input;
}

}  // namespace tessera::executor
