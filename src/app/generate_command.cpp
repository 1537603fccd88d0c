#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/chat_format_loader.h"
#include "app/commands.h"
#include "app/model_rank.h"
#include "app/rank_runtime.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "base/logging.h"
#include "base/process_memory.h"
#include "base/thread_pool.h"
#include "executor/generator.h"
#include "executor/dp_attention_runner.h"
#include "executor/pipelined_model.h"
#include "kernels/isa.h"
#include "models/model.h"
#include "scheduler/scheduler.h"

namespace tessera::app {

namespace {

StatusOr<std::vector<std::int32_t>> parse_ids(const std::string& text) {
    std::vector<std::int32_t> ids;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        try {
            std::size_t used = 0;
            const long v = std::stol(item, &used);
            if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
            ids.push_back(static_cast<std::int32_t>(v));
        } catch (const std::exception&) {
            return Status::InvalidArgument("--prompt-ids: '" + item +
                                           "' is not a token id; expected e.g. --prompt-ids 1,2,3");
        }
    }
    if (ids.empty()) return Status::InvalidArgument("--prompt-ids is empty; expected e.g. 1,2,3");
    return ids;
}

// NumPy .npy v1.0: magic, header dict padded to 64 bytes, raw little-endian f32 rows.
Status write_npy(const std::string& path, const std::vector<float>& data, std::int64_t rows,
                 std::int64_t cols) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                         std::to_string(rows) + ", " + std::to_string(cols) + "), }";
    const std::size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header.push_back('\n');
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return Status::Internal(path + ": cannot open for writing");
    const char magic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    out.write(magic, 8);
    const auto len = static_cast<std::uint16_t>(header.size());
    out.write(reinterpret_cast<const char*>(&len), 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
    if (!out) return Status::Internal(path + ": write failed");
    return Status::Ok();
}

// Text → ids as SGLang does: plain text with the tokenizer's special tokens (e.g. Llama 3's
// BOS); with --chat the text is one user message rendered as a server renders chat requests.
StatusOr<std::vector<std::int32_t>> encode_prompt(const server::ServerArgs& args, tokenizer::Tokenizer& tok,
                                                  const std::string& text, bool chat) {
    if (!chat) return tok.encode(text, /*add_special_tokens=*/true);
    TSR_ASSIGN_OR_RETURN(const tokenizer::ChatFormat format, load_chat_format(args, tok));
    if (!format.has_template())
        return Status::InvalidArgument("--chat: the model's tokenizer_config.json has no chat_template; give "
                                       "--chat-template");
    const nlohmann::ordered_json request = {{"messages", {{{"role", "user"}, {"content", text}}}}};
    TSR_ASSIGN_OR_RETURN(std::string rendered, format.render(request));
    return tok.encode(rendered, format.encode_with_special_tokens());
}

int fail(const Status& s) {
    TSR_LOG(ERROR, "{}", s.message());
    return 1;
}

struct GenerateReport {
    std::vector<std::int32_t> output_ids;
    std::string finish_reason;
    double ttft_s = 0.0;    // request start to first token (the whole prefill)
    double decode_s = 0.0;  // first token to the last
    double load_s = 0.0;
    int threads = 1;
    std::string dtype;
    double weight_mb = 0.0;
    std::vector<std::int64_t> prefill_chunks;  // tokens of each prefill chunk, in order
    bool dynamic_chunking = false;
    std::int64_t chunked_prefill_size = -1;
    layers::MoeTraffic moe;  // rank 0's MoE layers (zero for dense models)
};

void print_report(const GenerateCommandOptions& o, const std::vector<std::int32_t>& prompt,
                  const tokenizer::Tokenizer* tok, const GenerateReport& r) {
    const auto n_prompt = static_cast<double>(prompt.size());
    const auto n_out = static_cast<double>(r.output_ids.size());
    const double prefill_tps = r.ttft_s > 0 ? n_prompt / r.ttft_s : 0.0;
    const double decode_tps = n_out > 1 && r.decode_s > 0 ? (n_out - 1) / r.decode_s : 0.0;
    const std::string text = tok ? tok->decode(r.output_ids, /*skip_special_tokens=*/true) : "";
    if (o.json) {
        nlohmann::json j = {{"output_ids", r.output_ids},
                            {"finish_reason", r.finish_reason},
                            {"prompt_tokens", prompt.size()},
                            {"completion_tokens", r.output_ids.size()},
                            {"ttft_s", r.ttft_s},
                            {"prefill_s", r.ttft_s},
                            {"decode_s", r.decode_s},
                            {"prefill_tokens_per_s", prefill_tps},
                            {"decode_tokens_per_s", decode_tps},
                            {"load_s", r.load_s},
                            {"threads", r.threads},
                            {"dtype", r.dtype},
                            {"kernels", kernels::isa_name(kernels::active_isa())},
                            {"tp_size", o.server.tp_size},
                            {"pp_size", o.server.pp_size},
                            {"chunked_prefill_size", r.chunked_prefill_size},
                            {"dynamic_chunking", r.dynamic_chunking},
                            {"prefill_chunks", r.prefill_chunks},
                            {"weight_mb_per_rank", r.weight_mb},
                            {"rss_mb", static_cast<double>(process_memory().resident_bytes) / (1 << 20)},
                            {"peak_rss_mb", static_cast<double>(process_memory().peak_resident_bytes) / (1 << 20)}};
        if (r.moe.tokens > 0) {
            // Per token and MoE layer this rank sent: dispatch records and combine rows
            // (all_to_all), owned output rows (all_gather; none under DP-attention, where a
            // group's tokens stay on its ranks), and the all-reduced MoE output.
            const auto per = [&](std::int64_t bytes) { return static_cast<double>(bytes) / r.moe.tokens; };
            j["ep_size"] = o.server.ep_size;
            j["moe_a2a_backend"] = o.server.moe_a2a_backend;
            j["moe_bytes_per_token_layer"] = {{"dispatch", per(r.moe.dispatch_bytes)},
                                              {"combine", per(r.moe.combine_bytes)},
                                              {"all_gather", per(r.moe.gather_bytes)},
                                              {"all_reduce_payload", per(r.moe.reduce_bytes)}};
        }
        if (tok) j["text"] = text;
        std::printf("%s\n", j.dump().c_str());
        return;
    }
    std::string ids;
    for (auto t : r.output_ids) {
        if (!ids.empty()) ids += ',';
        ids += std::to_string(t);
    }
    if (tok) std::printf("text: %s\n", text.c_str());
    std::printf("output_ids: %s\n", ids.c_str());
    std::printf("finish_reason: %s\n", r.finish_reason.c_str());
    std::printf("prompt: %zu tokens, prefill %.1f tok/s (ttft %.3f s)\n", prompt.size(), prefill_tps, r.ttft_s);
    std::printf("decode: %zu tokens, %.1f tok/s\n", r.output_ids.size(), decode_tps);
}

// --logits-out: the model run directly on every rank (TP, EP, and PP stage by stage), every
// position's logits kept; the scheduler never materialises them.
int run_generate_direct(const GenerateCommandOptions& o, const std::vector<std::int32_t>& prompt,
                        const tokenizer::Tokenizer* tok, std::optional<int> internal_rank,
                        const std::string& internal_store) {
    auto runtime = init_rank_runtime(o.server, internal_rank, internal_store);
    if (!runtime.ok()) return fail(runtime.status());
    auto load = model_load_options(o.server, *runtime);
    if (!load.ok()) return fail(load.status());
    auto model = models::load_model(*load);
    if (!model.ok()) return fail(model.status());
    ThreadPool pool(runtime->threads);
    std::unique_ptr<models::Model> pipelined, every_group;
    models::Model* whole = model->get();
    if (runtime->pp_group) whole = (pipelined = std::make_unique<executor::PipelinedModel>(*whole, *runtime->pp_group)).get();
    if (runtime->layout.attn_dp_size() > 1)
        whole = (every_group = std::make_unique<executor::EveryGroupModel>(*whole, runtime->layout.attn_dp_size())).get();
    executor::GenerateOptions gen;
    gen.max_new_tokens = o.max_new_tokens;
    gen.sampling = {o.temperature, o.top_k, o.top_p, o.min_p, o.seed};
    gen.ignore_eos = o.ignore_eos;
    gen.capture_logits = true;
    auto result = executor::generate(*whole, prompt, gen, &pool);
    if (!result.ok()) return fail(result.status());
    // Every rank sampled the same tokens (every DP-attention group ran the prompt); one reports.
    if (runtime->coords.global_rank != 0) return 0;
    const std::int64_t vocab = (*model)->config().vocab_size;
    const auto rows = static_cast<std::int64_t>(result->logits.size()) / vocab;
    if (Status s = write_npy(o.logits_out, result->logits, rows, vocab); !s.ok()) return fail(s);
    GenerateReport report;
    report.output_ids = result->output_ids;
    report.finish_reason = result->finish_reason;
    report.ttft_s = result->ttft_s;
    report.decode_s = result->decode_s;
    report.threads = runtime->threads;
    report.dtype = dtype_name((*model)->compute_dtype());
    report.weight_mb = (*model)->weight_bytes() / 1e6;
    report.moe = (*model)->moe_traffic();
    print_report(o, prompt, tok, report);
    return 0;
}

// Notes the tokens of every prefill chunk the scheduler hands the runner, for the report.
class ChunkRecorder final : public executor::BatchRunner {
 public:
    ChunkRecorder(executor::BatchRunner& inner, std::int64_t prompt_len) : inner_(inner), prompt_len_(prompt_len) {}
    StatusOr<std::vector<executor::SampledToken>> run(const executor::ForwardBatch& batch) override {
        note(batch);
        return inner_.run(batch);
    }
    Status launch(const executor::ForwardBatch& batch) override {
        note(batch);
        return inner_.launch(batch);
    }
    StatusOr<std::vector<executor::SampledToken>> collect() override { return inner_.collect(); }
    bool lockstep() const override { return inner_.lockstep(); }
    std::int64_t rounds() const override { return inner_.rounds(); }
    StatusOr<bool> idle_step() override { return inner_.idle_step(); }
    const std::vector<std::int64_t>& chunks() const { return chunks_; }

