// The one `tessera` binary: subcommands make-model, generate, serve, gateway, bench, plan,
// tokenize and eplb.

#include <algorithm>
#include <csignal>

#include <CLI/CLI.hpp>

#include "app/commands.h"
#include "app/launcher.h"
#include "app/make_model.h"
#include "base/env.h"
#include "base/logging.h"
#include "server/server_args.h"

namespace {

void set_log_level(const std::string& level) {
    if (const auto named = tessera::logging::level_named(level)) tessera::logging::set_min_level(*named);
}

// One line for every flag that was accepted but changes nothing here (the launcher's ranks
// re-read the command line: only the launching process says it).
void log_ignored_flags(const tessera::server::FlagTable& table, bool is_started_rank) {
    const std::vector<std::string> ignored = table.ignored_flags();
    if (ignored.empty() || is_started_rank) return;
    std::string list;
    for (const std::string& f : ignored) list += (list.empty() ? "" : ", ") + f;
    TSR_LOG(INFO, "accepted with no effect on this CPU engine: {}", list);
}

}  // namespace

int main(int argc, char** argv) {
    // A peer that dies must surface as an error from its socket, not kill this process.
    std::signal(SIGPIPE, SIG_IGN);
    // `tessera bench serve|one-batch ...` has its own flag set (app/bench_command.cpp).
    if (argc > 1 && std::string(argv[1]) == "bench") return tessera::app::run_bench(argc - 1, argv + 1);
    // `tessera plan ...` takes serve's flags plus its own (app/plan_command.cpp).
    if (argc > 1 && std::string(argv[1]) == "plan") return tessera::app::run_plan(argc - 1, argv + 1);
    // `tessera gateway ...`: sgl-model-gateway's flags (app/gateway_command.cpp).
    if (argc > 1 && std::string(argv[1]) == "gateway") return tessera::app::run_gateway(argc - 1, argv + 1);
    CLI::App app{"tessera: a native LLM serving engine with SGLang's multi-device parallelism"};
    app.require_subcommand(1);
    app.footer("More subcommands, each with its own --help:\n"
               "  gateway                     route requests over workers (cache_aware, round_robin, ...)\n"
               "  plan                        a launch's ranks, memory, traffic and pipeline bubble, before starting it\n"
               "  bench serve|one-batch       load generator against a server; one static batch without one");
    std::string log_level = tessera::env().log_level.empty() ? "info" : tessera::env().log_level;
    app.add_option("--log-level", log_level, "debug, info, warn or error (env: TSR_LOG_LEVEL)")
        ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error"}));

    tessera::app::MakeModelOptions mm;
    auto* make_model = app.add_subcommand(
        "make-model", "write a random-weight Hugging Face model folder (config.json, "
                      "model.safetensors, tokenizer files)");
    make_model->add_option("--arch", mm.arch, "architecture")
        ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "qwen3-moe", "qwen2-moe", "mixtral", "deepseek-v2", "deepseek-v3"}))
        ->capture_default_str();
    make_model->add_option("--preset", mm.preset, "tiny: unit tests; small: Qwen3-0.6B shapes")
        ->check(CLI::IsMember({"tiny", "small"}))
        ->capture_default_str();
    make_model->add_option("--dtype", mm.dtype, "weight storage type")
        ->check(CLI::IsMember({"f32", "bf16"}))
        ->capture_default_str();
    make_model->add_option("--seed", mm.seed, "random seed of the weights")->capture_default_str();
    make_model->add_option("--num-layers", mm.num_layers, "decoder layers (default: the preset's)");
    make_model->add_option("--fp8-block", mm.fp8_block,
                           "write an FP8 checkpoint: projections as e4m3 codes with one weight_scale_inv per N x N "
                           "block (128 as DeepSeek-V3 and Qwen3-FP8 ship); routers, norms, embeddings stay --dtype");
    make_model->add_option("--router-skew", mm.router_skew,
                           "deepseek-v3: add s*(E-1-e)/(E-1) to expert e's routing bias, a skewed load for EPLB "
                           "benchmarks (0: none)");
    make_model->add_option("--tokenizer", mm.tokenizer,
                           "copy a real tokenizer in and take its vocab size: qwen3, llama3, mistral, gpt2 "
                           "(a GPT-2-style file written from Qwen3's vocabulary) or none (small models "
                           "default to their family's)")
        ->check(CLI::IsMember({"qwen3", "llama3", "mistral", "gpt2", "none"}));
    make_model->add_option("--tokenizer-dir", mm.tokenizer_dir,
                           "folder holding qwen3/ and llama3/ tokenizer files (env: TSR_TOKENIZER_ASSETS)");
    make_model->add_option("--out", mm.out, "output folder")->required();

    tessera::app::GenerateCommandOptions gen;
    auto* generate = app.add_subcommand("generate", "offline generation for one prompt, no server");
    tessera::server::FlagTable generate_flags(*generate, gen.server, tessera::server::FlagTable::Mode::kGenerate);
    // Set by the launcher in the rank processes it starts; hidden from --help.
    std::optional<int> internal_rank;
    std::string internal_store;
    generate->add_option_function<int>("--internal-rank", [&](const int& r) { internal_rank = r; })->group("");
    generate->add_option("--internal-store", internal_store)->group("");
    generate->add_option("--prompt-ids", gen.prompt_ids, "prompt token ids, e.g. 1,2,3");
    generate->add_option("--prompt", gen.prompt, "prompt text, encoded with the model's tokenizer");
    generate->add_flag("--chat", gen.chat, "render --prompt as a user message with the model's chat template");
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

    tessera::server::ServerArgs serve_args;
    auto* serve = app.add_subcommand("serve", "the OpenAI-compatible HTTP server");
    tessera::server::FlagTable serve_flags(*serve, serve_args, tessera::server::FlagTable::Mode::kServe);
    std::optional<int> serve_rank;
    std::string serve_store;
    serve->add_option_function<int>("--internal-rank", [&](const int& r) { serve_rank = r; })->group("");
    serve->add_option("--internal-store", serve_store)->group("");

    tessera::app::TokenizeCommandOptions tk;
    auto* tokenize = app.add_subcommand(
        "tokenize", "the model's tokenizer on stdin/stdout, one JSON value per line: a string in, ids out; "
                    "with --decode ids in, a string out; with --chat messages in, the prompt out");
    tokenize->add_option("--model-path,--model", tk.model_path, "folder with tokenizer.json")->required();
    tokenize->add_flag("--add-special-tokens", tk.add_special_tokens, "apply BOS / post-processing when encoding");
    tokenize->add_flag("--decode", tk.decode, "decode arrays of ids");
    tokenize->add_flag("--skip-special-tokens", tk.skip_special_tokens, "drop special tokens when decoding");
    tokenize->add_flag("--chat", tk.chat,
                       "render a messages array, or {\"messages\": [...], \"add_generation_prompt\": true, "
                       "\"enable_thinking\": false, \"tools\": [...]}, with the model's chat template");

    std::string checksum_model;
    auto* checksum = app.add_subcommand(
        "checksum", "the SHA-256 manifest of a model folder's files as SGLang's --model-checksum reads it (JSON on "
                    "stdout): `tessera checksum --model-path DIR > checksums.json`");
    checksum->add_option("--model-path,--model", checksum_model, "the model folder")->required();

    auto* eplb = app.add_subcommand(
        "eplb", "DeepSeek's expert placement, offline: one JSON object per line on stdin, {\"weight\": [[tokens per "
                "expert, per layer]], \"num_replicas\": R, \"num_groups\": G, \"num_nodes\": N, \"num_gpus\": M}, "
                "one {\"phy2log\", \"log2phy\", \"logcnt\"} per line on stdout");

    // `serve` and `generate` read their arguments as SGLang's argparse does (unique prefixes,
    // --config) before CLI11 sees them.
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] != "serve" && args[i] != "generate") continue;
        const tessera::server::FlagTable& table = args[i] == "serve" ? serve_flags : generate_flags;
        auto read = table.read_command_line({args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end()});
        if (!read.ok()) {
            TSR_LOG(ERROR, "{}", read.status().message());
            return 2;
        }
        args.resize(i + 1);
        args.insert(args.end(), read.value().begin(), read.value().end());
        break;
    }
    std::reverse(args.begin(), args.end());
    try {
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    set_log_level(serve->count("--log-level") ? serve_args.log_level
                  : generate->count("--log-level") ? gen.server.log_level : log_level);

    if (make_model->parsed()) {
        tessera::Status s = tessera::app::make_model(mm);
        if (!s.ok()) {
            TSR_LOG(ERROR, "{}", s.message());
            return 1;
        }
        return 0;
    }
    if (tokenize->parsed()) return tessera::app::run_tokenize(tk);
    if (checksum->parsed()) return tessera::app::run_checksum(checksum_model);
    if (eplb->parsed()) return tessera::app::run_eplb();
    if (serve->parsed()) {
        if (tessera::Status s = serve_flags.resolve(); !s.ok()) {
            TSR_LOG(ERROR, "{}", s.message());
            return 2;
        }
        log_ignored_flags(serve_flags, serve_rank.has_value());
        if (tessera::Status s = serve_rank ? tessera::Status::Ok() : tessera::app::preflight_check(serve_args); !s.ok()) {
            TSR_LOG(ERROR, "{}", s.message());
            return 2;
        }
        if (tessera::Status s = serve_rank ? tessera::Status::Ok() : tessera::app::verify_model_checksum(serve_args);
            !s.ok()) {
            TSR_LOG(ERROR, "{}", s.message());
            return 2;
        }
        // Once per launch: by the launcher, or by the only rank.
        if (!serve_rank)
            for (const auto& note : serve_args.notes) TSR_LOG(INFO, "{}", note);
        auto layout = tessera::dist::ParallelLayout::create(serve_args.parallel_config());
        if (!serve_rank && layout.ok() && layout->world_size() > 1) {
            tessera::app::LaunchOptions launch;
            launch.argv.assign(argv, argv + argc);
            launch.dist_init_addr = serve_args.dist_init_addr;
            launch.nnodes = serve_args.nnodes;
            launch.node_rank = serve_args.node_rank;
            launch.http_port = serve_args.port;
            return tessera::app::launch_local_ranks(*layout, launch);
        }
        return tessera::app::run_serve(serve_args, serve_rank, serve_store);
    }
    if (generate->parsed()) {
        if (tessera::Status s = generate_flags.resolve(); !s.ok()) {
            TSR_LOG(ERROR, "{}", s.message());
            return 2;
        }
        log_ignored_flags(generate_flags, internal_rank.has_value());
        if (tessera::Status s = internal_rank ? tessera::Status::Ok() : tessera::app::preflight_check(gen.server);
            !s.ok()) {
            TSR_LOG(ERROR, "{}", s.message());
            return 2;
        }
        if (tessera::Status s = internal_rank ? tessera::Status::Ok() : tessera::app::verify_model_checksum(gen.server);
            !s.ok()) {
            TSR_LOG(ERROR, "{}", s.message());
            return 2;
        }
        if (!internal_rank) {
            for (const auto& note : gen.server.notes) TSR_LOG(INFO, "{}", note);
        }
        auto layout = tessera::dist::ParallelLayout::create(gen.server.parallel_config());
        if (!internal_rank && layout.ok() && layout->world_size() > 1) {
            tessera::app::LaunchOptions launch;
            launch.argv.assign(argv, argv + argc);
            launch.dist_init_addr = gen.server.dist_init_addr;
            launch.nnodes = gen.server.nnodes;
            launch.node_rank = gen.server.node_rank;
            return tessera::app::launch_local_ranks(*layout, launch);
        }
        return tessera::app::run_generate(gen, internal_rank, internal_store);
    }
    return 1;
}
