#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/rank_runtime.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "executor/generator.h"
#include "kernels/isa.h"
#include "models/model.h"

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
// BOS); with --chat the text is one user message rendered by the chat template, which
// carries its own special tokens.
StatusOr<std::vector<std::int32_t>> encode_prompt(const tokenizer::Tokenizer& tok, const std::string& text,
                                                  bool chat) {
    if (!chat) return tok.encode(text, /*add_special_tokens=*/true);
    if (tok.chat_template().empty())
        return Status::InvalidArgument("--chat: the model's tokenizer_config.json has no chat_template");
    TSR_ASSIGN_OR_RETURN(auto tmpl, tokenizer::ChatTemplate::compile(tok.chat_template(), tok.bos_token(),
                                                                     tok.eos_token()));
    nlohmann::json request = {{"messages", {{{"role", "user"}, {"content", text}}}},
                              {"add_generation_prompt", true}};
    TSR_ASSIGN_OR_RETURN(std::string rendered, tmpl.render(request));
    return tok.encode(rendered, /*add_special_tokens=*/false);
}

// Resident memory of this process now, in MB (/proc/self/status VmRSS).
double resident_mb() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    }
    return 0.0;
}

int fail(const Status& s) {
    TSR_LOG(ERROR, "{}", s.message());
    return 1;
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
        prompt = encode_prompt(*tok, o.prompt, o.chat);
    } else {
        prompt = parse_ids(o.prompt_ids);
    }
    if (!prompt.ok()) return fail(prompt.status());

    auto runtime = init_rank_runtime(o.server, internal_rank, internal_store);
    if (!runtime.ok()) return fail(runtime.status());
    const auto t_load = std::chrono::steady_clock::now();
    models::LoadOptions load{o.server.model_path, o.server.dtype};
    load.tp_rank = runtime->coords.tp_rank;
    load.tp_size = o.server.tp_size;
    load.tp_group = runtime->tp_group.get();
    auto model = models::load_model(load);
    if (!model.ok()) return fail(model.status());
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    const int threads = runtime->threads;
    ThreadPool pool(threads);
    TSR_LOG(INFO, "model loaded in {:.2f} s: {:.1f} MB of {} weights; {} threads, {} kernels",
            load_s, (*model)->weight_bytes() / 1e6, dtype_name((*model)->compute_dtype()), threads,
            kernels::isa_name(kernels::active_isa()));

    executor::GenerateOptions gen;
    gen.max_new_tokens = o.max_new_tokens;
    gen.sampling = {o.temperature, o.top_k, o.top_p, o.min_p, o.seed};
    gen.ignore_eos = o.ignore_eos;
    gen.capture_logits = !o.logits_out.empty();
    auto result = executor::generate(**model, *prompt, gen, &pool);
    if (!result.ok()) return fail(result.status());
    const auto& r = *result;
    if (!runtime->is_output_rank()) return 0;  // every rank computed the same tokens; one reports

    const auto n_prompt = static_cast<double>(prompt->size());
    const auto n_out = static_cast<double>(r.output_ids.size());
    const double prefill_tps = n_prompt / r.prefill_s;
    const double decode_tps = n_out > 1 ? (n_out - 1) / r.decode_s : 0.0;
    if (!o.logits_out.empty()) {
        const std::int64_t vocab = (*model)->config().vocab_size;
        const auto rows = static_cast<std::int64_t>(r.logits.size()) / vocab;
        Status s = write_npy(o.logits_out, r.logits, rows, vocab);
        if (!s.ok()) return fail(s);
    }
    const std::string text = tok ? tok->decode(r.output_ids, /*skip_special_tokens=*/true) : "";
    if (o.json) {
        nlohmann::json j = {{"output_ids", r.output_ids},
                            {"finish_reason", r.finish_reason},
                            {"prompt_tokens", prompt->size()},
                            {"completion_tokens", r.output_ids.size()},
                            {"ttft_s", r.ttft_s},
                            {"prefill_s", r.prefill_s},
                            {"decode_s", r.decode_s},
                            {"prefill_tokens_per_s", prefill_tps},
                            {"decode_tokens_per_s", decode_tps},
                            {"load_s", load_s},
                            {"threads", threads},
                            {"dtype", dtype_name((*model)->compute_dtype())},
                            {"kernels", kernels::isa_name(kernels::active_isa())},
                            {"tp_size", o.server.tp_size},
                            {"weight_mb_per_rank", (*model)->weight_bytes() / 1e6},
                            {"rss_mb", resident_mb()}};
        if (tok) j["text"] = text;
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::string ids;
        for (auto t : r.output_ids) {
            if (!ids.empty()) ids += ',';
            ids += std::to_string(t);
        }
        if (tok) std::printf("text: %s\n", text.c_str());
        std::printf("output_ids: %s\n", ids.c_str());
        std::printf("finish_reason: %s\n", r.finish_reason.c_str());
        std::printf("prompt: %zu tokens, prefill %.1f tok/s (ttft %.3f s)\n", prompt->size(),
                    prefill_tps, r.ttft_s);
        std::printf("decode: %zu tokens, %.1f tok/s\n", r.output_ids.size(), decode_tps);
    }
    return 0;
}

}  // namespace tessera::app