 private:
    void note(const executor::ForwardBatch& batch) {
        for (const auto& seq : batch.seqs)
            if (seq.start_pos < prompt_len_) chunks_.push_back(static_cast<std::int64_t>(seq.tokens.size()));
    }
    executor::BatchRunner& inner_;
    const std::int64_t prompt_len_;
    std::vector<std::int64_t> chunks_;
};

// The edge checks of a one-shot request, with messages that name the limit.
Status check_request(const GenerateCommandOptions& o, const std::vector<std::int32_t>& prompt,
                     const ModelRank& rank) {
    const std::int64_t vocab = rank.model->config().vocab_size;
    for (std::int32_t id : prompt) {
        if (id < 0 || id >= vocab)
            return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                           std::to_string(vocab) + ")");
    }
    if (o.max_new_tokens < 1) return Status::InvalidArgument("--max-new-tokens must be at least 1");
    const auto n = static_cast<std::int64_t>(prompt.size());
    if (n + o.max_new_tokens > rank.context_len) {
        return Status::InvalidArgument("prompt (" + std::to_string(n) + " tokens) + max_new_tokens (" +
                                       std::to_string(o.max_new_tokens) + ") exceeds the model's context length of " +
                                       std::to_string(rank.context_len) + " tokens");
    }
    if (n + o.max_new_tokens > rank.scheduler.max_total_num_tokens) {
        return Status::InvalidArgument("prompt (" + std::to_string(n) + " tokens) + max_new_tokens (" +
                                       std::to_string(o.max_new_tokens) + ") does not fit the KV pool of " +
                                       std::to_string(rank.scheduler.max_total_num_tokens) +
                                       " tokens; raise --mem-fraction-static or --max-total-tokens");
    }
    return Status::Ok();
}

}  // namespace

