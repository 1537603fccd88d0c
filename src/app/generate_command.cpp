#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/commands.h"
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

int fail(const Status& s) {
    TSR_LOG(ERROR, "{}", s.message());
    return 1;
}

}  // namespace

int run_generate(const GenerateCommandOptions& o) {
    if (!o.prompt.empty()) {
        return fail(Status::Unimplemented(
            "--prompt needs the tokenizer, which this build does not have yet; pass token ids "
            "with --prompt-ids 1,2,3"));
    }
    if (o.prompt_ids.empty()) return fail(Status::InvalidArgument("give the prompt with --prompt-ids 1,2,3"));
    auto prompt = parse_ids(o.prompt_ids);
    if (!prompt.ok()) return fail(prompt.status());

    const auto t_load = std::chrono::steady_clock::now();
    auto model = models::load_model({o.server.model_path, o.server.dtype});
    if (!model.ok()) return fail(model.status());
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    const int threads = o.server.threads_per_rank > 0 ? o.server.threads_per_rank : default_thread_count();
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
                            {"kernels", kernels::isa_name(kernels::active_isa())}};
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::string ids;
        for (auto t : r.output_ids) ids += (ids.empty() ? "" : ",") + std::to_string(t);
        std::printf("output_ids: %s\n", ids.c_str());
        std::printf("finish_reason: %s\n", r.finish_reason.c_str());
        std::printf("prompt: %zu tokens, prefill %.1f tok/s (ttft %.3f s)\n", prompt->size(),
                    prefill_tps, r.ttft_s);
        std::printf("decode: %zu tokens, %.1f tok/s\n", r.output_ids.size(), decode_tps);
    }
    return 0;
}

}  // namespace tessera::app
