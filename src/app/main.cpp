// The one `tessera` binary: subcommands make-model and generate (serve, bench, gateway,
// plan and tokenize arrive with their capabilities).

#include <CLI/CLI.hpp>

#include "app/commands.h"
#include "app/make_model.h"
#include "base/env.h"
#include "base/logging.h"
#include "server/server_args.h"

namespace {

void set_log_level(const std::string& level) {
    using tessera::logging::Level;
    if (level == "debug") tessera::logging::set_min_level(Level::kDebug);
    if (level == "info") tessera::logging::set_min_level(Level::kInfo);
    if (level == "warn" || level == "warning") tessera::logging::set_min_level(Level::kWarn);
    if (level == "error") tessera::logging::set_min_level(Level::kError);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"tessera: a native LLM serving engine with SGLang's multi-device parallelism"};
    app.require_subcommand(1);
    std::string log_level = tessera::env().log_level.empty() ? "info" : tessera::env().log_level;
    app.add_option("--log-level", log_level, "debug, info, warn or error (env: TSR_LOG_LEVEL)")
        ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error"}));

    tessera::app::MakeModelOptions mm;
    auto* make_model = app.add_subcommand(
        "make-model", "write a random-weight Hugging Face model folder (config.json, "
                      "model.safetensors, tokenizer files)");
    make_model->add_option("--arch", mm.arch, "architecture")
        ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "qwen3-moe", "deepseek-v2"}))
        ->capture_default_str();
    make_model->add_option("--preset", mm.preset, "tiny: unit tests; small: Qwen3-0.6B shapes")
        ->check(CLI::IsMember({"tiny", "small"}))
        ->capture_default_str();
    make_model->add_option("--dtype", mm.dtype, "weight storage type")
        ->check(CLI::IsMember({"f32", "bf16"}))
        ->capture_default_str();
    make_model->add_option("--seed", mm.seed, "random seed of the weights")->capture_default_str();
    make_model->add_option("--tokenizer", mm.tokenizer,
                           "copy a real tokenizer in and take its vocab size: qwen3, llama3 or "
                           "none (small models default to their family's)")
        ->check(CLI::IsMember({"qwen3", "llama3", "none"}));
    make_model->add_option("--tokenizer-dir", mm.tokenizer_dir,
                           "folder holding qwen3/ and llama3/ tokenizer files (env: TSR_TOKENIZER_ASSETS)");
    make_model->add_option("--out", mm.out, "output folder")->required();

    tessera::app::GenerateCommandOptions gen;
    auto* generate = app.add_subcommand("generate", "offline generation for one prompt, no server");
    tessera::server::FlagTable generate_flags(*generate, gen.server);
    generate->add_option("--prompt-ids", gen.prompt_ids, "prompt token ids, e.g. 1,2,3");
    generate->add_option("--prompt", gen.prompt, "prompt text (needs the tokenizer)");
    generate->add_option("--max-new-tokens", gen.max_new_tokens, "tokens to generate")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30))
        ->capture_default_str();
    generate->add_option("--temperature", gen.temperature, "0 = greedy")
        ->check(CLI::Range(0.0f, 100.0f))
        ->capture_default_str();
    generate->add_option("--top-k", gen.top_k, "-1 = all tokens")->capture_default_str();
    generate->add_option("--top-p", gen.top_p, "nucleus mass in (0, 1]")
        ->check(CLI::Range(1e-6f, 1.0f))
        ->capture_default_str();
    generate->add_option("--min-p", gen.min_p, "drop tokens below min_p x the top probability")
        ->check(CLI::Range(0.0f, 1.0f))
        ->capture_default_str();
    generate->add_option("--seed", gen.seed, "sampling seed")->capture_default_str();
    generate->add_flag("--ignore-eos", gen.ignore_eos, "keep generating past end-of-sequence tokens");
    generate->add_flag("--json", gen.json, "print exactly one JSON object on stdout (logs on stderr)");
    generate->add_option("--logits-out", gen.logits_out,
                         "write every logits row (prompt and decode steps) as .npy f32 [rows, vocab]");

    CLI11_PARSE(app, argc, argv);
    set_log_level(log_level);

    if (make_model->parsed()) {
        tessera::Status s = tessera::app::make_model(mm);
        if (!s.ok()) {
            TSR_LOG(ERROR, "{}", s.message());
            return 1;
        }
        return 0;
    }
    if (generate->parsed()) {
        tessera::Status s = generate_flags.check_unimplemented();
        if (s.ok()) s = gen.server.resolve();
        if (!s.ok()) {
            TSR_LOG(ERROR, "{}", s.message());
            return 2;
        }
        for (const auto& note : gen.server.notes) TSR_LOG(INFO, "{}", note);
        return tessera::app::run_generate(gen);
    }
    return 1;
}