int run_generate(const GenerateCommandOptions& o, std::optional<int> internal_rank,
                 const std::string& internal_store) {
    if (o.prompt.empty() == o.prompt_ids.empty())
        return fail(Status::InvalidArgument("give the prompt either as text (--prompt \"...\") or as token ids "
                                            "(--prompt-ids 1,2,3)"));
    if (o.chat && o.prompt.empty())
        return fail(Status::InvalidArgument("--chat renders --prompt as a user message; give --prompt TEXT"));
    std::unique_ptr<tokenizer::Tokenizer> tok;
    StatusOr<std::vector<std::int32_t>> prompt = Status::InvalidArgument("no prompt");
    if (!o.prompt.empty()) {
        auto loaded = tokenizer::Tokenizer::load(o.server.tokenizer_path);
        if (!loaded.ok()) return fail(loaded.status());
        tok = std::move(loaded).value();
        prompt = encode_prompt(o.server, *tok, o.prompt, o.chat);
    } else {
        prompt = parse_ids(o.prompt_ids);
    }
    if (!prompt.ok()) return fail(prompt.status());
    if (!o.logits_out.empty()) return run_generate_direct(o, *prompt, tok.get(), internal_rank, internal_store);

    auto setup = setup_model_rank(o.server, internal_rank, internal_store);
    if (!setup.ok()) return fail(setup.status());
    ModelRank& rank = **setup;
    if (!rank.leader()) {
        Status s = run_follower(rank);
        return s.ok() ? 0 : fail(s);
    }
    // A bad request still has to release the other ranks, which wait for steps or a stop.
    const Status request_ok = check_request(o, *prompt, rank);
    server::ServerArgs args = o.server;
    if (!request_ok.ok()) args.enable_dynamic_chunking = false;  // no profile for a request we refuse
    if (rank.runtime.scheduler_index() != 0) {
        // Another DP-attention group's leader (it sees the same prompt, so it refuses or
        // profiles as group 0 does): the prompt runs in group 0; this group joins its steps
        // (idle) until it is done.
        auto leader = LeaderRunner::create(rank, args);
        if (!leader.ok()) return fail(leader.status());
        Status s = (*leader)->stop();
        return s.ok() ? 0 : fail(s);
    }
    auto leader = LeaderRunner::create(rank, args);
    if (!leader.ok()) return fail(leader.status());
    if (!request_ok.ok()) {
        (void)(*leader)->stop();
        return fail(request_ok);
    }
    log_startup_line(rank);

    scheduler::Req req;
    req.rid = "generate";
    req.input_ids = *prompt;
    req.max_new_tokens = o.max_new_tokens;
    req.eos_token_ids = rank.model->config().eos_token_ids;
    if (tok) {
        for (std::int32_t id : tok->eos_token_ids())
            if (std::find(req.eos_token_ids.begin(), req.eos_token_ids.end(), id) == req.eos_token_ids.end())
                req.eos_token_ids.push_back(id);
    }
    req.ignore_eos = o.ignore_eos;
    req.sampling.params = {o.temperature, o.top_k, o.top_p, o.min_p, o.seed};
    GenerateReport report;
    std::string error;
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> t_first;
    req.sink = [&](const scheduler::ReqEvent& ev) {
        if (ev.token) {
            if (!t_first) t_first = std::chrono::steady_clock::now();
            report.output_ids.push_back(ev.token->token);
        }
        if (ev.finished) {
            report.finish_reason = std::string(scheduler::finish_reason_name(ev.finish_reason));
            error = std::string(ev.error);
        }
    };
    ChunkRecorder recorder((*leader)->runner(), static_cast<std::int64_t>(prompt->size()));
    scheduler::Scheduler sched(rank.scheduler, recorder);
    if (Status s = sched.add_request(std::move(req)); !s.ok()) {
        (void)(*leader)->stop();
        return fail(s);
    }
    while (!sched.idle()) {
        const std::int64_t rounds = recorder.rounds();
        sched.step();
        if (recorder.lockstep() && recorder.rounds() == rounds) {
            if (Status s = recorder.idle_step().status(); !s.ok()) return fail(s);
        }
    }
    const auto t_end = std::chrono::steady_clock::now();
    if (Status s = (*leader)->stop(); !s.ok()) TSR_LOG(WARN, "{}", s.message());
    if (report.finish_reason == "abort") return fail(Status::Internal("generation failed: " + error));

    const auto since = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    report.ttft_s = t_first ? since(t0, *t_first) : since(t0, t_end);
    report.decode_s = t_first ? since(*t_first, t_end) : 0.0;
    report.threads = rank.runtime.threads;
    report.dtype = dtype_name(rank.model->compute_dtype());
    report.weight_mb = rank.model->weight_bytes() / 1e6;
    report.moe = rank.model->moe_traffic();
    report.load_s = rank.load_s;
    report.prefill_chunks = recorder.chunks();
    report.dynamic_chunking = rank.scheduler.dynamic_chunking.has_value();
    report.chunked_prefill_size = rank.scheduler.chunked_prefill_size;
    print_report(o, *prompt, tok.get(), report);
    return 0;
}

}  // namespace tessera::app
